//! The reference interpreter: evaluates a closed jaxpr on host arrays, equation by equation. It
//! is the oracle every backend is compared with.

use crate::array::Array;
use crate::error::{IrError, Result};
use crate::jaxpr::{Atom, ClosedJaxpr};

/// Evaluates `closed` on `args` (one array per invar, of the invar's type).
pub fn eval_closed(closed: &ClosedJaxpr, args: &[Array]) -> Result<Vec<Array>> {
    let jaxpr = &closed.jaxpr;
    if args.len() != jaxpr.invars.len() {
        return Err(IrError::Eval(format!(
            "the jaxpr takes {} arguments, got {}",
            jaxpr.invars.len(),
            args.len()
        )));
    }
    let mut env: Vec<Option<Array>> = vec![None; jaxpr.vars.len()];
    for (&var, value) in jaxpr
        .constvars
        .iter()
        .zip(&closed.consts)
        .chain(jaxpr.invars.iter().zip(args))
    {
        let aval = jaxpr.aval(var);
        if value.dtype() != aval.dtype || value.shape() != aval.shape {
            return Err(IrError::Eval(format!(
                "argument of type {} given for a parameter of type {aval}",
                value.aval()
            )));
        }
        env[var.index()] = Some(value.clone());
    }
    let read = |env: &[Option<Array>], atom: &Atom| -> Result<Array> {
        match atom {
            Atom::Var(v) => env[v.index()].clone().ok_or_else(|| {
                IrError::Eval(format!("variable {} is used before it is defined", v.0))
            }),
            Atom::Lit(l) => Ok(l.to_array()),
        }
    };
    for eqn in &jaxpr.eqns {
        let inputs = eqn
            .inputs
            .iter()
            .map(|a| read(&env, a))
            .collect::<Result<Vec<_>>>()?;
        let out_avals: Vec<_> = eqn.outputs.iter().map(|&v| jaxpr.aval(v).clone()).collect();
        let results = eqn.prim.eval(&eqn.params, &inputs, &out_avals)?;
        for (&var, value) in eqn.outputs.iter().zip(results) {
            env[var.index()] = Some(value);
        }
    }
    jaxpr.outvars.iter().map(|a| read(&env, a)).collect()
}
