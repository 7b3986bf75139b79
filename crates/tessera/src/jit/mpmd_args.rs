//! `MpmdArray`s as arguments of a `jit` program (JAXPP's `pytype_aval_mapping`, which lets a
//! jitted function take an `MpmdArray`): [`Compiled::call_with`] takes each argument as a
//! [`JitArg`], a plain device array or an `MpmdArray`. An `MpmdArray` passes as the first of
//! these views whose layout is the one the executable was compiled for: the whole array over
//! its groups ([`MpmdArray::to_global_array`]), then each group's own array, lowest group
//! first. When none fits, the lowest group's array goes to the argument check, whose error
//! names the layouts and how to reshard. No view copies data.

use tessera_mpmd::MpmdArray;
use tessera_pjrt::Array as DeviceArray;
use tessera_sharding::NamedSharding;

use super::{Compiled, JitError, layout};

/// One argument of [`Compiled::call_with`].
#[derive(Debug, Clone, Copy)]
pub enum JitArg<'a> {
    /// A device array, passed as [`Compiled::call`] takes it.
    Array(&'a DeviceArray),
    /// An `MpmdArray`, passed as one of its views (see the module docs).
    Mpmd(&'a MpmdArray),
}

impl<'a> From<&'a DeviceArray> for JitArg<'a> {
    fn from(array: &'a DeviceArray) -> Self {
        JitArg::Array(array)
    }
}

impl<'a> From<&'a MpmdArray> for JitArg<'a> {
    fn from(array: &'a MpmdArray) -> Self {
        JitArg::Mpmd(array)
    }
}

/// The view of `array` laid out by `want` (argument `index`), or its lowest group's array when
/// none is.
pub fn mpmd_argument(
    index: usize,
    array: &MpmdArray,
    want: &NamedSharding,
) -> Result<DeviceArray, JitError> {
    let mpmd = |e: tessera_mpmd::MpmdError| JitError::Convert(format!("argument {index}: {e}"));
    let rank = array.shape().len();
    let fits =
        |a: &DeviceArray| layout::check_argument_layout(index, a.sharding(), want, rank).is_ok();
    let global = array.to_global_array().map_err(mpmd)?;
    if fits(&global) {
        return Ok(global);
    }
    let locals = array.to_mpmd_local_arrays().map_err(mpmd)?;
    if let Some(local) = locals.values().find(|a| fits(a)) {
        return Ok(local.clone());
    }
    Ok(array.first_mpmd_replica().map_err(mpmd)?.clone())
}

impl Compiled {
    /// [`Compiled::call`] with arguments that may be `MpmdArray`s (see the module docs), e.g.
    /// the results of an `mpmd_jit` step: `compiled.call_with(&[(&weights).into(), (&x).into()])`.
    pub fn call_with(&self, args: &[JitArg<'_>]) -> Result<Vec<DeviceArray>, JitError> {
        let wants = self.input_shardings();
        let mut views: Vec<std::borrow::Cow<'_, DeviceArray>> = Vec::with_capacity(args.len());
        for (i, arg) in args.iter().enumerate() {
            views.push(match (arg, wants.get(i)) {
                (JitArg::Array(a), _) => std::borrow::Cow::Borrowed(*a),
                (JitArg::Mpmd(m), Some(want)) => {
                    std::borrow::Cow::Owned(mpmd_argument(i, m, want)?)
                }
                (JitArg::Mpmd(m), None) => std::borrow::Cow::Owned(
                    m.first_mpmd_replica()
                        .map_err(|e| JitError::Convert(format!("argument {i}: {e}")))?
                        .clone(),
                ),
            });
        }
        let refs: Vec<&DeviceArray> = views.iter().map(|v| v.as_ref()).collect();
        self.call(&refs)
    }
}
