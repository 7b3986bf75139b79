//! Evaluation rules of the `structural` family (moved from the core crate's `prim/structural.rs`).

use ndarray::{ArrayD, Axis, IxDyn, Slice};
use tessera_ir_core::array::{Array, Elem};
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::error::{IrError, Result};
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::structural_params::StructuralParams;
use tessera_ir_core::prim::{Prim, StructuralOp, axis};

fn dims_of(shape: &[i64]) -> Vec<usize> {
    shape.iter().map(|&d| d.max(0) as usize).collect()
}

pub(crate) fn eval(
    prim: Prim,
    op: StructuralOp,
    params: &Params,
    inputs: &[Array],
    outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    let out = &outputs[0];
    let dims = dims_of(&out.shape);
    let data: ArrayD<Elem> = match StructuralParams::read(op, params)? {
        StructuralParams::Iota { dimension, .. } => {
            let d = dimension as usize; // checked by the shape rule
            ArrayD::from_shape_fn(IxDyn(&dims), |idx| {
                Elem::from_int(out.dtype, idx[d] as i128)
            })
        }
        StructuralParams::BroadcastInDim {
            broadcast_dimensions: bdims,
            ..
        } => {
            let x = inputs[0].elems();
            ArrayD::from_shape_fn(IxDyn(&dims), |idx| {
                let src: Vec<usize> = bdims
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| {
                        if x.shape()[i] == 1 {
                            0
                        } else {
                            idx[d as usize]
                        }
                    })
                    .collect();
                x[IxDyn(&src)]
            })
        }
        StructuralParams::Reshape { .. }
        | StructuralParams::Squeeze { .. }
        | StructuralParams::ExpandDims { .. } => {
            // The same bytes read as the new shape: nothing to decode.
            return Ok(vec![inputs[0].clone().reshaped(&out.shape)?]);
        }
        StructuralParams::Transpose { permutation } => {
            let perm: Vec<usize> = permutation.iter().map(|&p| p as usize).collect();
            inputs[0]
                .elems()
                .permuted_axes(IxDyn(&perm))
                .as_standard_layout()
                .to_owned()
        }
        StructuralParams::Slice {
            start_indices: start,
            limit_indices: limit,
            strides,
        } => {
            let x = inputs[0].elems();
            let mut view = x.view();
            for d in 0..start.len() {
                view.slice_axis_inplace(
                    Axis(d),
                    Slice::new(
                        start[d] as isize,
                        Some(limit[d] as isize),
                        strides[d] as isize,
                    ),
                );
            }
            view.to_owned()
        }
        StructuralParams::DynamicSlice { .. } => {
            let x = &inputs[0];
            let starts = clamped_starts(x, &inputs[1..], &out.shape);
            let x = x.elems();
            let mut view = x.view();
            for (d, &s) in starts.iter().enumerate() {
                view.slice_axis_inplace(Axis(d), Slice::from(s..s + dims[d]));
            }
            view.to_owned()
        }
        StructuralParams::DynamicUpdateSlice => {
            let (x, u) = (&inputs[0], &inputs[1]);
            let starts = clamped_starts(x, &inputs[2..], &u.shape());
            let mut data = x.elems();
            let mut view = data.view_mut();
            for (d, &s) in starts.iter().enumerate() {
                view.slice_axis_inplace(Axis(d), Slice::from(s..s + u.dims()[d] as usize));
            }
            view.assign(&u.elems());
            data
        }
        StructuralParams::Concatenate { dimension } => {
            let dim = axis(prim, dimension, out.rank())?;
            let elems: Vec<_> = inputs.iter().map(Array::elems).collect();
            let views: Vec<_> = elems.iter().map(|a| a.view()).collect();
            ndarray::concatenate(Axis(dim), &views).map_err(|e| IrError::Eval(e.to_string()))?
        }
        StructuralParams::Pad { padding_config } => pad(
            &inputs[0],
            inputs[1]
                .converted(out.dtype)
                .first_elem()
                .unwrap_or(Elem::ZERO),
            &padding_config,
            &dims,
        ),
    };
    Ok(vec![Array::from_elems(out.dtype, data)])
}

/// Start indices clamped so the window fits (XLA's dynamic-slice semantics).
fn clamped_starts(x: &Array, indices: &[Array], window: &[i64]) -> Vec<usize> {
    indices
        .iter()
        .enumerate()
        .map(|(d, i)| {
            let start = tessera_ir_core::prim::indexing::clamp_i64(i.first_int().unwrap_or(0));
            start.clamp(0, (x.dims()[d] - window[d]).max(0)) as usize
        })
        .collect()
}

fn pad(x: &Array, value: Elem, config: &[(i64, i64, i64)], dims: &[usize]) -> ArrayD<Elem> {
    let mut out = ArrayD::from_elem(IxDyn(dims), value);
    for (idx, &v) in x.elems().indexed_iter() {
        let target: Option<Vec<usize>> = (0..dims.len())
            .map(|d| {
                let (lo, _, interior) = config[d];
                let p = lo + idx[d] as i64 * (interior + 1);
                (0..dims[d] as i64).contains(&p).then_some(p as usize)
            })
            .collect();
        if let Some(t) = target {
            out[IxDyn(&t)] = v;
        }
    }
    out
}
