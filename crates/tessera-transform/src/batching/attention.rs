//! Batching `dot_product_attention` and its backward: with the mask absent or unbatched, the
//! batch dimension joins every other operand's and result's leading (batch) dimension (one operation on `size × batch`
//! rows, as a fused kernel wants); a batched mask batches the decomposition instead.

use super::{Batched, to_front};
use crate::params::Params;
use crate::prim::attention::operands;
use crate::prim::{AttentionOp, Prim};
use crate::programs::attention_program;
use crate::trace::{Tensor, call_closed};

pub(super) fn batch(prim: Prim, params: &Params, args: &[Batched], size: i64) -> Vec<Batched> {
    let op = AttentionOp::of(prim);
    let mask_batched =
        operands(op, args).is_some_and(|(_, _, _, m)| m.is_some_and(|m| m.1.is_some()));
    match mask_batched {
        false => merged(prim, op, params, args, size),
        true => decomposed(prim, op, params, args, size),
    }
}

/// The batch dimension folded into each rank-4 operand's leading dimension.
fn merged(
    prim: Prim,
    op: AttentionOp,
    params: &Params,
    args: &[Batched],
    size: i64,
) -> Vec<Batched> {
    let has_mask = operands(op, args).is_some_and(|(_, _, _, m)| m.is_some());
    let mask_at = if has_mask { Some(3) } else { None };
    let operands: Vec<Tensor> = args
        .iter()
        .enumerate()
        .map(|(i, a)| match Some(i) == mask_at {
            true => a.0.clone(),
            false => {
                let x = to_front(a, size);
                let mut s = x.shape().to_vec();
                let lead = s.remove(0);
                s[0] *= lead;
                x.reshape(&s)
            }
        })
        .collect();
    let refs: Vec<&Tensor> = operands.iter().collect();
    Tensor::bind(prim, params.clone(), &refs)
        .into_iter()
        .map(|t| {
            let mut s = t.shape().to_vec();
            s[0] /= size.max(1);
            s.insert(0, size);
            (t.reshape(&s), Some(0))
        })
        .collect()
}

/// The decomposition, batched.
fn decomposed(
    prim: Prim,
    op: AttentionOp,
    params: &Params,
    args: &[Batched],
    size: i64,
) -> Vec<Batched> {
    let anchor = &args[0].0;
    let avals: Vec<_> = args
        .iter()
        .map(|(t, d)| {
            let mut aval = t.aval().clone();
            if let Some(d) = d {
                aval.shape.remove(*d);
            }
            aval
        })
        .collect();
    let results = match op {
        AttentionOp::Forward => 2,
        AttentionOp::Backward => 3,
    };
    let in_axes: Vec<Option<usize>> = args.iter().map(|a| a.1).collect();
    let program = attention_program(op, params, &avals)
        .and_then(|p| super::vmap(&p, &in_axes, &vec![0; results], size));
    match program {
        Ok(p) => {
            let refs: Vec<&Tensor> = args.iter().map(|a| &a.0).collect();
            call_closed(&p, &refs)
                .into_iter()
                .map(|t| (t, Some(0)))
                .collect()
        }
        Err(e) => vec![(anchor.fail(prim.name(), e.to_string()), None); results],
    }
}
