//! The associative scan that expands a cumulative reduction (`cumprod`, `cummax`, `cummin`,
//! `cumlogsumexp`) into elementwise operations on strided slices, built by tracing.

use crate::trace::{Tensor, trace};
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::dtype::DType;
use tessera_ir_core::error::Result;
use tessera_ir_core::jaxpr::ClosedJaxpr;
use tessera_ir_core::params::{ParamValue, Params};
use tessera_ir_core::prim::cumulative::{CumulativeOp, axis_and_reverse};
use tessera_ir_core::prim::{Prim, ReductionParams};

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
        tessera_ir_core::prim::GatherScatterMode::PromiseInBounds,
    )
}

/// JAX's `associative_scan` of one array along `axis`: combine neighbouring pairs, scan the
/// pairs recursively, then fill in the even positions and interleave.
fn associative_scan(op: CumulativeOp, x: &Tensor, axis: usize) -> Tensor {
    let n = x.shape()[axis];
    if n < 2 {
        return x.clone();
    }
    let pairs = combine_traced(
        op,
        &strided(x, axis, 0, n - 1, 2),
        &strided(x, axis, 1, n, 2),
    );
    let odd = associative_scan(op, &pairs, axis);
    let rest = strided(x, axis, 2, n, 2);
    let even = if n % 2 == 0 {
        let m = odd.shape()[axis];
        combine_traced(op, &Tensor::slice_axis(&odd, axis, 0, m - 1), &rest)
    } else {
        combine_traced(op, &odd, &rest)
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

/// Combines two traced values.
fn combine_traced(op: CumulativeOp, a: &Tensor, b: &Tensor) -> Tensor {
    match op {
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
