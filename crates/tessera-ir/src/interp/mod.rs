//! The reference interpreter: evaluates a jaxpr on host arrays, the oracle for every backend.

mod array;

pub use array::{Array, Wide};

use crate::ir::{Atom, ClosedJaxpr, Jaxpr, Literal, Scalar};
use crate::prims;
use ndarray::{ArrayD, IxDyn};

/// Evaluation failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// An input array did not fit.
    #[error("bad input: {0}")]
    Input(String),
    /// A primitive could not run on its operands.
    #[error("{prim}: {message}")]
    Prim {
        /// The primitive's name.
        prim: String,
        /// What went wrong.
        message: String,
    },
    /// A variable was used before it had a value (run the verifier).
    #[error("variable {0} used before it was defined; run the verifier for details")]
    Undefined(String),
}

/// Builds an [`EvalError::Prim`].
pub(crate) fn prim_err(prim: &prims::Primitive, message: impl Into<String>) -> EvalError {
    EvalError::Prim {
        prim: prim.name().to_string(),
        message: message.into(),
    }
}

/// The array of a literal.
pub fn literal_array(lit: &Literal) -> Array {
    let w = match lit.value {
        Scalar::Bool(b) => Wide::B(ArrayD::from_elem(IxDyn(&[]), b)),
        Scalar::Int(i) => Wide::I(ArrayD::from_elem(IxDyn(&[]), i)),
        Scalar::Float(x) => Wide::F(ArrayD::from_elem(IxDyn(&[]), x)),
    };
    Array::from_wide(&w, lit.aval.dtype)
}

/// Evaluates a closed jaxpr on `args`.
pub fn eval_closed(cj: &ClosedJaxpr, args: &[Array]) -> Result<Vec<Array>, EvalError> {
    eval_jaxpr(&cj.jaxpr, &cj.consts, args)
}

/// Evaluates `jaxpr` with `consts` for its constvars and `args` for its invars.
pub fn eval_jaxpr(
    jaxpr: &Jaxpr,
    consts: &[Array],
    args: &[Array],
) -> Result<Vec<Array>, EvalError> {
    if args.len() != jaxpr.invars.len() || consts.len() != jaxpr.constvars.len() {
        return Err(EvalError::Input(format!(
            "the jaxpr takes {} arguments and {} constants, got {} and {}",
            jaxpr.invars.len(),
            jaxpr.constvars.len(),
            args.len(),
            consts.len()
        )));
    }
    let mut env: Vec<Option<Array>> = vec![None; jaxpr.vars.len()];
    let binders = jaxpr
        .constvars
        .iter()
        .zip(consts)
        .chain(jaxpr.invars.iter().zip(args));
    for (v, a) in binders {
        let want = jaxpr
            .aval(*v)
            .ok_or_else(|| EvalError::Undefined(v.to_string()))?;
        if a.dtype() != want.dtype || a.shape() != want.shape.as_slice() {
            return Err(EvalError::Input(format!(
                "argument of type {} given for a parameter of type {want}",
                a.aval()
            )));
        }
        env[v.index()] = Some(a.clone());
    }
    let read = |env: &Vec<Option<Array>>, a: &Atom| -> Result<Array, EvalError> {
        match a {
            Atom::Lit(l) => Ok(literal_array(l)),
            Atom::Var(v) => env
                .get(v.index())
                .and_then(|x| x.clone())
                .ok_or_else(|| EvalError::Undefined(v.to_string())),
        }
    };
    for eqn in &jaxpr.eqns {
        let ins = eqn
            .inputs
            .iter()
            .map(|a| read(&env, a))
            .collect::<Result<Vec<_>, _>>()?;
        let outs = prims::eval(&eqn.prim, &ins)?;
        if outs.len() != eqn.outputs.len() {
            return Err(prim_err(&eqn.prim, "wrong number of results"));
        }
        for (v, a) in eqn.outputs.iter().zip(outs) {
            let slot = env
                .get_mut(v.index())
                .ok_or_else(|| EvalError::Undefined(v.to_string()))?;
            *slot = Some(a);
        }
    }
    jaxpr.outvars.iter().map(|a| read(&env, a)).collect()
}
