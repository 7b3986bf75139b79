//! The VJP of `treduce` as another `treduce`, so the micro-batch loop survives differentiation:
//! the backward loop runs the body's VJP on each micro-batch (recomputing the body's forward
//! from its operands), with the cotangent of a summed result as a loop invariant and that of a
//! stacked result sliced per micro-batch; the operands' cotangents are summed over the loop for
//! invariants and stacked for the sliced operands. `Max` results have no such rule: a loop
//! combining by `Max` is unrolled before differentiation.

use super::rules::cotangents_or_zeros;
use crate::prim::{Prim, ReduceOp, TreduceParams, treduce_params};
use crate::trace::{Tensor, call_closed, trace};

/// The cotangents of a `treduce`'s operands (`None` for non-float operands).
pub(super) fn treduce_vjp(
    params: &crate::params::Params,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let anchor = &y[0];
    let fail = |msg: String| vec![Some(anchor.fail("treduce", msg)); x.len()];
    let p = match TreduceParams::read(params) {
        Ok(p) => p,
        Err(e) => return fail(e.to_string()),
    };
    let body_vjp = match super::vjp(p.body) {
        Ok(b) => b,
        Err(e) => return fail(format!("in the loop body's VJP: {e}")),
    };
    let cts = cotangents_or_zeros(gs, y);
    // Summed results' cotangents are loop invariants; stacked ones are sliced along `axis`.
    let (mut add_cts, mut sliced_cts, mut kinds) = (Vec::new(), Vec::new(), Vec::new());
    for (ct, &op) in cts.iter().zip(&p.ops) {
        match op {
            ReduceOp::Add => {
                kinds.push(false);
                add_cts.push(ct.clone());
            }
            ReduceOp::Concat(a) => {
                kinds.push(true);
                sliced_cts.push(move_dim(ct, a as usize, 0));
            }
            ReduceOp::Max => {
                return fail("a loop combining by Max is unrolled before differentiation".into());
            }
        }
    }
    // The backward loop slices everything along dimension 0.
    let (invariants, xs) = x.split_at(p.num_invariants);
    let xs: Vec<Tensor> = xs.iter().map(|t| move_dim(t, p.axis, 0)).collect();
    let mut avals: Vec<_> = invariants
        .iter()
        .chain(&add_cts)
        .map(|t| t.aval().clone())
        .collect();
    for t in xs.iter().chain(&sliced_cts) {
        let mut a = t.aval().clone();
        a.shape.remove(0);
        avals.push(a);
    }
    let (n_inv, n_add, n_x) = (invariants.len(), add_cts.len(), xs.len());
    let backward_body = trace(&avals, |a| {
        let (inv, rest) = a.split_at(n_inv);
        let (adds, rest) = rest.split_at(n_add);
        let (xs, slices) = rest.split_at(n_x);
        let (mut next_add, mut next_slice) = (adds.iter(), slices.iter());
        let cts: Vec<&Tensor> = kinds
            .iter()
            .filter_map(|&sliced| {
                if sliced {
                    next_slice.next()
                } else {
                    next_add.next()
                }
            })
            .collect();
        let operands: Vec<&Tensor> = inv.iter().chain(xs).chain(cts).collect();
        call_closed(&body_vjp, &operands)
    });
    let backward_body = match backward_body {
        Ok(b) => b,
        Err(e) => return fail(format!("in the backward loop body: {e}")),
    };
    let ops: Vec<ReduceOp> = (0..x.len())
        .map(|k| {
            if k < n_inv {
                ReduceOp::Add
            } else {
                ReduceOp::Concat(0)
            }
        })
        .collect();
    let backward = treduce_params(backward_body, 0, p.length, n_inv + n_add, &ops, &p.schedule);
    let operands: Vec<&Tensor> = invariants
        .iter()
        .chain(&add_cts)
        .chain(&xs)
        .chain(&sliced_cts)
        .collect();
    Tensor::bind(Prim::Treduce, backward, &operands)
        .into_iter()
        .enumerate()
        .zip(x)
        .map(|((k, ct), x)| {
            let ct = if k < n_inv {
                ct
            } else {
                move_dim(&ct, 0, p.axis)
            };
            x.dtype().is_float().then_some(ct)
        })
        .collect()
}

/// `t` with dimension `from` moved to position `to`.
fn move_dim(t: &Tensor, from: usize, to: usize) -> Tensor {
    if from == to {
        return t.clone();
    }
    let mut perm: Vec<i64> = (0..t.rank() as i64).filter(|&d| d != from as i64).collect();
    perm.insert(to, from as i64);
    t.transpose(&perm)
}
