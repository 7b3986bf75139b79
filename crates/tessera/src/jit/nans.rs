//! JAX's `jax_debug_nans` for `jit`: with [`Jit::debug_nans`], a call whose floating-point
//! results hold a NaN fails with [`JitError::Nan`] instead of returning them, and, as JAX
//! re-runs the function de-optimized to find the primitive, the program is run again on the
//! reference interpreter on the same arguments, equation by equation, to name the first
//! top-level equation that made a NaN from operands without one. Reading every result back to
//! the host costs a copy per call: a debugging mode, off by default.

use tessera_ir::{Array, Atom, ClosedJaxpr};
use tessera_pjrt::Array as DeviceArray;

use super::{Jit, JitError, from_host};

impl Jit {
    /// The same program checking every call's floating-point results for NaNs (JAX's
    /// `jax_debug_nans`): a result holding one makes the call fail with [`JitError::Nan`], naming
    /// the result and the equation that first made a NaN.
    pub fn debug_nans(mut self, on: bool) -> Jit {
        self.debug_nans = on;
        self
    }
}

/// Fails with [`JitError::Nan`] when a floating-point result of `program`, run on `args`, holds
/// a NaN.
pub(super) fn check(
    program: &ClosedJaxpr,
    args: &[&DeviceArray],
    outputs: &[DeviceArray],
) -> Result<(), JitError> {
    let avals = program.jaxpr.out_avals();
    for (index, (output, aval)) in outputs.iter().zip(&avals).enumerate() {
        if !aval.dtype.is_float() {
            continue;
        }
        let host = from_host(&output.to_host()?, aval.dtype)?;
        if has_nan(&host) {
            return Err(JitError::Nan {
                result: index,
                equation: first_nan_equation(program, args)?,
            });
        }
    }
    Ok(())
}

fn has_nan(array: &Array) -> bool {
    array.dtype().is_float() && array.to_vec().iter().any(|v| v.is_nan())
}

/// The first top-level equation of `program` that, on the interpreter, makes a NaN from
/// operands without one, in words (`equation 3 (log)`); `None` when the arguments hold NaNs
/// already or the interpreter makes none (XLA's arithmetic differs from it, e.g. in fused
/// transcendentals).
fn first_nan_equation(
    program: &ClosedJaxpr,
    args: &[&DeviceArray],
) -> Result<Option<String>, JitError> {
    let jaxpr = &program.jaxpr;
    let avals = jaxpr.in_avals();
    let mut env: Vec<Option<Array>> = vec![None; jaxpr.vars.len()];
    for (&var, value) in jaxpr.constvars.iter().zip(&program.consts) {
        env[var.index()] = Some(value.clone());
    }
    for ((&var, arg), aval) in jaxpr.invars.iter().zip(args).zip(&avals) {
        let value = from_host(&arg.to_host()?, aval.dtype)?;
        if has_nan(&value) {
            return Ok(None);
        }
        env[var.index()] = Some(value);
    }
    let read = |env: &[Option<Array>], atom: &Atom| -> Result<Array, JitError> {
        match atom {
            Atom::Var(v) => env[v.index()]
                .clone()
                .ok_or_else(|| JitError::Convert(format!("variable {} is read unset", v.0))),
            Atom::Lit(l) => Ok(l.to_array()),
        }
    };
    for (index, eqn) in jaxpr.eqns.iter().enumerate() {
        let inputs = (eqn.inputs.iter())
            .map(|a| read(&env, a))
            .collect::<Result<Vec<_>, _>>()?;
        let out_avals: Vec<_> = eqn.outputs.iter().map(|&v| jaxpr.aval(v).clone()).collect();
        let results = eqn
            .prim
            .eval(&eqn.params, &inputs, &out_avals)
            .map_err(|e| JitError::Convert(format!("interpreting equation {index}: {e}")))?;
        if !inputs.iter().any(has_nan) && results.iter().any(has_nan) {
            return Ok(Some(format!("equation {index} ({})", eqn.prim.name())));
        }
        for (&var, value) in eqn.outputs.iter().zip(results) {
            env[var.index()] = Some(value);
        }
    }
    Ok(None)
}
