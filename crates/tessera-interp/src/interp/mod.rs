//! The reference interpreter: evaluates a closed jaxpr on host arrays, equation by equation. It
//! is the oracle every backend is compared with. It holds every value on the host, so an
//! equation whose results would not fit its memory limit ([`memory`]) is refused with
//! [`IrError::InterpMemory`] before it runs. The primitives' evaluation rules are in [`rules`];
//! [`spmd`] runs a `shard_map` on simulated devices.

pub mod memory;
pub mod rules;
pub mod spmd;

pub use memory::{LIMIT_VAR, MemoryLimit};
pub use rules::PrimEval;

use crate::array::Array;
use crate::error::{IrError, Result};
use crate::jaxpr::{Atom, ClosedJaxpr};

/// [`eval_closed`] under `limit` instead of the process's limit (`TESSERA_INTERP_MAX_BYTES` or
/// the available memory), in nested jaxprs too.
pub fn eval_closed_with_limit(
    closed: &ClosedJaxpr,
    args: &[Array],
    limit: MemoryLimit,
) -> Result<Vec<Array>> {
    memory::with_limit(limit, || eval_closed(closed, args))
}

/// Evaluates `closed` on `args` (one array per invar, of the invar's type). An equation that
/// would need more memory than the limit in force ([`memory`]) is an
/// [`IrError::InterpMemory`].
pub fn eval_closed(closed: &ClosedJaxpr, args: &[Array]) -> Result<Vec<Array>> {
    let limit = memory::current()?;
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
    for (index, eqn) in jaxpr.eqns.iter().enumerate() {
        memory::check_equation(jaxpr, index, 1, &limit)?;
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
