//! Reductions over axes (`reduce_sum/max/min/prod/and/or`), `argmax`/`argmin`, `cumsum` and
//! the other cumulative reductions (module `cumulative`).

use ndarray::{ArrayD, Axis, IxDyn};

use super::{Prim, ReduceKind, ReductionOp, arity, axis};
use crate::array::Array;
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{IrError, Result, type_error};
use crate::params::Params;

fn axes(prim: Prim, params: &Params, rank: usize) -> Result<Vec<usize>> {
    let mut axes = params
        .ints(prim.name(), "axes")?
        .iter()
        .map(|&a| axis(prim, a, rank))
        .collect::<Result<Vec<_>>>()?;
    axes.sort_unstable();
    axes.dedup();
    Ok(axes)
}

pub(super) fn abstract_eval(
    prim: Prim,
    op: ReductionOp,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    arity(prim, inputs.len(), 1)?;
    let x = &inputs[0];
    if let ReductionOp::Cumulative(_) = op {
        super::cumulative::axis_and_reverse(prim, params, x.rank())?;
        return Ok(vec![x.clone()]);
    }
    if op == ReductionOp::Cumsum {
        axis(prim, params.int(prim.name(), "axis")?, x.rank())?;
        return Ok(vec![x.clone()]);
    }
    let axes = axes(prim, params, x.rank())?;
    let shape: Vec<i64> = x
        .shape
        .iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, &d)| d)
        .collect();
    let dtype = match op {
        ReductionOp::Argmax | ReductionOp::Argmin => {
            if axes.len() != 1 {
                return Err(type_error(
                    prim.name(),
                    format!("reduces exactly one axis, got {axes:?}"),
                ));
            }
            params.dtype(prim.name(), "index_dtype")?
        }
        ReductionOp::Reduce(ReduceKind::And | ReduceKind::Or) if x.dtype.is_float() => {
            return Err(type_error(
                prim.name(),
                format!("needs boolean or integer operands, got {x}"),
            ));
        }
        ReductionOp::Reduce(_) | ReductionOp::Cumsum | ReductionOp::Cumulative(_) => x.dtype,
    };
    Ok(vec![ShapedArray {
        dtype,
        shape,
        weak_type: false,
        vma: Default::default(),
        sharding: None,
    }])
}

pub(super) fn eval(
    prim: Prim,
    op: ReductionOp,
    params: &Params,
    inputs: &[Array],
    outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    let x = &inputs[0];
    let out = &outputs[0];
    if let ReductionOp::Cumulative(kind) = op {
        return Ok(vec![super::cumulative::eval(kind, params, x, out.dtype)?]);
    }
    if op == ReductionOp::Cumsum {
        let ax = axis(prim, params.int(prim.name(), "axis")?, x.data.ndim())?;
        let reverse = matches!(
            params.get("reverse"),
            Some(crate::params::ParamValue::Bool(true))
        );
        let mut data = x.data.clone();
        for mut lane in data.lanes_mut(Axis(ax)) {
            let mut acc = 0.0;
            let n = lane.len();
            for k in 0..n {
                let i = if reverse { n - 1 - k } else { k };
                acc = x.dtype.round(acc + lane[i]);
                lane[i] = acc;
            }
        }
        return Ok(vec![Array::from_data(out.dtype, data)]);
    }
    let axes = axes(prim, params, x.data.ndim())?;
    let mut data = x.data.clone();
    for &ax in axes.iter().rev() {
        data = reduce_axis(op, &data, ax, x.dtype)?;
    }
    let dims: Vec<usize> = out.shape.iter().map(|&d| d as usize).collect();
    let data = data
        .into_shape_with_order(IxDyn(&dims))
        .map_err(|e| IrError::Eval(e.to_string()))?;
    Ok(vec![Array::from_data(out.dtype, data)])
}

fn reduce_axis(
    op: ReductionOp,
    data: &ArrayD<f64>,
    ax: usize,
    dtype: DType,
) -> Result<ArrayD<f64>> {
    let lanes = data.lanes(Axis(ax));
    let values: Vec<f64> = lanes
        .into_iter()
        .map(|lane| {
            let it = lane.iter().copied();
            match op {
                // Integers exactly, wrapped; low-precision floats accumulated in f32.
                ReductionOp::Reduce(ReduceKind::Sum) if dtype.is_int() => {
                    dtype.wrap(it.fold(0i128, |a, b| a.wrapping_add(b as i128)))
                }
                ReductionOp::Reduce(ReduceKind::Sum) => {
                    it.fold(0.0, |a, b| dtype.accumulation().round(a + b))
                }
                ReductionOp::Reduce(ReduceKind::Prod) if dtype.is_int() => {
                    it.fold(1.0, |a, b| dtype.wrap((a as i128).wrapping_mul(b as i128)))
                }
                ReductionOp::Reduce(ReduceKind::Prod) => {
                    it.fold(1.0, |a, b| dtype.accumulation().round(a * b))
                }
                ReductionOp::Reduce(ReduceKind::Max) => it.fold(f64::NEG_INFINITY, |a, b| {
                    if a.is_nan() || b.is_nan() {
                        f64::NAN
                    } else {
                        a.max(b)
                    }
                }),
                ReductionOp::Reduce(ReduceKind::Min) => it.fold(f64::INFINITY, |a, b| {
                    if a.is_nan() || b.is_nan() {
                        f64::NAN
                    } else {
                        a.min(b)
                    }
                }),
                ReductionOp::Reduce(ReduceKind::And) => {
                    dtype.wrap(it.fold(-1i128, |a, b| a & (b as i128)))
                }
                ReductionOp::Reduce(ReduceKind::Or) => {
                    dtype.wrap(it.fold(0i128, |a, b| a | (b as i128)))
                }
                ReductionOp::Argmax => arg_best(lane.iter().copied(), |a, b| a > b),
                ReductionOp::Argmin => arg_best(lane.iter().copied(), |a, b| a < b),
                // `eval` handles cumsum before reducing axes.
                ReductionOp::Cumsum | ReductionOp::Cumulative(_) => f64::NAN,
            }
        })
        .collect();
    let mut shape: Vec<usize> = data.shape().to_vec();
    shape.remove(ax);
    ArrayD::from_shape_vec(IxDyn(&shape), values).map_err(|e| IrError::Eval(e.to_string()))
}

/// Index of the first best element; a NaN wins (as in XLA).
fn arg_best(values: impl Iterator<Item = f64>, better: impl Fn(f64, f64) -> bool) -> f64 {
    let mut best: Option<(usize, f64)> = None;
    for (i, v) in values.enumerate() {
        best = match best {
            None => Some((i, v)),
            Some((_, b)) if b.is_nan() => best,
            Some(_) if v.is_nan() || better(v, best.map_or(v, |x| x.1)) => Some((i, v)),
            keep => keep,
        };
    }
    best.map_or(0.0, |(i, _)| i as f64)
}
