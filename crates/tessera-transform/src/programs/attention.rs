//! The decomposition of `dot_product_attention` and its backward, built by tracing: what the
//! CPU lowering emits, and what the JVP, the second-order VJP and `vmap` with a batched mask
//! differentiate or batch. The forward is the model library's attention before the operation
//! existed (scores in float32, masked with -1e9, softmax, weights cast back to the values'
//! dtype); the backward computes the softmax's gradient from the same weights.

use crate::trace::{Tensor, shard_map_unchecked, trace, where_};
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::error::{Result, type_error};
use tessera_ir_core::jaxpr::ClosedJaxpr;
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::attention::{operands, stats_dtype};
use tessera_ir_core::prim::{AttentionOp, AttentionParams, AttentionShards, Prim};

/// The primitive `op` with `params` as a program of operands of types `in_avals`.
pub fn attention_program(
    op: AttentionOp,
    params: &Params,
    in_avals: &[ShapedArray],
) -> Result<ClosedJaxpr> {
    let prim = op.prim();
    let p = AttentionParams::read(prim, params)?;
    let (_, _, _, mask) = operands(op, in_avals)
        .ok_or_else(|| type_error(prim.name(), format!("{} operands", in_avals.len())))?;
    let has_mask = mask.is_some();
    let plain: Vec<ShapedArray> = in_avals
        .iter()
        .map(|a| ShapedArray::new(a.dtype, &a.shape))
        .collect();
    match op {
        AttentionOp::Forward => trace(&plain, |a| {
            decomposed(p, &a[0], &a[1], &a[2], has_mask.then(|| &a[3]))
        }),
        AttentionOp::Backward => trace(&plain, |a| {
            let n = a.len();
            // The statistics are not read: the weights are computed again.
            let mask = has_mask.then(|| &a[3]);
            decomposed_backward(p, &a[0], &a[1], &a[2], mask, &a[n - 1])
        }),
    }
}

/// The primitive `op` with `params` run per shard as their `shard_*` parameters lay it out
/// (`AttentionShards`): a program of operands of types `in_avals` whose one `shard_map` over
/// their mesh applies the operation, without them, to each device's blocks (batch and heads
/// split, a mask whole). `None` when the parameters give no layout.
pub fn attention_per_shard_program(
    op: AttentionOp,
    params: &Params,
    in_avals: &[ShapedArray],
) -> Result<Option<ClosedJaxpr>> {
    let prim = op.prim();
    let Some(shards) = AttentionShards::read(prim, params)? else {
        return Ok(None);
    };
    let plain = AttentionShards::strip(params);
    let in_specs: Vec<_> = in_avals.iter().map(|a| shards.spec(a.rank())).collect();
    let out_specs = match op {
        AttentionOp::Forward => vec![shards.spec(4), shards.spec(3)],
        AttentionOp::Backward => vec![shards.spec(4); 3],
    };
    trace(in_avals, |args| {
        let refs: Vec<&Tensor> = args.iter().collect();
        shard_map_unchecked(&shards.mesh, &in_specs, &out_specs, &refs, |blocks| {
            let refs: Vec<&Tensor> = blocks.iter().collect();
            Tensor::bind(prim, plain.clone(), &refs)
        })
    })
    .map(Some)
}

/// `softmax(q kᵀ · scale, masked) v` with grouped-query heads, as `tessera_nn` computed it,
/// and the masked scores' log-sum-exp.
fn decomposed(
    p: AttentionParams,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
) -> Vec<Tensor> {
    let v = repeat_heads(v, group_of(q, k));
    let masked = masked_scores(p, q, k, mask);
    let lse = masked.logsumexp(3).reshape(&masked.shape()[..3]);
    let weights = masked.softmax(3).astype(v.dtype());
    vec![
        weights.dot_general(&v, (&[3], &[2]), (&[0, 1], &[0, 1])),
        lse,
    ]
}

/// The cotangents of `q`, `k` and `v` from the result's cotangent `g`, through the softmax's
/// gradient `dS = P ⊙ (dP − rowsum(P ⊙ dP))` in the softmax's dtype, each key/value head's
/// summed over its query heads.
fn decomposed_backward(
    p: AttentionParams,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    g: &Tensor,
) -> Vec<Tensor> {
    let group = group_of(q, k);
    let weights = masked_scores(p, q, k, mask).softmax(3);
    let wide = weights.dtype();
    let (g_w, v_w) = (g.astype(wide), repeat_heads(v, group).astype(wide));
    let dp = g_w.dot_general(&v_w, (&[3], &[3]), (&[0, 1], &[0, 1]));
    let rows = (&weights * &dp)
        .sum(&[3])
        .broadcast_in_dim(dp.shape(), &[0, 1, 2]);
    let ds = &(&weights * &(&dp - &rows)) * p.scale;
    let k_w = repeat_heads(k, group).astype(wide);
    let dq = ds.dot_general(&k_w, (&[3], &[2]), (&[0, 1], &[0, 1]));
    let dk = ds.dot_general(&q.astype(wide), (&[2], &[2]), (&[0, 1], &[0, 1]));
    let dv = weights.dot_general(&g_w, (&[2], &[2]), (&[0, 1], &[0, 1]));
    vec![
        dq.astype(q.dtype()),
        sum_groups(&dk, group).astype(k.dtype()),
        sum_groups(&dv, group).astype(v.dtype()),
    ]
}

/// Query heads per key/value head.
fn group_of(q: &Tensor, k: &Tensor) -> i64 {
    q.shape()[1] / k.shape()[1].max(1)
}

/// `[b, heads × group, t, d]` summed over each key/value head's `group` heads.
fn sum_groups(x: &Tensor, group: i64) -> Tensor {
    if group == 1 {
        return x.clone();
    }
    let s = x.shape().to_vec();
    x.reshape(&[s[0], s[1] / group, group, s[2], s[3]])
        .sum(&[2])
}

/// The scaled scores `[b, heads, tq, tk]`, masked with -1e9, in float32 at least.
fn masked_scores(p: AttentionParams, q: &Tensor, k: &Tensor, mask: Option<&Tensor>) -> Tensor {
    let k = repeat_heads(k, group_of(q, k));
    let scores = q.dot_general(&k, (&[3], &[3]), (&[0, 1], &[0, 1])) * p.scale;
    // The softmax in float32 at least, whatever the compute dtype.
    let scores = scores.astype(stats_dtype(q.dtype()));
    let (tq, tk) = (q.shape()[2], k.shape()[2]);
    let visible = match (p.is_causal, mask) {
        (false, None) => None,
        (true, None) => Some(causal(q, tq, tk)),
        (false, Some(m)) => Some(m.clone()),
        (true, Some(m)) => Some(causal(q, tq, tk).binary(Prim::And, m)),
    };
    match visible {
        Some(visible) => where_(&visible, &scores, &scores.full_like_scalar(-1e9)),
        None => scores,
    }
}

/// `[tq, tk]`: true where the key's position is at or before the query's.
fn causal(anchor: &Tensor, tq: i64, tk: i64) -> Tensor {
    let rows = anchor.iota_along(&[tq, tk], 0);
    let cols = anchor.iota_along(&[tq, tk], 1);
    rows.ge(&cols)
}

/// Keys or values of `kv_heads` heads repeated for each of their `group` query heads.
fn repeat_heads(x: &Tensor, group: i64) -> Tensor {
    if group == 1 {
        return x.clone();
    }
    let s = x.shape().to_vec();
    x.broadcast_in_dim(&[s[0], s[1], group, s[2], s[3]], &[0, 1, 3, 4])
        .reshape(&[s[0], s[1] * group, s[2], s[3]])
}
