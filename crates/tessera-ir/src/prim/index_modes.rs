//! What `gather` and `scatter-add` do with out-of-bounds indices: JAX's `GatherScatterMode`.
//!
//! - `CLIP`: start indices are clamped so the whole slice (window) fits. XLA's `gather` clamps
//!   by itself; a `scatter-add` gets its indices clamped first ([`scatter_clip_program`]).
//! - `FILL_OR_DROP`: a gather whose slice does not fit gives the fill value (`fill_value`, or
//!   JAX's default for the dtype: NaN for floats, the minimum of signed integers, the maximum of
//!   unsigned ones, `True`) for the whole slice ([`gather_fill_program`]: a clamped gather and a
//!   mask, as JAX lowers it); a scatter whose window does not fit is dropped whole (XLA's
//!   `scatter` does that by itself).
//! - `PROMISE_IN_BOUNDS`: the caller promises the indices fit; lowered like XLA's defaults
//!   (clamped gather, dropped scatter windows), and interpreted the same way.

use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{IrError, Result, type_error};
use crate::jaxpr::ClosedJaxpr;
use crate::params::{ParamValue, Params};
use crate::prim::{GatherParams, Prim, ScatterDims, ScatterParams};
use crate::trace::{Tensor, trace, where_};

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

/// Types without `vma` (the expansion programs are lowered in place, where manual axes do not
/// matter).
fn plain(avals: &[&ShapedArray]) -> Vec<ShapedArray> {
    avals
        .iter()
        .map(|a| ShapedArray::new(a.dtype, &a.shape))
        .collect()
}

/// A `FILL_OR_DROP` gather as JAX lowers it: a `PROMISE_IN_BOUNDS` gather, then the fill value
/// wherever an index vector starts a slice that does not fit (`0 <= i <= dim - slice_size` for
/// each component).
pub fn gather_fill_program(
    params: &Params,
    operand: &ShapedArray,
    indices: &ShapedArray,
    out: &ShapedArray,
) -> Result<ClosedJaxpr> {
    let typed = GatherParams::read(params)?;
    let (dn, sizes) = (&typed.dims, &typed.slice_sizes);
    let fill = typed.fill(operand.dtype);
    let inner = GatherParams {
        mode: GatherScatterMode::PromiseInBounds,
        ..typed.clone()
    }
    .to_params();
    let bounds: Vec<i64> = dn
        .start_index_map
        .iter()
        .map(|&d| {
            let d = d as usize;
            operand.shape.get(d).copied().unwrap_or(0) - sizes.get(d).copied().unwrap_or(0)
        })
        .collect();
    let batch_dims: Vec<i64> = (0..out.rank() as i64)
        .filter(|d| !dn.offset_dims.contains(d))
        .collect();
    trace(&plain(&[operand, indices]), |a| {
        let (x, idx) = (&a[0], &a[1]);
        let gathered = Tensor::bind1(Prim::Gather, inner, &[x, idx]);
        let last = idx.rank().saturating_sub(1);
        let batch_shape = idx.shape()[..last].to_vec();
        let mut mask: Option<Tensor> = None;
        for (k, &hi) in bounds.iter().enumerate() {
            let column =
                Tensor::slice_axis(idx, last, k as i64, k as i64 + 1).reshape(&batch_shape);
            let zero = column.literal(0.0, column.dtype());
            let top = column.literal(hi as f64, column.dtype());
            let fits = column
                .ge(&zero)
                .binary(Prim::And, &column.binary(Prim::Le, &top));
            mask = Some(match mask {
                Some(m) => m.binary(Prim::And, &fits),
                None => fits,
            });
        }
        let result = match mask {
            Some(m) => {
                let fill = gathered.literal_strong(fill, gathered.dtype());
                where_(
                    &m.broadcast_in_dim(&out.shape, &batch_dims),
                    &gathered,
                    &fill,
                )
            }
            None => gathered,
        };
        vec![result]
    })
}

/// A `CLIP` scatter-add as JAX lowers it: each index component clamped to
/// `0..=dim - window_size`, then a `PROMISE_IN_BOUNDS` scatter-add.
pub fn scatter_clip_program(
    params: &Params,
    operand: &ShapedArray,
    indices: &ShapedArray,
    updates: &ShapedArray,
) -> Result<ClosedJaxpr> {
    scatter_clip_program_for(Prim::ScatterAdd, params, operand, indices, updates)
}

/// [`scatter_clip_program`] for any scatter primitive (`scatter`, `scatter-mul`, ...).
pub fn scatter_clip_program_for(
    prim: Prim,
    params: &Params,
    operand: &ShapedArray,
    indices: &ShapedArray,
    updates: &ShapedArray,
) -> Result<ClosedJaxpr> {
    let typed = ScatterParams::read(params)?;
    let sizes = scatter_window_sizes(&typed.dims, &updates.shape, operand.rank());
    let bounds: Vec<i64> = typed
        .dims
        .scatter_dims_to_operand_dims
        .iter()
        .map(|&d| {
            let d = d as usize;
            operand.shape.get(d).copied().unwrap_or(0) - sizes.get(d).copied().unwrap_or(0)
        })
        .collect();
    if bounds.iter().any(|&b| b < 0) {
        return Err(type_error(
            prim.name(),
            format!("a window of sizes {sizes:?} does not fit operand {operand}"),
        ));
    }
    let inner = ScatterParams {
        mode: GatherScatterMode::PromiseInBounds,
        ..typed
    }
    .to_params();
    trace(&plain(&[operand, indices, updates]), |a| {
        let idx = &a[1];
        let last = idx.rank().saturating_sub(1);
        let columns: Vec<Tensor> = bounds
            .iter()
            .enumerate()
            .map(|(k, &hi)| {
                let column = Tensor::slice_axis(idx, last, k as i64, k as i64 + 1);
                let zero = column.literal(0.0, column.dtype());
                let top = column.literal(hi as f64, column.dtype());
                column.maximum(&zero).minimum(&top)
            })
            .collect();
        let clamped = if columns.is_empty() {
            idx.clone()
        } else if columns.len() == 1 {
            columns[0].clone()
        } else {
            let refs: Vec<&Tensor> = columns.iter().collect();
            let p = Params::new().with("dimension", ParamValue::Int(last as i64));
            Tensor::bind1(Prim::Concatenate, p, &refs)
        };
        vec![Tensor::bind1(prim, inner, &[&a[0], &clamped, &a[2]])]
    })
}
