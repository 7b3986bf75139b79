//! The cumulative reductions besides `cumsum`: `cumprod`, `cummax`, `cummin` and
//! `cumlogsumexp` (`axis`, `reverse`). The interpreter folds each lane in order; the other rules
//! read the primitive as JAX defines it, an associative scan (`tessera_transform::programs::cumulative_program`: log-depth
//! strided slices, combines, pads and an interleave), so its JVP and VJP are those of that
//! program, exactly as JAX derives them, and the lowering emits it.

use super::{Prim, ReductionParams};
use crate::array::{Elem, is_exact_int};
use crate::dtype::DType;
use crate::error::{Result, type_error};

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
    pub fn combine_elems(self, a: Elem, b: Elem, dtype: DType) -> Elem {
        if is_exact_int(dtype) {
            Elem::from_int(dtype, self.combine_ints(a.to_int(dtype), b.to_int(dtype)))
        } else {
            Elem::from_f64(dtype, self.combine(a.to_f64(dtype), b.to_f64(dtype)))
        }
    }

    /// Combines two values in `f64`.
    pub fn combine(self, a: f64, b: f64) -> f64 {
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
pub fn axis_and_reverse(typed: &ReductionParams) -> Result<(usize, bool)> {
    match *typed {
        ReductionParams::Scan { axis, reverse } => Ok((axis, reverse)),
        ReductionParams::Axes(_) | ReductionParams::Index { .. } => Err(type_error(
            "cumulative reduction",
            "needs the parameters of a scan (axis, reverse)",
        )),
    }
}
