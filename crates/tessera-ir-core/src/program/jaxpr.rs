//! The jaxpr IR: variables are typed `u32` indices into an arena of avals, equations are kept in
//! program order, and nested jaxprs live in parameters. Names are assigned only when printing.

use crate::array::{Array, Elem};
use crate::aval::ShapedArray;
use crate::program::params::Params;
use crate::program::prim::Prim;

/// A variable: an index into its jaxpr's [`Jaxpr::vars`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var(pub u32);

impl Var {
    /// The arena index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A scalar literal operand such as `2.0:f32[]` or `True:bool[]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Literal {
    /// The value, in the dtype's domain (integers exact, booleans as 0/1).
    pub value: Elem,
    /// Its type (a scalar).
    pub aval: ShapedArray,
}

impl Literal {
    /// A literal of type `aval` holding `value` rounded to its dtype.
    pub fn new(value: f64, aval: ShapedArray) -> Literal {
        Literal {
            value: Elem::from_f64(aval.dtype, value),
            aval,
        }
    }

    /// The value as an `f64` (integers past 2^53 round).
    pub fn to_f64(&self) -> f64 {
        self.value.to_f64(self.aval.dtype)
    }

    /// The value as a scalar array (exact).
    pub fn to_array(&self) -> Array {
        Array::from_elems(
            self.aval.dtype,
            ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), self.value),
        )
    }
}

/// An operand: a variable or a literal.
#[derive(Debug, Clone, PartialEq)]
pub enum Atom {
    /// A variable.
    Var(Var),
    /// A literal.
    Lit(Literal),
}

/// One equation: `outputs = prim[params] inputs`.
#[derive(Debug, Clone, PartialEq)]
pub struct Eqn {
    /// The primitive.
    pub prim: Prim,
    /// Its parameters.
    pub params: Params,
    /// Operands.
    pub inputs: Vec<Atom>,
    /// Results.
    pub outputs: Vec<Var>,
}

/// A jaxpr: `{ lambda constvars ; invars . let eqns in (outvars) }`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Jaxpr {
    /// The type of every variable, by index.
    pub vars: Vec<ShapedArray>,
    /// Variables bound to the closed jaxpr's constants.
    pub constvars: Vec<Var>,
    /// Arguments.
    pub invars: Vec<Var>,
    /// Equations in program order.
    pub eqns: Vec<Eqn>,
    /// Results.
    pub outvars: Vec<Atom>,
}

impl Jaxpr {
    /// Adds a variable of type `aval`.
    pub fn new_var(&mut self, aval: ShapedArray) -> Var {
        self.vars.push(aval);
        Var((self.vars.len() - 1) as u32)
    }

    /// The type of a variable.
    pub fn aval(&self, var: Var) -> &ShapedArray {
        &self.vars[var.index()]
    }

    /// The type of an operand.
    pub fn atom_aval<'a>(&'a self, atom: &'a Atom) -> &'a ShapedArray {
        match atom {
            Atom::Var(v) => self.aval(*v),
            Atom::Lit(l) => &l.aval,
        }
    }

    /// The types of the arguments.
    pub fn in_avals(&self) -> Vec<ShapedArray> {
        self.invars.iter().map(|&v| self.aval(v).clone()).collect()
    }

    /// The types of the results.
    pub fn out_avals(&self) -> Vec<ShapedArray> {
        self.outvars
            .iter()
            .map(|a| self.atom_aval(a).clone())
            .collect()
    }
}

/// A jaxpr with values for its constvars.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClosedJaxpr {
    /// The program.
    pub jaxpr: Jaxpr,
    /// One array per constvar.
    pub consts: Vec<Array>,
}

impl ClosedJaxpr {
    /// A closed jaxpr without constants.
    pub fn new(jaxpr: Jaxpr) -> Self {
        ClosedJaxpr {
            jaxpr,
            consts: Vec::new(),
        }
    }

    /// The same program with its constvars as leading arguments and no constants (how
    /// transformations treat constants: as arguments they do not differentiate or batch).
    pub fn consts_as_args(&self) -> ClosedJaxpr {
        let mut jaxpr = self.jaxpr.clone();
        let mut invars = std::mem::take(&mut jaxpr.constvars);
        invars.append(&mut jaxpr.invars);
        jaxpr.invars = invars;
        ClosedJaxpr::new(jaxpr)
    }

    /// The inverse of [`ClosedJaxpr::consts_as_args`]: the first `consts.len()` arguments become
    /// constvars holding `consts` (after any constants the program already has).
    pub fn close_leading_args(&self, consts: &[Array]) -> ClosedJaxpr {
        let mut jaxpr = self.jaxpr.clone();
        let k = consts.len().min(jaxpr.invars.len());
        let rest = jaxpr.invars.split_off(k);
        let leading = std::mem::replace(&mut jaxpr.invars, rest);
        jaxpr.constvars.extend(leading);
        let mut all = self.consts.clone();
        all.extend_from_slice(&consts[..k]);
        ClosedJaxpr { jaxpr, consts: all }
    }
}
