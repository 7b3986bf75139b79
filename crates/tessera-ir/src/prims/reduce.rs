//! Reductions (`reduce_sum` …), `argmax`/`argmin` and `cumsum`.

use super::{Primitive, TypeError, type_err};
use crate::interp::{Array, EvalError, Wide, prim_err};
use crate::types::{DType, ShapedArray};
use ndarray::{ArrayD, Axis};

/// Which reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// `reduce_sum`.
    Sum,
    /// `reduce_max`.
    Max,
    /// `reduce_min`.
    Min,
    /// `reduce_prod`.
    Prod,
    /// `reduce_and`.
    And,
    /// `reduce_or`.
    Or,
}

impl ReduceOp {
    /// JAX's name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "reduce_sum",
            ReduceOp::Max => "reduce_max",
            ReduceOp::Min => "reduce_min",
            ReduceOp::Prod => "reduce_prod",
            ReduceOp::And => "reduce_and",
            ReduceOp::Or => "reduce_or",
        }
    }
}

/// `argmax` or `argmin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgOp {
    /// `argmax`.
    Max,
    /// `argmin`.
    Min,
}

impl ArgOp {
    /// JAX's name.
    pub fn name(self) -> &'static str {
        match self {
            ArgOp::Max => "argmax",
            ArgOp::Min => "argmin",
        }
    }
}

/// The shape rule of the reduction family.
pub fn shape_rule(prim: &Primitive, ins: &[ShapedArray]) -> Result<ShapedArray, TypeError> {
    let [a] = ins else {
        return Err(type_err(
            prim,
            ins,
            format!("takes 1 operand, got {}", ins.len()),
        ));
    };
    let err = |m: String| Err(type_err(prim, ins, m));
    match prim {
        Primitive::Reduce { op, axes } => {
            if axes.iter().any(|&x| x >= a.ndim()) {
                return err(format!("axes {axes:?} out of range for rank {}", a.ndim()));
            }
            let logical = matches!(op, ReduceOp::And | ReduceOp::Or);
            if logical && a.dtype.is_float()
                || !logical
                    && a.dtype == DType::Bool
                    && *op != ReduceOp::Max
                    && *op != ReduceOp::Min
            {
                return err(format!("{} is not defined on {}", op.name(), a.dtype));
            }
            let s: Vec<usize> = (0..a.ndim())
                .filter(|d| !axes.contains(d))
                .map(|d| a.shape[d])
                .collect();
            Ok(a.with_shape(&s))
        }
        Primitive::ArgReduce {
            axis, index_dtype, ..
        } => {
            if *axis >= a.ndim() || !index_dtype.is_int() {
                return err(format!(
                    "axis {axis} must be below rank {} and the index dtype an integer",
                    a.ndim()
                ));
            }
            let s: Vec<usize> = (0..a.ndim())
                .filter(|d| d != axis)
                .map(|d| a.shape[d])
                .collect();
            Ok(ShapedArray::new(*index_dtype, &s))
        }
        Primitive::Cumsum { axis, .. } => {
            if *axis >= a.ndim() {
                return err(format!("axis {axis} out of range for rank {}", a.ndim()));
            }
            Ok(a.clone())
        }
        _ => err("not a reduction".into()),
    }
}

fn fold<T: Clone>(
    a: &ArrayD<T>,
    axes: &[usize],
    init: T,
    f: impl Fn(&T, &T) -> T + Copy,
) -> ArrayD<T> {
    let mut sorted = axes.to_vec();
    sorted.sort_unstable_by(|x, y| y.cmp(x));
    let mut r = a.clone();
    for ax in sorted {
        r = r.fold_axis(Axis(ax), init.clone(), |acc, x| f(acc, x));
    }
    r
}

fn reduce_wide(op: ReduceOp, w: &Wide, axes: &[usize]) -> Wide {
    use ReduceOp::*;
    match w {
        Wide::F(a) => Wide::F(match op {
            Sum => fold(a, axes, 0.0, |x, y| x + y),
            Prod => fold(a, axes, 1.0, |x, y| x * y),
            Max => fold(a, axes, f64::NEG_INFINITY, |x, y| {
                if x.is_nan() || y.is_nan() {
                    f64::NAN
                } else {
                    x.max(*y)
                }
            }),
            Min => fold(a, axes, f64::INFINITY, |x, y| {
                if x.is_nan() || y.is_nan() {
                    f64::NAN
                } else {
                    x.min(*y)
                }
            }),
            And | Or => a.clone(),
        }),
        Wide::I(a) => Wide::I(match op {
            Sum => fold(a, axes, 0, |x, y| x.wrapping_add(*y)),
            Prod => fold(a, axes, 1, |x, y| x.wrapping_mul(*y)),
            Max => fold(a, axes, i64::MIN, |x, y| *x.max(y)),
            Min => fold(a, axes, i64::MAX, |x, y| *x.min(y)),
            And => fold(a, axes, -1, |x, y| x & y),
            Or => fold(a, axes, 0, |x, y| x | y),
        }),
        Wide::U(a) => Wide::U(match op {
            Sum => fold(a, axes, 0, |x, y| x.wrapping_add(*y)),
            Prod => fold(a, axes, 1, |x, y| x.wrapping_mul(*y)),
            Max => fold(a, axes, 0, |x, y| *x.max(y)),
            Min => fold(a, axes, u64::MAX, |x, y| *x.min(y)),
            And => fold(a, axes, u64::MAX, |x, y| x & y),
            Or => fold(a, axes, 0, |x, y| x | y),
        }),
        Wide::B(a) => Wide::B(match op {
            And | Min | Prod => fold(a, axes, true, |x, y| *x && *y),
            Or | Max | Sum => fold(a, axes, false, |x, y| *x || *y),
        }),
    }
}

fn argreduce(op: ArgOp, a: &ArrayD<f64>, axis: usize) -> ArrayD<i64> {
    a.map_axis(Axis(axis), |lane| {
        let mut best = 0usize;
        if lane.is_empty() {
            return 0;
        }
        for (i, &x) in lane.iter().enumerate() {
            let b = lane[best];
            let better = match op {
                ArgOp::Max => x > b || (x.is_nan() && !b.is_nan()),
                ArgOp::Min => x < b || (x.is_nan() && !b.is_nan()),
            };
            if better {
                best = i;
            }
        }
        best as i64
    })
}

fn cumsum<T: Clone + std::ops::Add<Output = T>>(
    a: &ArrayD<T>,
    axis: usize,
    reverse: bool,
) -> ArrayD<T> {
    let mut r = a.clone();
    for mut lane in r.lanes_mut(Axis(axis)) {
        let n = lane.len();
        for k in 1..n {
            let (i, j) = if reverse {
                (n - k, n - 1 - k)
            } else {
                (k - 1, k)
            };
            let v = lane[i].clone() + lane[j].clone();
            lane[j] = v;
        }
    }
    r
}

/// Evaluates a reduction.
pub fn eval(prim: &Primitive, args: &[Array]) -> Result<Array, EvalError> {
    let x = args
        .first()
        .ok_or_else(|| prim_err(prim, "takes 1 operand"))?;
    shape_rule(prim, &[x.aval()]).map_err(|e| prim_err(prim, e.message))?;
    let w = x.widen();
    match prim {
        Primitive::Reduce { op, axes } => {
            Ok(Array::from_wide(&reduce_wide(*op, &w, axes), x.dtype()))
        }
        Primitive::ArgReduce {
            op,
            axis,
            index_dtype,
        } => Ok(Array::from_wide(
            &Wide::I(argreduce(*op, &w.to_f64(), *axis)),
            *index_dtype,
        )),
        Primitive::Cumsum { axis, reverse } => {
            let r = match &w {
                Wide::F(a) => Wide::F(cumsum(a, *axis, *reverse)),
                Wide::I(a) => Wide::I(cumsum(a, *axis, *reverse)),
                Wide::U(a) => Wide::U(cumsum(a, *axis, *reverse)),
                Wide::B(a) => Wide::I(cumsum(&a.mapv(i64::from), *axis, *reverse)),
            };
            Ok(Array::from_wide(&r, x.dtype()))
        }
        _ => Err(prim_err(prim, "not a reduction")),
    }
}
