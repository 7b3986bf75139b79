//! The programs that expand the `FILL_OR_DROP` gather and `CLIP` scatter modes into a
//! `PROMISE_IN_BOUNDS` gather or scatter plus elementwise masking, built by tracing.

use crate::trace::{Tensor, trace, where_};
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::error::{Result, type_error};
use tessera_ir_core::jaxpr::ClosedJaxpr;
use tessera_ir_core::params::{ParamValue, Params};
use tessera_ir_core::prim::index_modes::{GatherScatterMode, scatter_window_sizes};
use tessera_ir_core::prim::{GatherParams, Prim, ScatterParams};

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
