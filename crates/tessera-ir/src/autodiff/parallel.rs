//! VJP rules of the collectives and of `shard_map`, as JAX transposes them: `psum` ↔ `pvary`,
//! `all_gather` ↔ `psum_scatter`, `ppermute` ↔ the inverse permutation, `all_to_all` ↔ the
//! same exchange with split and concat axes swapped, and `pbroadcast` sends the sum of the
//! cotangents back to its source; each over all of its collective's axes, in their order, and
//! within its `axis_index_groups`. `pmax` and `pmin` are not differentiable (nor in JAX). The VJP
//! of a `shard_map` is a `shard_map` of its body's VJP, taking the primal blocks and the
//! cotangent blocks (laid out by the out_specs) and returning the operands' cotangent blocks.

use super::rules::zeros_like;
use crate::axis_env;
use crate::error::IrError;
use crate::params::{ParamValue, Params};
use crate::prim::{
    CollectiveKind, CollectiveOp, CollectiveParams, Prim, ShardMapParams, shard_map_params,
};
use crate::trace::{Tensor, where_};

/// The cotangent of a collective's operand (`None` for `axis_index`, which has none).
pub(super) fn collective_vjp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    g: &Tensor,
) -> Vec<Option<Tensor>> {
    let Some(op) = prim.collective() else {
        return vec![Some(g.fail(prim.name(), "is not a collective".into()))];
    };
    if op == CollectiveOp::AxisIndex {
        return Vec::new();
    }
    let Some(x) = x.first() else {
        return vec![Some(g.fail(prim.name(), "needs an operand".into()))];
    };
    let ct = CollectiveParams::read(prim, params, x.rank())
        .and_then(|p| collective_transpose(prim, &p, params, g))
        .unwrap_or_else(|e| g.fail(prim.name(), e.to_string()));
    vec![x.dtype().is_float().then_some(ct)]
}

/// The transpose of a collective with typed parameters `p` (printed as `params`) applied to the
/// cotangent `g` (`axis_index` has none).
fn collective_transpose(
    prim: Prim,
    p: &CollectiveParams,
    params: &Params,
    g: &Tensor,
) -> Result<Tensor, IrError> {
    let axes = p.axis_refs();
    let groups = p.groups.as_deref();
    Ok(match &p.kind {
        CollectiveKind::Psum => match groups {
            Some(groups) => g.psum_in_groups(&axes, groups),
            None => g.pvary(&axes),
        },
        CollectiveKind::Pvary => g.psum(&axes),
        &CollectiveKind::AllGather {
            dimension, tiled, ..
        } => g.psum_scatter_over(&axes, groups, dimension as i64, tiled),
        &CollectiveKind::ReduceScatter {
            dimension, tiled, ..
        } => g.all_gather_over(&axes, groups, dimension as i64, tiled),
        CollectiveKind::Ppermute { perm } => {
            let inverse: Vec<(i64, i64)> = perm.iter().map(|&(s, t)| (t, s)).collect();
            g.ppermute_over(&axes, &inverse)
        }
        &CollectiveKind::AllToAll {
            split_axis,
            concat_axis,
            ..
        } => {
            let p = params
                .clone()
                .with("split_axis", ParamValue::Int(concat_axis as i64))
                .with("concat_axis", ParamValue::Int(split_axis as i64));
            Tensor::bind1(Prim::AllToAll, p, &[g])
        }
        &CollectiveKind::Pbroadcast { source } => pbroadcast_transpose(g, &axes, groups, source),
        CollectiveKind::Pmax | CollectiveKind::Pmin | CollectiveKind::AxisIndex => {
            return Err(IrError::Type {
                prim: prim.name().into(),
                message: format!(
                    "{} is not differentiable (JAX defines no derivative for it); stop_gradient \
                     its operand",
                    prim.name()
                ),
            });
        }
    })
}

/// The cotangent of `pbroadcast`'s operand: on each group's source device (index `source`
/// within its group, the axes' index without groups), the sum of the group's cotangents; zero
/// elsewhere.
fn pbroadcast_transpose(
    g: &Tensor,
    axes: &[&str],
    groups: Option<&[Vec<i64>]>,
    source: i64,
) -> Tensor {
    let here = Tensor::axis_index_over(g, axes).broadcast_to(g.shape());
    let sources: Vec<i64> = match groups {
        Some(groups) => groups
            .iter()
            .filter_map(|members| members.get(source as usize).copied())
            .collect(),
        None => vec![source],
    };
    let at = |s: i64| here.eq(&here.full_like_scalar(s as f64));
    let is_source = sources
        .iter()
        .map(|&s| at(s))
        .reduce(|a, b| a.binary(Prim::Or, &b))
        .unwrap_or_else(|| at(-1));
    let total = match groups {
        Some(groups) => g.psum_in_groups(axes, groups),
        None => g.psum(axes),
    };
    where_(&is_source, &total, &zeros_like(g))
}

/// The VJP of a `shard_map` equation: a `shard_map` of the body's VJP.
pub(super) fn shard_map_vjp(
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let anchor = &y[0];
    let p = match ShardMapParams::read(params) {
        Ok(p) => p,
        Err(e) => return vec![Some(anchor.fail("shard_map", e.to_string())); x.len()],
    };
    let body_vjp = match axis_env::with_mesh(&p.mesh, || super::vjp(p.body)) {
        Ok(b) => b,
        Err(e) => {
            let msg = format!("in the body's VJP: {e}");
            return vec![Some(anchor.fail("shard_map", msg)); x.len()];
        }
    };
    let cts = super::rules::cotangents_or_zeros(gs, y);
    let mut operands: Vec<&Tensor> = x.iter().collect();
    operands.extend(cts.iter());
    let in_specs: Vec<_> = p.in_specs.iter().chain(&p.out_specs).cloned().collect();
    let params = shard_map_params(&p.mesh, &in_specs, &p.in_specs, body_vjp);
    Tensor::bind(Prim::ShardMap, params, &operands)
        .into_iter()
        .zip(x)
        .map(|(ct, x)| x.dtype().is_float().then_some(ct))
        .collect()
}

/// The tangent of a collective's result: the linear collectives apply themselves to the
/// tangent (cast to vary like the operand first); `pmax`/`pmin` have no derivative.
pub(super) fn collective_jvp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    t: Option<Tensor>,
) -> Vec<Option<Tensor>> {
    let Some(op) = prim.collective() else {
        return vec![Some(y[0].fail(prim.name(), "is not a collective".into()))];
    };
    if op == CollectiveOp::AxisIndex {
        return vec![None];
    }
    let Some(t) = t else {
        return vec![None];
    };
    let axes = match CollectiveParams::read(prim, params, x.first().map_or(0, Tensor::rank)) {
        Ok(p) => p.axes,
        Err(e) => return vec![Some(y[0].fail(prim.name(), e.to_string()))],
    };
    match op {
        CollectiveOp::Pmax | CollectiveOp::Pmin | CollectiveOp::AxisIndex => {
            vec![Some(y[0].fail(
                prim.name(),
                format!(
                    "{} is not differentiable (JAX defines no derivative for it)",
                    prim.name()
                ),
            ))]
        }
        CollectiveOp::Pvary => vec![Some(t.pvary(&axes))],
        CollectiveOp::Psum
        | CollectiveOp::AllGather
        | CollectiveOp::ReduceScatter
        | CollectiveOp::Ppermute
        | CollectiveOp::AllToAll
        | CollectiveOp::Pbroadcast => {
            let varying: Vec<&String> = x[0].aval().vma.iter().collect();
            let t = t.pvary(&varying);
            vec![Some(Tensor::bind1(prim, params.clone(), &[&t]))]
        }
    }
}

/// The JVP of a `shard_map` equation: a `shard_map` of its body's JVP, taking primal and tangent
/// blocks (both laid out by the in_specs) and returning result and tangent blocks.
pub(super) fn shard_map_jvp(
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    ts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let anchor = &y[0];
    let fail = |msg: String| vec![Some(anchor.fail("shard_map", msg)); y.len()];
    let p = match ShardMapParams::read(params) {
        Ok(p) => p,
        Err(e) => return fail(e.to_string()),
    };
    let body_jvp = match axis_env::with_mesh(&p.mesh, || super::jvp(p.body)) {
        Ok(b) => b,
        Err(e) => return fail(format!("in the body's JVP: {e}")),
    };
    let tangents: Vec<Tensor> = x
        .iter()
        .zip(ts)
        .map(|(x, t)| t.clone().unwrap_or_else(|| zeros_like(x)))
        .collect();
    let operands: Vec<&Tensor> = x.iter().chain(tangents.iter()).collect();
    let in_specs: Vec<_> = p.in_specs.iter().chain(&p.in_specs).cloned().collect();
    let out_specs: Vec<_> = p.out_specs.iter().chain(&p.out_specs).cloned().collect();
    let params = shard_map_params(&p.mesh, &in_specs, &out_specs, body_jvp);
    Tensor::bind(Prim::ShardMap, params, &operands)
        .into_iter()
        .skip(y.len())
        .map(Some)
        .collect()
}
