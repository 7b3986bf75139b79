//! The IR: `Jaxpr`, `ClosedJaxpr`, equations, variables and literals.
//!
//! Variables live in an arena per jaxpr (`Jaxpr::vars`, indexed by [`Var`]); names are assigned
//! only when printing. Equations are kept in program order. Nested jaxprs (the body of `jit`)
//! live in the params of their primitive and have their own arenas.

use crate::interp::Array;
use crate::prims::Primitive;
use crate::types::{DType, ShapedArray};
use std::fmt;

/// A variable: an index into its jaxpr's arena of avals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var(pub u32);

impl Var {
    /// The arena index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// The value of a literal scalar.
#[derive(Clone, Copy, Debug)]
pub enum Scalar {
    /// A boolean (`True`, `False`).
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float (held as f64; rounded to the literal's dtype when used).
    Float(f64),
}

impl PartialEq for Scalar {
    fn eq(&self, other: &Scalar) -> bool {
        match (self, other) {
            (Scalar::Bool(a), Scalar::Bool(b)) => a == b,
            (Scalar::Int(a), Scalar::Int(b)) => a == b,
            (Scalar::Float(a), Scalar::Float(b)) => a.to_bits() == b.to_bits(),
            _ => false,
        }
    }
}

impl Scalar {
    /// The value as f64.
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => f64::from(u8::from(b)),
            Scalar::Int(i) => i as f64,
            Scalar::Float(x) => x,
        }
    }
}

/// A rank-0 constant written inline, like `0.0:f32[]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Literal {
    /// The value.
    pub value: Scalar,
    /// The aval (always rank 0).
    pub aval: ShapedArray,
}

impl Literal {
    /// A weakly typed literal of `dtype` (what a Rust or Python scalar becomes).
    pub fn new(value: Scalar, dtype: DType) -> Literal {
        Literal {
            value,
            aval: ShapedArray::scalar(dtype).weak(true),
        }
    }
}

/// An operand: a variable or a literal.
#[derive(Clone, Debug, PartialEq)]
pub enum Atom {
    /// A variable of the enclosing jaxpr.
    Var(Var),
    /// An inline literal.
    Lit(Literal),
}

/// One equation: `outputs = primitive[params] inputs`.
#[derive(Clone, Debug, PartialEq)]
pub struct Eqn {
    /// The primitive with its params.
    pub prim: Primitive,
    /// The operands.
    pub inputs: Vec<Atom>,
    /// The results (fresh variables).
    pub outputs: Vec<Var>,
}

/// An open jaxpr: `{ lambda constvars ; invars . let eqns in (outvars) }`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Jaxpr {
    /// The aval of every variable, indexed by [`Var`].
    pub vars: Vec<ShapedArray>,
    /// Variables bound to the constants of a [`ClosedJaxpr`].
    pub constvars: Vec<Var>,
    /// The parameters.
    pub invars: Vec<Var>,
    /// The equations, in program order.
    pub eqns: Vec<Eqn>,
    /// The results.
    pub outvars: Vec<Atom>,
}

impl Jaxpr {
    /// Adds a variable of `aval` to the arena.
    pub fn new_var(&mut self, aval: ShapedArray) -> Var {
        let v = Var(self.vars.len() as u32);
        self.vars.push(aval);
        v
    }

    /// The aval of `v`, or `None` if `v` is not in this arena.
    pub fn aval(&self, v: Var) -> Option<&ShapedArray> {
        self.vars.get(v.index())
    }

    /// The aval of an atom, or `None` for a variable outside the arena.
    pub fn atom_aval<'a>(&'a self, a: &'a Atom) -> Option<&'a ShapedArray> {
        match a {
            Atom::Var(v) => self.aval(*v),
            Atom::Lit(l) => Some(&l.aval),
        }
    }

    /// The avals of the invars.
    pub fn in_avals(&self) -> Vec<ShapedArray> {
        self.invars
            .iter()
            .filter_map(|v| self.aval(*v).cloned())
            .collect()
    }

    /// The avals of the outvars.
    pub fn out_avals(&self) -> Vec<ShapedArray> {
        self.outvars
            .iter()
            .filter_map(|a| self.atom_aval(a).cloned())
            .collect()
    }
}

/// A jaxpr with values for its constvars.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClosedJaxpr {
    /// The program.
    pub jaxpr: Jaxpr,
    /// One array per constvar.
    pub consts: Vec<Array>,
}

impl ClosedJaxpr {
    /// A closed jaxpr without constants.
    pub fn new(jaxpr: Jaxpr) -> ClosedJaxpr {
        ClosedJaxpr {
            jaxpr,
            consts: Vec::new(),
        }
    }
}

impl fmt::Display for ClosedJaxpr {
    /// JAX's text form (see [`crate::text`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::text::print_jaxpr(&self.jaxpr))
    }
}

impl fmt::Display for Jaxpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::text::print_jaxpr(self))
    }
}
