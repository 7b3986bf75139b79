//! JAX's `jax_debug_nans` and `jax_debug_infs` for `jit`: with [`Jit::debug_nans`] (or
//! [`Jit::debug_infs`]), a call whose floating-point results hold a NaN (an infinity) fails with
//! [`JitError::Nan`] ([`JitError::Inf`]) instead of returning them, and, as JAX re-runs the
//! function de-optimized to find the primitive, the program is run again on the reference
//! interpreter on the same arguments, equation by equation, to name the first top-level
//! equation that made one from operands without one. Reading every result back to the host
//! costs a copy per call: a debugging mode, off by default.

use tessera_ir::interp::PrimEval;
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

    /// The same program checking every call's floating-point results for infinities (JAX's
    /// `jax_debug_infs`): a result holding one makes the call fail with [`JitError::Inf`],
    /// naming the result and the equation that first made an infinity.
    pub fn debug_infs(mut self, on: bool) -> Jit {
        self.debug_infs = on;
        self
    }
}

/// What a check looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Bad {
    /// NaNs (`debug_nans`).
    Nan,
    /// Infinities (`debug_infs`).
    Inf,
}

impl Bad {
    fn holds(self, array: &Array) -> bool {
        array.dtype().is_float()
            && array.to_vec().iter().any(|v| match self {
                Bad::Nan => v.is_nan(),
                Bad::Inf => v.is_infinite(),
            })
    }
}

/// Fails with [`JitError::Nan`] ([`JitError::Inf`]) when a floating-point result of `program`,
/// run on `args`, holds what `bad` looks for.
pub(super) fn check(
    bad: Bad,
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
        if bad.holds(&host) {
            let equation = first_bad_equation(bad, program, args)?;
            return Err(match bad {
                Bad::Nan => JitError::Nan {
                    result: index,
                    equation,
                },
                Bad::Inf => JitError::Inf {
                    result: index,
                    equation,
                },
            });
        }
    }
    Ok(())
}

/// The first top-level equation of `program` that, on the interpreter, makes what `bad` looks
/// for from operands without it, in words (`equation 3 (log)`); `None` when the arguments hold
/// it already or the interpreter makes none (XLA's arithmetic differs from it, e.g. in fused
/// transcendentals).
fn first_bad_equation(
    bad: Bad,
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
        if bad.holds(&value) {
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
        if !inputs.iter().any(|a| bad.holds(a)) && results.iter().any(|a| bad.holds(a)) {
            return Ok(Some(format!("equation {index} ({})", eqn.prim.name())));
        }
        for (&var, value) in eqn.outputs.iter().zip(results) {
            env[var.index()] = Some(value);
        }
    }
    Ok(None)
}
