//! Shape-changing primitives: `iota`, `broadcast_in_dim`, `reshape`, `squeeze`, `expand_dims`,
//! `transpose`, `slice`, `dynamic_slice`, `dynamic_update_slice`, `concatenate`, `pad`.

use ndarray::{ArrayD, Axis, IxDyn, Slice};

use super::{Prim, StructuralOp, arity, axis};
use crate::array::{Array, Elem};
use crate::aval::ShapedArray;
use crate::error::{IrError, Result, type_error};
use crate::params::{ParamValue, Params};

fn dims_of(shape: &[i64]) -> Vec<usize> {
    shape.iter().map(|&d| d.max(0) as usize).collect()
}

pub(super) fn abstract_eval(
    prim: Prim,
    op: StructuralOp,
    params: &Params,
    inputs: &[ShapedArray],
    outputs: Option<&[ShapedArray]>,
) -> Result<Vec<ShapedArray>> {
    let name = prim.name();
    let written = outputs.and_then(|o| o.first());
    let out = |dtype, shape: Vec<i64>| {
        Ok(vec![ShapedArray {
            dtype,
            shape,
            weak_type: false,
            vma: Default::default(),
            sharding: None,
        }])
    };
    match op {
        StructuralOp::Iota => {
            arity(prim, inputs.len(), 0)?;
            let shape = params.ints(name, "shape")?;
            axis(prim, params.int(name, "dimension")?, shape.len())?;
            out(params.dtype(name, "dtype")?, shape)
        }
        StructuralOp::BroadcastInDim => {
            arity(prim, inputs.len(), 1)?;
            let x = &inputs[0];
            let shape = match params.opt_ints(name, "shape")? {
                Some(s) => s,
                None => written
                    .map(|w| w.shape.clone())
                    .ok_or_else(|| type_error(name, "needs a `shape` parameter"))?,
            };
            let bdims = params
                .opt_ints(name, "broadcast_dimensions")?
                // JAX leaves empty broadcast_dimensions out of the printed equation.
                .unwrap_or_default();
            if bdims.len() != x.rank() {
                return Err(type_error(
                    name,
                    format!(
                        "broadcast_dimensions {bdims:?} must name one output dimension per operand dimension of {x}"
                    ),
                ));
            }
            for (i, &d) in bdims.iter().enumerate() {
                let ok = (0..shape.len() as i64).contains(&d)
                    && (x.shape[i] == 1 || x.shape[i] == shape[d as usize]);
                if !ok {
                    return Err(type_error(
                        name,
                        format!("operand {x} does not broadcast to {shape:?} along {bdims:?}"),
                    ));
                }
            }
            Ok(vec![ShapedArray {
                dtype: x.dtype,
                shape,
                weak_type: x.weak_type,
                vma: Default::default(),
                sharding: None,
            }])
        }
        StructuralOp::Reshape => {
            arity(prim, inputs.len(), 1)?;
            let x = &inputs[0];
            let shape = params.ints(name, "new_sizes")?;
            if shape.iter().product::<i64>() != x.shape.iter().product::<i64>() {
                return Err(type_error(
                    name,
                    format!("cannot reshape {x} to {shape:?}: element counts differ"),
                ));
            }
            Ok(vec![ShapedArray {
                dtype: x.dtype,
                shape,
                weak_type: x.weak_type,
                vma: Default::default(),
                sharding: None,
            }])
        }
        StructuralOp::Squeeze => {
            arity(prim, inputs.len(), 1)?;
            let x = &inputs[0];
            let drop = params
                .ints(name, "dimensions")?
                .iter()
                .map(|&d| axis(prim, d, x.rank()))
                .collect::<Result<Vec<_>>>()?;
            if let Some(&d) = drop.iter().find(|&&d| x.shape[d] != 1) {
                return Err(type_error(name, format!("dimension {d} of {x} is not 1")));
            }
            let shape = x
                .shape
                .iter()
                .enumerate()
                .filter(|(i, _)| !drop.contains(i))
                .map(|(_, &s)| s)
                .collect();
            out(x.dtype, shape)
        }
        StructuralOp::ExpandDims => {
            arity(prim, inputs.len(), 1)?;
            let x = &inputs[0];
            let mut shape = x.shape.clone();
            let mut added = params.ints(name, "dimensions")?;
            added.sort_unstable();
            for d in added {
                let d = axis(prim, d, shape.len() + 1)?;
                shape.insert(d, 1);
            }
            out(x.dtype, shape)
        }
        StructuralOp::Transpose => {
            arity(prim, inputs.len(), 1)?;
            let x = &inputs[0];
            let perm = params.ints(name, "permutation")?;
            let mut sorted = perm.clone();
            sorted.sort_unstable();
            if sorted != (0..x.rank() as i64).collect::<Vec<_>>() {
                return Err(type_error(
                    name,
                    format!("permutation {perm:?} is not a permutation of {x}'s dimensions"),
                ));
            }
            out(x.dtype, perm.iter().map(|&p| x.shape[p as usize]).collect())
        }
        StructuralOp::Slice => {
            arity(prim, inputs.len(), 1)?;
            let x = &inputs[0];
            let (start, limit) = (
                params.ints(name, "start_indices")?,
                params.ints(name, "limit_indices")?,
            );
            let strides = params
                .opt_ints(name, "strides")?
                .unwrap_or_else(|| vec![1; x.rank()]);
            if start.len() != x.rank() || limit.len() != x.rank() || strides.len() != x.rank() {
                return Err(type_error(
                    name,
                    format!("start, limit and strides need one entry per dimension of {x}"),
                ));
            }
            let mut shape = Vec::new();
            for d in 0..x.rank() {
                if !(0 <= start[d]
                    && start[d] <= limit[d]
                    && limit[d] <= x.shape[d]
                    && strides[d] > 0)
                {
                    return Err(type_error(
                        name,
                        format!("slice {start:?}..{limit:?} step {strides:?} is outside {x}"),
                    ));
                }
                shape.push((limit[d] - start[d] + strides[d] - 1) / strides[d]);
            }
            out(x.dtype, shape)
        }
        StructuralOp::DynamicSlice => {
            let x = &inputs[0];
            arity(prim, inputs.len(), 1 + x.rank())?;
            let sizes = params.ints(name, "slice_sizes")?;
            if sizes.len() != x.rank() || sizes.iter().zip(&x.shape).any(|(&s, &d)| s < 0 || s > d)
            {
                return Err(type_error(
                    name,
                    format!("slice_sizes {sizes:?} do not fit {x}"),
                ));
            }
            out(x.dtype, sizes)
        }
        StructuralOp::DynamicUpdateSlice => {
            let (x, u) = (&inputs[0], &inputs[1]);
            arity(prim, inputs.len(), 2 + x.rank())?;
            if u.rank() != x.rank() || u.shape.iter().zip(&x.shape).any(|(a, b)| a > b) {
                return Err(type_error(name, format!("update {u} does not fit in {x}")));
            }
            if u.dtype != x.dtype {
                return Err(type_error(
                    name,
                    format!("update {u} has another dtype than the operand {x}"),
                ));
            }
            out(x.dtype, x.shape.clone())
        }
        StructuralOp::Concatenate => {
            let first = inputs
                .first()
                .ok_or_else(|| type_error(name, "needs at least one operand"))?;
            let dim = axis(prim, params.int(name, "dimension")?, first.rank())?;
            let mut shape = first.shape.clone();
            for x in &inputs[1..] {
                let same = x.rank() == first.rank()
                    && (0..x.rank()).all(|d| d == dim || x.shape[d] == first.shape[d]);
                if !same || x.dtype != first.dtype {
                    return Err(type_error(
                        name,
                        format!("operands {first} and {x} differ outside dimension {dim}"),
                    ));
                }
                shape[dim] += x.shape[dim];
            }
            out(first.dtype, shape)
        }
        StructuralOp::Pad => {
            arity(prim, inputs.len(), 2)?;
            let x = &inputs[0];
            let config = padding_config(params)?;
            if config.len() != x.rank() {
                return Err(type_error(
                    name,
                    format!("padding_config needs one (low, high, interior) per dimension of {x}"),
                ));
            }
            let shape = x
                .shape
                .iter()
                .zip(&config)
                .map(|(&d, &(lo, hi, int))| lo + hi + d + (d - 1).max(0) * int)
                .collect();
            out(x.dtype, shape)
        }
    }
}

/// `pad`'s `padding_config`: one `(low, high, interior)` triple per dimension.
pub fn padding_config(params: &Params) -> Result<Vec<(i64, i64, i64)>> {
    let bad = || {
        type_error(
            "pad",
            "padding_config must be a tuple of (low, high, interior) triples",
        )
    };
    let seq = params
        .get("padding_config")
        .and_then(ParamValue::as_seq)
        .ok_or_else(bad)?;
    seq.iter()
        .map(|t| {
            if let Some(&[lo, hi, int]) = t.as_ints().as_deref() {
                Ok((lo, hi, int))
            } else {
                Err(bad())
            }
        })
        .collect()
}

pub(super) fn eval(
    prim: Prim,
    op: StructuralOp,
    params: &Params,
    inputs: &[Array],
    outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    let name = prim.name();
    let out = &outputs[0];
    let dims = dims_of(&out.shape);
    let data: ArrayD<Elem> = match op {
        StructuralOp::Iota => {
            let d = params.int(name, "dimension")? as usize;
            ArrayD::from_shape_fn(IxDyn(&dims), |idx| {
                Elem::from_int(out.dtype, idx[d] as i128)
            })
        }
        StructuralOp::BroadcastInDim => {
            let x = &inputs[0];
            let bdims = params
                .opt_ints(name, "broadcast_dimensions")?
                // JAX leaves empty broadcast_dimensions out of the printed equation.
                .unwrap_or_default();
            ArrayD::from_shape_fn(IxDyn(&dims), |idx| {
                let src: Vec<usize> = bdims
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| {
                        if x.data.shape()[i] == 1 {
                            0
                        } else {
                            idx[d as usize]
                        }
                    })
                    .collect();
                x.data[IxDyn(&src)]
            })
        }
        StructuralOp::Reshape | StructuralOp::Squeeze | StructuralOp::ExpandDims => {
            let flat: Vec<Elem> = inputs[0].data.iter().copied().collect();
            ArrayD::from_shape_vec(IxDyn(&dims), flat).map_err(|e| IrError::Eval(e.to_string()))?
        }
        StructuralOp::Transpose => {
            let perm: Vec<usize> = params
                .ints(name, "permutation")?
                .iter()
                .map(|&p| p as usize)
                .collect();
            inputs[0]
                .data
                .clone()
                .permuted_axes(IxDyn(&perm))
                .as_standard_layout()
                .to_owned()
        }
        StructuralOp::Slice => {
            let (start, limit) = (
                params.ints(name, "start_indices")?,
                params.ints(name, "limit_indices")?,
            );
            let strides = params
                .opt_ints(name, "strides")?
                .unwrap_or_else(|| vec![1; start.len()]);
            let mut view = inputs[0].data.view();
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
        StructuralOp::DynamicSlice => {
            let x = &inputs[0];
            let starts = clamped_starts(x, &inputs[1..], &out.shape);
            let mut view = x.data.view();
            for (d, &s) in starts.iter().enumerate() {
                view.slice_axis_inplace(Axis(d), Slice::from(s..s + dims[d]));
            }
            view.to_owned()
        }
        StructuralOp::DynamicUpdateSlice => {
            let (x, u) = (&inputs[0], &inputs[1]);
            let starts = clamped_starts(x, &inputs[2..], &u.shape());
            let mut data = x.data.clone();
            let mut view = data.view_mut();
            for (d, &s) in starts.iter().enumerate() {
                view.slice_axis_inplace(Axis(d), Slice::from(s..s + u.data.shape()[d]));
            }
            view.assign(&u.data);
            data
        }
        StructuralOp::Concatenate => {
            let dim = axis(prim, params.int(name, "dimension")?, out.rank())?;
            let views: Vec<_> = inputs.iter().map(|a| a.data.view()).collect();
            ndarray::concatenate(Axis(dim), &views).map_err(|e| IrError::Eval(e.to_string()))?
        }
        StructuralOp::Pad => pad(
            &inputs[0],
            (inputs[1].converted(out.dtype).data.iter().next().copied()).unwrap_or(Elem::ZERO),
            &padding_config(params)?,
            &dims,
        ),
    };
    Ok(vec![Array {
        dtype: out.dtype,
        data,
    }])
}

/// Start indices clamped so the window fits (XLA's dynamic-slice semantics).
fn clamped_starts(x: &Array, indices: &[Array], window: &[i64]) -> Vec<usize> {
    indices
        .iter()
        .enumerate()
        .map(|(d, i)| {
            let start = super::indexing::clamp_i64(i.first_int().unwrap_or(0));
            start.clamp(0, (x.data.shape()[d] as i64 - window[d]).max(0)) as usize
        })
        .collect()
}

fn pad(x: &Array, value: Elem, config: &[(i64, i64, i64)], dims: &[usize]) -> ArrayD<Elem> {
    let mut out = ArrayD::from_elem(IxDyn(dims), value);
    for (idx, &v) in x.data.indexed_iter() {
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
