//! The tracing API of JAXPP's temporal reduction: [`treduce`] and [`treduce_i`] record a
//! `treduce` equation whose body is traced once on one micro-batch.

use super::{Tensor, trace};
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::prim::{Prim, ReduceOp, treduce_params};

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
    let Some(first) = xs.first() else {
        let msg = "treduce needs at least one array to reduce over".to_owned();
        return invariants
            .first()
            .map(|t| vec![t.fail("treduce", msg)])
            .unwrap_or_default();
    };
    let Some(&length) = first.shape().get(axis) else {
        return vec![first.fail(
            "treduce",
            format!("axis {axis} is out of range for {}", first.aval()),
        )];
    };
    let mut avals: Vec<ShapedArray> = invariants.iter().map(|t| t.aval().clone()).collect();
    for x in xs {
        if x.shape().get(axis) != Some(&length) {
            return vec![first.fail(
                "treduce",
                format!(
                    "every array must have {length} micro-batches along axis {axis}, got {}",
                    x.aval()
                ),
            )];
        }
        let mut slice = ShapedArray::new(x.dtype(), x.shape());
        slice.shape.remove(axis);
        avals.push(slice);
    }
    let n_inv = invariants.len();
    let body = trace(&avals, |args| f(&args[..n_inv], &args[n_inv..]));
    let body = match body {
        Ok(b) => b,
        Err(e) => return vec![first.fail("treduce", format!("in the loop body: {e}"))],
    };
    let n_out = body.jaxpr.outvars.len();
    let ops = if ops.is_empty() {
        default_ops(n_out)
    } else {
        ops.to_vec()
    };
    let params = treduce_params(body, axis, length, n_inv, &ops, schedule);
    let operands: Vec<&Tensor> = invariants.iter().chain(xs.iter()).copied().collect();
    Tensor::bind(Prim::Treduce, params, &operands)
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
