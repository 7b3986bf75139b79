//! Tracing: build jaxprs by running Rust closures on [`Tensor`] handles.
//!
//! ```
//! use tessera_ir::trace::{trace, Tensor};
//! use tessera_ir::{DType, ShapedArray};
//! let f32_ = |s: &[usize]| ShapedArray::new(DType::F32, s);
//! let cj = trace(&[f32_(&[2, 3]), f32_(&[3, 4])], |x: Tensor, w: Tensor| (x.matmul(&w) * 2.0).tanh()).unwrap();
//! assert_eq!(cj.jaxpr.eqns.len(), 3);
//! ```
//!
//! A thread-local stack of trace frames holds the jaxprs being built; a [`Tensor`] is a handle
//! `{trace id, var, aval}`. Operations never panic: the first error (shape mismatch, unknown
//! axis, a tensor of another trace) is recorded in the frame and returned by [`trace`].
//! Binary operators broadcast numpy-style (lower-rank operands get a `broadcast_in_dim` to the
//! same rank, rank-0 operands stay scalar) and promote dtypes with JAX's weak-type rule: a Rust
//! literal takes the dtype of the tensor it meets. Operators take `f64` and `i32` literals
//! (`x * 2.0`, `x + 1`); the `*_scalar` methods take any [`IntoScalar`].

mod ops;

pub mod jnp;

pub use ops::{IntoScalar, concatenate, full, iota, select_n, where_};

use crate::ir::{Atom, ClosedJaxpr, Eqn, Jaxpr, Literal, Var};
use crate::prims::{Primitive, TypeError, abstract_eval};
use crate::types::ShapedArray;
use std::cell::{Cell, RefCell};

/// Tracing failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// A shape or dtype rule rejected an operation.
    #[error(transparent)]
    Type(#[from] TypeError),
    /// An operation got arguments it cannot use (an axis out of range, a bad shape).
    #[error("{op}: {message}")]
    Op {
        /// The operation.
        op: String,
        /// What was wrong, with the shapes.
        message: String,
    },
    /// A tensor was used outside the trace that made it.
    #[error(
        "a tensor of another trace was used in `{op}`; pass values into nested functions as arguments"
    )]
    ForeignTensor {
        /// The operation.
        op: String,
    },
    /// The function's parameter count differs from the avals given.
    #[error("the function takes {takes} arguments but {given} avals were given")]
    Arity {
        /// Parameters of the function.
        takes: usize,
        /// Avals given.
        given: usize,
    },
}

/// A traced value: a handle to a variable of the jaxpr being built.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    trace: u32,
    var: Var,
    aval: ShapedArray,
}

impl Tensor {
    /// The abstract value.
    pub fn aval(&self) -> &ShapedArray {
        &self.aval
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.aval.shape
    }

    /// The dtype.
    pub fn dtype(&self) -> crate::types::DType {
        self.aval.dtype
    }

    /// The rank.
    pub fn ndim(&self) -> usize {
        self.aval.ndim()
    }
}

/// An operand of an operation: a tensor or a literal.
#[derive(Clone, Debug)]
pub(crate) enum Operand {
    T(Tensor),
    L(Literal),
}

impl Operand {
    pub(crate) fn aval(&self) -> &ShapedArray {
        match self {
            Operand::T(t) => &t.aval,
            Operand::L(l) => &l.aval,
        }
    }
}

struct Frame {
    id: u32,
    jaxpr: Jaxpr,
    error: Option<TraceError>,
}

thread_local! {
    static STACK: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
    static NEXT_ID: Cell<u32> = const { Cell::new(0) };
}

/// Records `e` as the current trace's error if it is the first.
pub(crate) fn record(e: TraceError) {
    STACK.with(|s| {
        if let Some(f) = s.borrow_mut().last_mut() {
            f.error.get_or_insert(e);
        }
    });
}

/// A tensor standing for a failed operation's result (its trace already holds the error).
fn poison(aval: ShapedArray) -> Tensor {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        match s.last_mut() {
            Some(f) => Tensor {
                trace: f.id,
                var: f.jaxpr.new_var(aval.clone()),
                aval,
            },
            None => Tensor {
                trace: u32::MAX,
                var: Var(0),
                aval,
            },
        }
    })
}

/// Appends `prim` applied to `ins` to the current trace and returns its results.
pub(crate) fn bind(prim: Primitive, ins: &[Operand]) -> Vec<Tensor> {
    let fallback = ins
        .first()
        .map(|o| o.aval().clone())
        .unwrap_or_else(|| ShapedArray::scalar(crate::types::DType::F32));
    let r = STACK.with(|s| {
        let mut s = s.borrow_mut();
        let Some(f) = s.last_mut() else {
            return Err(None);
        };
        if ins
            .iter()
            .any(|o| matches!(o, Operand::T(t) if t.trace != f.id))
        {
            return Err(Some(TraceError::ForeignTensor {
                op: prim.name().into(),
            }));
        }
        let avals: Vec<ShapedArray> = ins.iter().map(|o| o.aval().clone()).collect();
        let outs = abstract_eval(&prim, &avals).map_err(|e| Some(e.into()))?;
        let inputs = ins
            .iter()
            .map(|o| match o {
                Operand::T(t) => Atom::Var(t.var),
                Operand::L(l) => Atom::Lit(l.clone()),
            })
            .collect();
        let vars: Vec<Var> = outs.iter().map(|a| f.jaxpr.new_var(a.clone())).collect();
        f.jaxpr.eqns.push(Eqn {
            prim,
            inputs,
            outputs: vars.clone(),
        });
        Ok(vars
            .into_iter()
            .zip(outs)
            .map(|(var, aval)| Tensor {
                trace: f.id,
                var,
                aval,
            })
            .collect())
    });
    match r {
        Ok(ts) => ts,
        Err(e) => {
            if let Some(e) = e {
                record(e);
            }
            vec![poison(fallback)]
        }
    }
}

/// Like [`bind`] for single-result primitives.
pub(crate) fn bind1(prim: Primitive, ins: &[Operand]) -> Tensor {
    let fallback = ins
        .first()
        .map(|o| o.aval().clone())
        .unwrap_or_else(|| ShapedArray::scalar(crate::types::DType::F32));
    bind(prim, ins)
        .into_iter()
        .next()
        .unwrap_or_else(|| poison(fallback))
}

/// Results of a traced function.
pub trait IntoOutputs {
    /// The tensors returned.
    fn into_outputs(self) -> Vec<Tensor>;
}

impl IntoOutputs for Tensor {
    fn into_outputs(self) -> Vec<Tensor> {
        vec![self]
    }
}

impl IntoOutputs for Vec<Tensor> {
    fn into_outputs(self) -> Vec<Tensor> {
        self
    }
}

impl IntoOutputs for (Tensor, Tensor) {
    fn into_outputs(self) -> Vec<Tensor> {
        vec![self.0, self.1]
    }
}

/// A function of tensors that can be traced; `M` marks its arity.
pub trait TraceFn<M> {
    /// The number of parameters.
    fn arity(&self) -> usize;
    /// Calls it with exactly `arity` tensors.
    fn call(self, args: Vec<Tensor>) -> Vec<Tensor>;
}

macro_rules! trace_fn {
    ($n:expr; $($v:ident: $t:ty),*) => {
        impl<F, R> TraceFn<($(TraceFnArg<$t>,)*)> for F
        where
            F: FnOnce($($t),*) -> R,
            R: IntoOutputs,
        {
            fn arity(&self) -> usize {
                $n
            }
            fn call(self, args: Vec<Tensor>) -> Vec<Tensor> {
                let mut it = args.into_iter();
                $(let Some($v) = it.next() else { return Vec::new() };)*
                self($($v),*).into_outputs()
            }
        }
    };
}

/// Marker type of [`TraceFn`] parameters.
pub struct TraceFnArg<T>(std::marker::PhantomData<T>);

trace_fn!(1; a: Tensor);
trace_fn!(2; a: Tensor, b: Tensor);
trace_fn!(3; a: Tensor, b: Tensor, c: Tensor);
trace_fn!(4; a: Tensor, b: Tensor, c: Tensor, d: Tensor);
trace_fn!(5; a: Tensor, b: Tensor, c: Tensor, d: Tensor, e: Tensor);

impl<F, R> TraceFn<Vec<Tensor>> for (usize, F)
where
    F: FnOnce(Vec<Tensor>) -> R,
    R: IntoOutputs,
{
    fn arity(&self) -> usize {
        self.0
    }
    fn call(self, args: Vec<Tensor>) -> Vec<Tensor> {
        (self.1)(args).into_outputs()
    }
}

/// Traces `f` on parameters of avals `in_avals` into a closed jaxpr.
pub fn trace<M>(in_avals: &[ShapedArray], f: impl TraceFn<M>) -> Result<ClosedJaxpr, TraceError> {
    if f.arity() != in_avals.len() {
        return Err(TraceError::Arity {
            takes: f.arity(),
            given: in_avals.len(),
        });
    }
    let id = NEXT_ID.with(|n| {
        let id = n.get();
        n.set(id.wrapping_add(1));
        id
    });
    let mut jaxpr = Jaxpr::default();
    let args: Vec<Tensor> = in_avals
        .iter()
        .map(|a| {
            let var = jaxpr.new_var(a.clone());
            jaxpr.invars.push(var);
            Tensor {
                trace: id,
                var,
                aval: a.clone(),
            }
        })
        .collect();
    STACK.with(|s| {
        s.borrow_mut().push(Frame {
            id,
            jaxpr,
            error: None,
        })
    });
    let outs = f.call(args);
    let frame = STACK.with(|s| s.borrow_mut().pop());
    let Some(mut frame) = frame else {
        return Err(TraceError::Op {
            op: "trace".into(),
            message: "the trace stack was emptied".into(),
        });
    };
    if let Some(e) = frame.error {
        return Err(e);
    }
    for t in outs {
        if t.trace != id {
            return Err(TraceError::ForeignTensor {
                op: "return".into(),
            });
        }
        frame.jaxpr.outvars.push(Atom::Var(t.var));
    }
    Ok(ClosedJaxpr::new(frame.jaxpr))
}

/// Calls `f` as a nested function named `name` (a `jit` equation with its own body).
pub fn jit<M>(name: &str, args: &[&Tensor], f: impl TraceFn<M>) -> Vec<Tensor> {
    let avals: Vec<ShapedArray> = args.iter().map(|t| t.aval.clone()).collect();
    match trace(&avals, f) {
        Ok(body) => {
            let ins: Vec<Operand> = args.iter().map(|t| Operand::T((*t).clone())).collect();
            bind(
                Primitive::Jit {
                    name: name.into(),
                    jaxpr: Box::new(body),
                },
                &ins,
            )
        }
        Err(e) => {
            record(e);
            vec![poison(avals.first().cloned().unwrap_or_else(|| {
                ShapedArray::scalar(crate::types::DType::F32)
            }))]
        }
    }
}
