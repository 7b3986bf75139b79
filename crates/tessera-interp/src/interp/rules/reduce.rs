//! Evaluation rules of the `reduce` family (moved from the core crate's `prim/reduce.rs`).

use ndarray::{ArrayD, Axis, IxDyn};
use tessera_ir_core::array::{Array, Elem, is_exact_int};
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::dtype::DType;
use tessera_ir_core::error::{IrError, Result};
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::window::{highest, lowest};
use tessera_ir_core::prim::{Prim, ReduceKind, ReductionOp, ReductionParams};

pub(crate) fn eval(
    prim: Prim,
    op: ReductionOp,
    params: &Params,
    inputs: &[Array],
    outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    let x = &inputs[0];
    let out = &outputs[0];
    let typed = ReductionParams::read(prim, params, x.dims().len())?;
    if let ReductionOp::Cumulative(kind) = op {
        return Ok(vec![super::cumulative::eval(kind, &typed, x, out.dtype)?]);
    }
    if let ReductionParams::Scan { axis: ax, reverse } = typed {
        if is_exact_int(x.dtype()) {
            let mut data = x.ints();
            cumsum_lanes(&mut data, ax, reverse, 0, |a, b| a.wrapping_add(b));
            return Ok(vec![Array::from_ints(out.dtype, data)]);
        }
        let mut data = x.values();
        let dtype = x.dtype();
        cumsum_lanes(&mut data, ax, reverse, 0.0, |a, b| dtype.round(a + b));
        return Ok(vec![Array::from_values(out.dtype, data)]);
    }
    let axes = typed.axes();
    let dims: Vec<usize> = out.shape.iter().map(|&d| d as usize).collect();
    let reshape = |e: ndarray::ShapeError| IrError::Eval(e.to_string());
    if is_exact_int(x.dtype()) {
        let mut data = x.ints();
        for &ax in axes.iter().rev() {
            data = lanes_to(&data, ax, |lane| reduce_ints(op, lane, x.dtype()))?;
        }
        let data = data.into_shape_with_order(IxDyn(&dims)).map_err(reshape)?;
        return Ok(vec![Array::from_ints(out.dtype, data)]);
    }
    let mut data = x.values();
    for &ax in axes.iter().rev() {
        data = lanes_to(&data, ax, |lane| reduce_floats(op, lane, x.dtype()))?;
    }
    let data = data.into_shape_with_order(IxDyn(&dims)).map_err(reshape)?;
    Ok(vec![Array::from_values(out.dtype, data)])
}

/// A running sum along `ax`, forward or reversed.
fn cumsum_lanes<T: Copy>(
    data: &mut ArrayD<T>,
    ax: usize,
    reverse: bool,
    zero: T,
    add: impl Fn(T, T) -> T,
) {
    for mut lane in data.lanes_mut(Axis(ax)) {
        let mut acc = zero;
        let n = lane.len();
        for k in 0..n {
            let i = if reverse { n - 1 - k } else { k };
            acc = add(acc, lane[i]);
            lane[i] = acc;
        }
    }
}

/// Each lane along `ax` replaced by `f` of it (the axis is removed).
fn lanes_to<T: Copy>(data: &ArrayD<T>, ax: usize, f: impl Fn(Vec<T>) -> T) -> Result<ArrayD<T>> {
    let values: Vec<T> = data
        .lanes(Axis(ax))
        .into_iter()
        .map(|l| f(l.to_vec()))
        .collect();
    let mut shape: Vec<usize> = data.shape().to_vec();
    shape.remove(ax);
    ArrayD::from_shape_vec(IxDyn(&shape), values).map_err(|e| IrError::Eval(e.to_string()))
}

/// One lane of integers (or booleans) reduced exactly; the caller wraps to the dtype.
fn reduce_ints(op: ReductionOp, lane: Vec<i128>, dtype: DType) -> i128 {
    let it = lane.iter().copied();
    // An empty max or min is the dtype's own identity, as in XLA.
    let bound = |x: f64| Elem::from_f64(dtype, x).to_int(dtype);
    match op {
        ReductionOp::Reduce(ReduceKind::Sum) => it.fold(0, i128::wrapping_add),
        ReductionOp::Reduce(ReduceKind::Prod) => it.fold(1, i128::wrapping_mul),
        ReductionOp::Reduce(ReduceKind::Max) => it.fold(bound(lowest(dtype)), i128::max),
        ReductionOp::Reduce(ReduceKind::Min) => it.fold(bound(highest(dtype)), i128::min),
        ReductionOp::Reduce(ReduceKind::And) => it.fold(-1, |a, b| a & b),
        ReductionOp::Reduce(ReduceKind::Or) => it.fold(0, |a, b| a | b),
        ReductionOp::Argmax => arg_best(it, |a, b| a > b, |_| false) as i128,
        ReductionOp::Argmin => arg_best(it, |a, b| a < b, |_| false) as i128,
        // `eval` handles the running reductions before reducing axes.
        ReductionOp::Cumsum | ReductionOp::Cumulative(_) => 0,
    }
}

/// One lane of floats reduced; low-precision floats accumulate in `f32` (as XLA's CPU backend).
fn reduce_floats(op: ReductionOp, lane: Vec<f64>, dtype: DType) -> f64 {
    let it = lane.iter().copied();
    match op {
        ReductionOp::Reduce(ReduceKind::Sum) => {
            it.fold(0.0, |a, b| dtype.accumulation().round(a + b))
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
        // Bitwise reductions are integer-only; the shape rule refuses floats.
        ReductionOp::Reduce(ReduceKind::And | ReduceKind::Or) => f64::NAN,
        ReductionOp::Argmax => arg_best(it, |a, b| a > b, f64::is_nan) as f64,
        ReductionOp::Argmin => arg_best(it, |a, b| a < b, f64::is_nan) as f64,
        // `eval` handles the running reductions before reducing axes.
        ReductionOp::Cumsum | ReductionOp::Cumulative(_) => f64::NAN,
    }
}

/// Index of the first best element; a NaN wins (as in XLA).
fn arg_best<T: Copy>(
    values: impl Iterator<Item = T>,
    better: impl Fn(T, T) -> bool,
    is_nan: impl Fn(T) -> bool,
) -> usize {
    let mut best: Option<(usize, T)> = None;
    for (i, v) in values.enumerate() {
        best = match best {
            None => Some((i, v)),
            Some((_, b)) if is_nan(b) => best,
            Some((_, b)) if is_nan(v) || better(v, b) => Some((i, v)),
            keep => keep,
        };
    }
    best.map_or(0, |(i, _)| i)
}
