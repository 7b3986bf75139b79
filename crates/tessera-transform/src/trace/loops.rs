//! The tracing API of JAXPP's temporal reduction: [`treduce`] and [`treduce_i`] record a
//! `treduce` equation whose body is traced once on one micro-batch.

use super::failure::fail_innermost;
use super::{Tensor, trace_counted};
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::prim::{Prim, ReduceOp, combined_aval, treduce_params};

/// JAXPP's default operations for `n` results: the first concatenated along a new dimension 0
/// (a loss per micro-batch), the others summed (gradients).
pub fn default_ops(n: usize) -> Vec<ReduceOp> {
    (0..n)
        .map(|k| {
            if k == 0 {
                ReduceOp::Concat(0)
            } else {
                ReduceOp::Add
            }
        })
        .collect()
}

/// Applies `f(invariants, slices)` to every micro-batch `i` (the slices `xs[..][i]` along `axis`)
/// and combines the results by `ops` (empty: [`default_ops`]); `schedule` names the pipeline
/// schedule `mpmd_jit` runs the loop under. Unpipelined, it is the sequential loop.
pub fn treduce(
    invariants: &[&Tensor],
    xs: &[&Tensor],
    axis: usize,
    schedule: &str,
    ops: &[ReduceOp],
    f: impl FnOnce(&[Tensor], &[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    let length = xs.first().and_then(|x| x.shape().get(axis).copied());
    let problem = loop_problem(xs, axis, length);
    // The body is traced even when the loop is malformed, to know how many results to give.
    let mut avals: Vec<ShapedArray> = invariants.iter().map(|t| t.aval().clone()).collect();
    avals.extend(xs.iter().map(|x| {
        let mut slice = ShapedArray::new(x.dtype(), x.shape());
        if axis < slice.rank() {
            slice.shape.remove(axis);
        }
        slice
    }));
    let n_inv = invariants.len();
    let (body, outs) = trace_counted(&avals, |args| f(&args[..n_inv], &args[n_inv..]));
    let ops = if ops.is_empty() {
        default_ops(outs.len())
    } else {
        ops.to_vec()
    };
    let expected: Vec<ShapedArray> = outs
        .iter()
        .zip(ops.iter().copied().chain(std::iter::repeat(ReduceOp::Add)))
        .map(|(a, op)| combined_aval(a, op, length.unwrap_or(1)).unwrap_or_else(|_| a.clone()))
        .collect();
    let anchor = xs.first().or(invariants.first());
    let failure = match (problem, body) {
        (Some(problem), _) => problem,
        (None, Err(e)) => format!("in the loop body: {e}"),
        (None, Ok(body)) => {
            let params = treduce_params(body, axis, length.unwrap_or(0), n_inv, &ops, schedule);
            let operands: Vec<&Tensor> = invariants.iter().chain(xs.iter()).copied().collect();
            return Tensor::bind(Prim::Treduce, params, &operands);
        }
    };
    match anchor {
        Some(anchor) => anchor.fail_with("treduce", failure, &expected),
        None => fail_innermost("treduce", failure, &expected),
    }
}

/// What is wrong with a loop over `xs` along `axis`, if anything.
fn loop_problem(xs: &[&Tensor], axis: usize, length: Option<i64>) -> Option<String> {
    let Some(first) = xs.first() else {
        return Some("treduce needs at least one array to reduce over".into());
    };
    let Some(length) = length else {
        return Some(format!("axis {axis} is out of range for {}", first.aval()));
    };
    xs.iter()
        .find(|x| x.shape().get(axis) != Some(&length))
        .map(|x| {
            format!(
                "every array must have {length} micro-batches along axis {axis}, got {}",
                x.aval()
            )
        })
}

/// [`treduce`] over the indices `0..length`: `f(invariants, i)` gets the micro-batch index as an
/// `i32` scalar. `like` names the trace to record in.
pub fn treduce_i(
    like: &Tensor,
    invariants: &[&Tensor],
    length: i64,
    schedule: &str,
    ops: &[ReduceOp],
    f: impl FnOnce(&[Tensor], &Tensor) -> Vec<Tensor>,
) -> Vec<Tensor> {
    let index = like.iota_along(&[length], 0).astype(DType::I32);
    treduce(invariants, &[&index], 0, schedule, ops, |inv, i| {
        f(inv, &i[0])
    })
}
