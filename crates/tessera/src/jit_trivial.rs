//! The trivial-program fast path of [`crate::jit::Jit`] (JAX's `_is_trivial`): a program without
//! equations whose every result is an argument laid out as that result (the same
//! `NamedSharding`) or one of its constants runs without compiling anything. A result that is an
//! argument is that argument's array (sharing its buffers, as JAX returns the same array); a
//! constant is put on the devices by its result's sharding. A program that donates, whose result
//! is a literal, or whose result is an argument with another layout is compiled as usual.

use tessera_ir::{Atom, ClosedJaxpr};
use tessera_pjrt::{Array as DeviceArray, Client};
use tessera_sharding::NamedSharding;

use crate::jit::JitError;

/// Where a trivial program's result comes from.
enum Source {
    Argument(usize),
    Constant(usize),
}

/// Per result, its source, when `program` is trivial for these shardings and donates nothing.
fn sources(
    program: &ClosedJaxpr,
    in_shardings: &[NamedSharding],
    out_shardings: &[NamedSharding],
    donates: bool,
) -> Option<Vec<Source>> {
    let jaxpr = &program.jaxpr;
    if donates || !jaxpr.eqns.is_empty() {
        return None;
    }
    jaxpr
        .outvars
        .iter()
        .zip(out_shardings)
        .map(|(atom, out)| {
            let Atom::Var(v) = atom else { return None };
            if let Some(i) = jaxpr.invars.iter().position(|x| x == v) {
                return (in_shardings.get(i)? == out).then_some(Source::Argument(i));
            }
            let k = jaxpr.constvars.iter().position(|x| x == v)?;
            (k < program.consts.len()).then_some(Source::Constant(k))
        })
        .collect()
}

/// Whether `program` runs without compiling under these shardings.
pub(crate) fn is_trivial(
    program: &ClosedJaxpr,
    in_shardings: &[NamedSharding],
    out_shardings: &[NamedSharding],
    donates: bool,
) -> bool {
    // A program with effects (io_callback, debug_callback) must run them: it is compiled.
    !tessera_ir::prim::jaxpr_has_effects(&program.jaxpr)
        && sources(program, in_shardings, out_shardings, donates).is_some()
}

/// Runs a trivial program on checked arguments.
pub(crate) fn run(
    client: &Client,
    program: &ClosedJaxpr,
    in_shardings: &[NamedSharding],
    out_shardings: &[NamedSharding],
    args: &[&DeviceArray],
) -> Result<Vec<DeviceArray>, JitError> {
    let sources = sources(program, in_shardings, out_shardings, false).ok_or_else(|| {
        JitError::Convert("the program is not trivial; it must be compiled".into())
    })?;
    sources
        .iter()
        .zip(out_shardings)
        .map(|(source, sharding)| match *source {
            Source::Argument(i) => Ok(args[i].clone()),
            Source::Constant(k) => Ok(DeviceArray::device_put(
                client,
                &crate::jit::to_host(&program.consts[k])?,
                sharding,
            )?),
        })
        .collect()
}
