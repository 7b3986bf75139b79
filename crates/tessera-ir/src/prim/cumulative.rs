//! The cumulative reductions besides `cumsum`: `cumprod`, `cummax`, `cummin` and
//! `cumlogsumexp` (`axis`, `reverse`). The interpreter folds each lane in order; the other rules
//! read the primitive as JAX defines it, an associative scan ([`cumulative_program`]: log-depth
//! strided slices, combines, pads and an interleave), so its JVP and VJP are those of that
//! program, exactly as JAX derives them, and the lowering emits it.

use ndarray::Axis;

use super::{Prim, ReductionParams};
use crate::array::{Array, Elem, is_exact_int};
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{Result, type_error};
use crate::jaxpr::ClosedJaxpr;
use crate::params::{ParamValue, Params};
use crate::trace::{Tensor, trace};

/// How a cumulative reduction combines two values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CumulativeOp {
    /// `cumprod`.
    Prod,
    /// `cummax`.
    Max,
    /// `cummin`.
    Min,
    /// `cumlogsumexp`.
    LogSumExp,
}

impl CumulativeOp {
    /// The primitive of this combiner.
    pub fn prim(self) -> Prim {
        match self {
            CumulativeOp::Prod => Prim::Cumprod,
            CumulativeOp::Max => Prim::Cummax,
            CumulativeOp::Min => Prim::Cummin,
            CumulativeOp::LogSumExp => Prim::Cumlogsumexp,
        }
    }

    /// Combines two host values (NaN propagating through max and min, as XLA does).
    /// Combines two integers exactly (the caller wraps to the dtype).
    fn combine_ints(self, a: i128, b: i128) -> i128 {
        match self {
            CumulativeOp::Prod => a.wrapping_mul(b),
            CumulativeOp::Max => a.max(b),
            CumulativeOp::Min => a.min(b),
            CumulativeOp::LogSumExp => self.combine(a as f64, b as f64) as i128,
        }
    }

    /// Combines two elements of `dtype`, rounded or wrapped to it.
    fn combine_elems(self, a: Elem, b: Elem, dtype: DType) -> Elem {
        if is_exact_int(dtype) {
            Elem::from_int(dtype, self.combine_ints(a.to_int(dtype), b.to_int(dtype)))
        } else {
            Elem::from_f64(dtype, self.combine(a.to_f64(dtype), b.to_f64(dtype)))
        }
    }

    fn combine(self, a: f64, b: f64) -> f64 {
        let nan = a.is_nan() || b.is_nan();
        match self {
            CumulativeOp::Prod => a * b,
            CumulativeOp::Max if nan => f64::NAN,
            CumulativeOp::Max => a.max(b),
            CumulativeOp::Min if nan => f64::NAN,
            CumulativeOp::Min => a.min(b),
            CumulativeOp::LogSumExp => log_add_exp(a, b),
        }
    }

    /// Combines two traced values.
    fn combine_traced(self, a: &Tensor, b: &Tensor) -> Tensor {
        match self {
            CumulativeOp::Prod => a * b,
            CumulativeOp::Max => a.maximum(b),
            CumulativeOp::Min => a.minimum(b),
            CumulativeOp::LogSumExp => {
                // JAX's logaddexp: max + log1p(exp(-|a - b|)).
                let high = a.maximum(b);
                let gap = (a - b).abs();
                &high + &(-&gap).exp().log1p()
            }
        }
    }
}

fn log_add_exp(a: f64, b: f64) -> f64 {
    let high = a.max(b);
    if high == f64::NEG_INFINITY {
        return high;
    }
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    high + (-(a - b).abs()).exp().ln_1p()
}

/// The axis and direction of a cumulative primitive (its typed parameters' fields).
fn axis_and_reverse(typed: &ReductionParams) -> Result<(usize, bool)> {
    match *typed {
        ReductionParams::Scan { axis, reverse } => Ok((axis, reverse)),
        ReductionParams::Axes(_) | ReductionParams::Index { .. } => Err(type_error(
            "cumulative reduction",
            "needs the parameters of a scan (axis, reverse)",
        )),
    }
}

/// Folds each lane along the axis, rounding each partial result to the dtype.
pub(super) fn eval(
    op: CumulativeOp,
    typed: &ReductionParams,
    x: &Array,
    out: DType,
) -> Result<Array> {
    let (ax, reverse) = axis_and_reverse(typed)?;
    let mut data = x.elems();
    for mut lane in data.lanes_mut(Axis(ax)) {
        let n = lane.len();
        let mut acc: Option<Elem> = None;
        for k in 0..n {
            let i = if reverse { n - 1 - k } else { k };
            let next = match acc {
                None => lane[i],
                Some(a) => op.combine_elems(a, lane[i], x.dtype()),
            };
            acc = Some(next);
            lane[i] = next;
        }
    }
    // The output dtype is the input's (so no conversion happens).
    Ok(x.with_elems(data).into_dtype(out))
}

/// The primitive as JAX's `associative_scan` computes it, a program of one argument of type
/// `aval`: what the JVP, the VJP and the lowering use.
pub fn cumulative_program(
    op: CumulativeOp,
    params: &Params,
    aval: &ShapedArray,
) -> Result<ClosedJaxpr> {
    let typed = ReductionParams::read(op.prim(), params, aval.rank())?;
    let (ax, reverse) = axis_and_reverse(&typed)?;
    let plain = ShapedArray::new(aval.dtype, &aval.shape);
    trace(&[plain], |a| {
        let x = if reverse {
            flip(&a[0], ax)
        } else {
            a[0].clone()
        };
        let y = associative_scan(op, &x, ax);
        vec![if reverse { flip(&y, ax) } else { y }]
    })
}

/// The elements `start, start + stride, ..` (up to `limit`) along `axis`.
pub(crate) fn strided(x: &Tensor, axis: usize, start: i64, limit: i64, stride: i64) -> Tensor {
    let mut starts = vec![0i64; x.rank()];
    let mut limits = x.shape().to_vec();
    let mut strides = vec![1i64; x.rank()];
    starts[axis] = start;
    limits[axis] = limit;
    strides[axis] = stride;
    let params = Params::new()
        .with("limit_indices", ParamValue::ints(&limits))
        .with("start_indices", ParamValue::ints(&starts))
        .with("strides", ParamValue::ints(&strides));
    Tensor::bind1(Prim::Slice, params, &[x])
}

/// `x` padded with zeros by `(low, high, interior)` along `axis`.
fn pad_axis(x: &Tensor, axis: usize, low: i64, high: i64, interior: i64) -> Tensor {
    let config: Vec<ParamValue> = (0..x.rank())
        .map(|d| {
            if d == axis {
                ParamValue::ints(&[low, high, interior])
            } else {
                ParamValue::ints(&[0, 0, 0])
            }
        })
        .collect();
    let zero = x.literal_strong(0.0, x.dtype());
    let params = Params::new().with("padding_config", ParamValue::Tuple(config));
    Tensor::bind1(Prim::Pad, params, &[x, &zero])
}

/// `x` reversed along `axis` (a gather of the indices `n - 1, .., 0`).
pub(crate) fn flip(x: &Tensor, axis: usize) -> Tensor {
    let n = x.shape()[axis];
    let iota = x.iota_along(&[n], 0);
    let last = iota.literal_strong((n - 1) as f64, DType::I32);
    let backwards = Tensor::bind1(Prim::Sub, Params::new(), &[&last, &iota]);
    x.take_with(
        &backwards,
        axis as i64,
        super::GatherScatterMode::PromiseInBounds,
    )
}

/// JAX's `associative_scan` of one array along `axis`: combine neighbouring pairs, scan the
/// pairs recursively, then fill in the even positions and interleave.
fn associative_scan(op: CumulativeOp, x: &Tensor, axis: usize) -> Tensor {
    let n = x.shape()[axis];
    if n < 2 {
        return x.clone();
    }
    let pairs = op.combine_traced(&strided(x, axis, 0, n - 1, 2), &strided(x, axis, 1, n, 2));
    let odd = associative_scan(op, &pairs, axis);
    let rest = strided(x, axis, 2, n, 2);
    let even = if n % 2 == 0 {
        let m = odd.shape()[axis];
        op.combine_traced(&Tensor::slice_axis(&odd, axis, 0, m - 1), &rest)
    } else {
        op.combine_traced(&odd, &rest)
    };
    let first = Tensor::slice_axis(x, axis, 0, 1);
    let p = Params::new().with("dimension", ParamValue::Int(axis as i64));
    let even = Tensor::bind1(Prim::Concatenate, p, &[&first, &even]);
    interleave(&even, &odd, axis)
}

/// `a0 b0 a1 b1 ..` along `axis` (`a` as long as `b` or one longer), by padding each with
/// zeros between its elements and adding.
fn interleave(a: &Tensor, b: &Tensor, axis: usize) -> Tensor {
    let same = a.shape()[axis] == b.shape()[axis];
    let a = pad_axis(a, axis, 0, i64::from(same), 1);
    let b = pad_axis(b, axis, 1, i64::from(!same), 1);
    Tensor::bind1(Prim::Add, Params::new(), &[&a, &b])
}
