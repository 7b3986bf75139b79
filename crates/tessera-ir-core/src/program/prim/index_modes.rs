//! What `gather` and `scatter-add` do with out-of-bounds indices: JAX's `GatherScatterMode`.
//!
//! - `CLIP`: start indices are clamped so the whole slice (window) fits. XLA's `gather` clamps
//!   by itself; a `scatter-add` gets its indices clamped first (`scatter_clip_program` in `tessera_transform::programs`).
//! - `FILL_OR_DROP`: a gather whose slice does not fit gives the fill value (`fill_value`, or
//!   JAX's default for the dtype: NaN for floats, the minimum of signed integers, the maximum of
//!   unsigned ones, `True`) for the whole slice (`gather_fill_program` in `tessera_transform::programs`: a clamped gather and a
//!   mask, as JAX lowers it); a scatter whose window does not fit is dropped whole (XLA's
//!   `scatter` does that by itself).
//! - `PROMISE_IN_BOUNDS`: the caller promises the indices fit; lowered like XLA's defaults
//!   (clamped gather, dropped scatter windows), and interpreted the same way.

use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::program::params::{ParamValue, Params};
use crate::program::prim::ScatterDims;

/// JAX's `GatherScatterMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GatherScatterMode {
    /// Clamp start indices so the slice fits.
    Clip,
    /// Out-of-bounds gathers give the fill value; out-of-bounds scatters are dropped.
    FillOrDrop,
    /// The indices are promised to be in bounds.
    PromiseInBounds,
}

impl GatherScatterMode {
    /// Every mode.
    pub const ALL: [GatherScatterMode; 3] = [
        GatherScatterMode::Clip,
        GatherScatterMode::FillOrDrop,
        GatherScatterMode::PromiseInBounds,
    ];

    /// The name JAX prints (`GatherScatterMode.CLIP`).
    pub fn name(self) -> &'static str {
        match self {
            GatherScatterMode::Clip => "GatherScatterMode.CLIP",
            GatherScatterMode::FillOrDrop => "GatherScatterMode.FILL_OR_DROP",
            GatherScatterMode::PromiseInBounds => "GatherScatterMode.PROMISE_IN_BOUNDS",
        }
    }

    /// The `mode` parameter value.
    pub fn param(self) -> ParamValue {
        ParamValue::Name(self.name().into())
    }

    /// Reads the `mode` parameter of `prim` (required: JAX always prints it).
    pub fn from_params(prim: &str, params: &Params) -> Result<Self> {
        let expected = "GatherScatterMode.CLIP, GatherScatterMode.FILL_OR_DROP or \
                        GatherScatterMode.PROMISE_IN_BOUNDS";
        match params.get("mode") {
            Some(ParamValue::Name(name)) => GatherScatterMode::ALL
                .into_iter()
                .find(|m| {
                    m.name() == name || m.name().strip_prefix("GatherScatterMode.") == Some(name)
                })
                .ok_or_else(|| param_error(prim, "mode", &format!("{expected}, got {name}"))),
            Some(other) => Err(param_error(
                prim,
                "mode",
                &format!("{expected}, got {other}"),
            )),
            None => Err(param_error(prim, "mode", expected)),
        }
    }
}

fn param_error(prim: &str, param: &str, expected: &str) -> IrError {
    IrError::Param {
        prim: prim.to_owned(),
        param: param.to_owned(),
        expected: expected.to_owned(),
    }
}

/// JAX's default fill of a `FILL_OR_DROP` gather.
pub(super) fn default_fill(dtype: DType) -> f64 {
    match dtype {
        DType::Bool => 1.0,
        DType::I8 => f64::from(i8::MIN),
        DType::I16 => f64::from(i16::MIN),
        DType::I32 => f64::from(i32::MIN),
        DType::I64 => i64::MIN as f64,
        DType::U8 => f64::from(u8::MAX),
        DType::U16 => f64::from(u16::MAX),
        DType::U32 => f64::from(u32::MAX),
        DType::U64 => u64::MAX as f64,
        DType::BF16 | DType::F16 | DType::F32 | DType::F64 => f64::NAN,
        // The key whose two words are 0.
        DType::KeyFry | DType::Token => 0.0,
    }
}

/// The window size of a scatter in each operand dimension: 1 where the window omits the
/// dimension, else the size of the matching update window dimension.
pub fn scatter_window_sizes(dn: &ScatterDims, updates: &[i64], rank: usize) -> Vec<i64> {
    let mut window = dn.update_window_dims.iter();
    (0..rank as i64)
        .map(|d| {
            if dn.inserted_window_dims.contains(&d) || dn.operand_batching_dims.contains(&d) {
                1
            } else {
                window
                    .next()
                    .and_then(|&w| updates.get(w as usize).copied())
                    .unwrap_or(1)
            }
        })
        .collect()
}
