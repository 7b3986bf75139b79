//! VJP rules of the collectives and of `shard_map`, as JAX transposes them: `psum` ↔ `pvary`,
//! `all_gather` ↔ `psum_scatter`, `ppermute` ↔ the inverse permutation, `all_to_all` ↔ the
//! same exchange with split and concat axes swapped, and `pbroadcast` sends the sum of the
//! cotangents back to its source; each over all of its collective's axes, in their order, and
//! within its `axis_index_groups`. `pmax` and `pmin` are not differentiable (nor in JAX). The VJP
//! of a `shard_map` is a `shard_map` of its body's VJP, taking the primal blocks and the
//! cotangent blocks (laid out by the out_specs) and returning the operands' cotangent blocks.
//!
//! `psum_invariant` transposes like `psum` (to `pvary`); `all_gather_invariant`, whose result
//! is the same on every device, to each device's own block of the cotangent (JAX's rule: a
//! dynamic slice at the device's index).
//!
//! The reduced/unreduced collectives: JAX types the cotangent of a reduced value as unreduced
//! (a sum still owed) and the reverse, and takes the sum where the primal was reduced
//! (`preduced` transposes to `unreduced_psum`, `reduced_vary_cast_p` to
//! `vary_unreduced_cast_p`, `all_gather_reduced` to `unreduced_reduce_scatter`). Tessera's
//! avals carry reduced/unreduced axes through the collectives, unary operations and agreeing
//! sums only, so a cotangent's type cannot say whether its sum is owed. Tessera therefore keeps
//! every cotangent whole (the value the derivative has, on every device) and takes the sum
//! where the primal became varying: `reduced_vary_cast_p` transposes like `pvary`, to `psum`;
//! `preduced` and `vary_unreduced_cast_p` to the cotangent itself (cast with `pvary`);
//! `unreduced_psum` to `preduced`; `all_gather_reduced`, whose cotangent is whole, to each
//! device's own block (as `all_gather_invariant`); `unreduced_reduce_scatter` to
//! `all_gather_reduced` (JAX's rule). The gradients equal JAX's; the backward programs place
//! the sum at the other end of the chain.
//!
//! A `check_vma=False` body (and `pmap`'s) types no value by the axes it varies over, so JAX
//! transposes it differently: `psum` to `psum`, a result's cotangent divided by the number of
//! devices over the axes its out_spec leaves out, and an operand's cotangent summed over the
//! axes its in_spec leaves out. Untiled `all_to_all` (printed with `tiled=False` between the
//! dimension its wrapper inserts and removes) is refused, as JAX 0.10 refuses it.
//!
//! `ragged_all_to_all` is linear in its `operand` and `output` together (its offsets and sizes
//! are integers, without tangents): its tangent is the same exchange of the two tangents. Its
//! transpose (JAX's rule) sends each received slice of the cotangent back where it came from (a
//! `ragged_all_to_all` with the offsets exchanged by a tiled `all_to_all` and the sizes
//! swapped), and gives `output` the cotangent with the rows written by the exchange zeroed.

use super::rules::zeros_like;
use crate::axis_env;
use crate::error::IrError;
use crate::params::{ParamValue, Params};
use crate::prim::{
    CollectiveKind, CollectiveOp, CollectiveParams, Prim, ShardMapParams, shard_map_params,
};
use crate::trace::{Tensor, call_closed, trace, where_};

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
    let op = prim.collective();
    Ok(match &p.kind {
        CollectiveKind::Psum => match groups {
            Some(groups) => g.psum_in_groups(&axes, groups),
            None if !axis_env::check_vma() => g.psum(&axes),
            None => g.pvary(&axes),
        },
        // A reduced value's cotangent is whole on every device (see the module doc).
        CollectiveKind::Pvary | CollectiveKind::ReducedVaryCast => g.psum(&axes),
        CollectiveKind::Preduced => g.clone(),
        CollectiveKind::UnreducedPsum => Tensor::bind1(
            Prim::Preduced,
            Params::new().with("axes", axes_value(&axes)),
            &[g],
        ),
        CollectiveKind::VaryUnreducedCast => g.pvary(&axes),
        &CollectiveKind::AllGather {
            dimension, tiled, ..
        } if prim == Prim::AllGatherInvariant || op == Some(CollectiveOp::AllGatherReduced) => {
            own_block(g, &axes, dimension, tiled)
        }
        &CollectiveKind::AllGather {
            dimension, tiled, ..
        } => g.psum_scatter_over(&axes, groups, dimension as i64, tiled),
        &CollectiveKind::ReduceScatter {
            dimension, tiled, ..
        } if op == Some(CollectiveOp::UnreducedReduceScatter) => g
            .pvary(&axes)
            .all_gather_reduced_over(&axes, dimension as i64, tiled),
        &CollectiveKind::ReduceScatter {
            dimension, tiled, ..
        } => g.all_gather_over(&axes, groups, dimension as i64, tiled),
        CollectiveKind::Ppermute { perm } => {
            let inverse: Vec<(i64, i64)> = perm.iter().map(|&(s, t)| (t, s)).collect();
            g.ppermute_over(&axes, &inverse)
        }
        // JAX differentiates an untiled all_to_all whose split and concat axes are one
        // (`pswapaxes`), and refuses the others: its rule applies the untiled wrapper again,
        // which adds a dimension the cotangent lacks. Tessera refuses the same programs.
        &CollectiveKind::AllToAll {
            tiled: false,
            split_axis,
            concat_axis,
        } if split_axis != concat_axis => {
            return Err(IrError::Type {
                prim: prim.name().into(),
                message: format!(
                    "an untiled all_to_all with split_axis {split_axis} and concat_axis \
                     {concat_axis} has no reverse mode: JAX's transpose re-applies the untiled \
                     wrapper to a cotangent whose shape does not fit it, so JAX refuses it too; \
                     pass tiled=True, or split and concatenate along one axis (pswapaxes)"
                ),
            });
        }
        // Tiled, or untiled along one axis: the primitive splits and concatenates the same way
        // (the untiled wrapper's dimension lives outside it), so its transpose swaps the axes.
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
        CollectiveKind::RaggedAllToAll => {
            return Err(IrError::Type {
                prim: prim.name().into(),
                message: "ragged_all_to_all has six operands; its VJP is `ragged_vjp`".into(),
            });
        }
        CollectiveKind::Pmax
        | CollectiveKind::Pmin
        | CollectiveKind::AxisIndex
        | CollectiveKind::Psend { .. }
        | CollectiveKind::Precv { .. } => {
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

fn axes_value(axes: &[&str]) -> ParamValue {
    ParamValue::Tuple(
        axes.iter()
            .map(|a| ParamValue::Str((*a).to_owned()))
            .collect(),
    )
}

fn axis_set(axes: &[String]) -> std::collections::BTreeSet<String> {
    axes.iter().cloned().collect()
}

/// The transpose of `all_gather_invariant`: each device's own block of the (invariant)
/// cotangent `g` along result dimension `dimension`, at the device's index over `axes`.
fn own_block(g: &Tensor, axes: &[&str], dimension: usize, tiled: bool) -> Tensor {
    let g = g.pvary(axes);
    let n = axis_env::mesh_for("all_gather_invariant", axes)
        .map(|m| axes.iter().filter_map(|a| m.axis_size(a)).product::<i64>())
        .unwrap_or(1);
    let mut sizes: Vec<i64> = g.shape().to_vec();
    let block = sizes[dimension] / n.max(1);
    sizes[dimension] = block;
    let here = Tensor::axis_index_over(&g, axes).astype(crate::dtype::DType::I32);
    let start = &here * &here.full_like_scalar(block as f64);
    let zero = start.full_like_scalar(0.0);
    let starts: Vec<&Tensor> = (0..sizes.len())
        .map(|d| if d == dimension { &start } else { &zero })
        .collect();
    let mut operands = vec![&g];
    operands.extend(starts);
    let params = Params::new().with("slice_sizes", ParamValue::ints(&sizes));
    let sliced = Tensor::bind1(Prim::DynamicSlice, params, &operands);
    if tiled {
        return sliced;
    }
    let mut shape = sizes.clone();
    shape.remove(dimension);
    sliced.reshape(&shape)
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
    let body_vjp = match p.in_body(|| super::vjp(p.body)) {
        Ok(b) if p.check_vma => Ok(b),
        Ok(b) => p.in_body(|| unchecked_cotangents(&p, &b)),
        Err(e) => Err(e),
    };
    let body_vjp = match body_vjp {
        Ok(b) => b,
        Err(e) => {
            let msg = format!("in the body's VJP: {e}");
            return vec![Some(anchor.fail("shard_map", msg)); x.len()];
        }
    };
    let mut cts = super::rules::cotangents_or_zeros(gs, y);
    if !p.check_vma {
        // JAX's unchecked transpose: a result's cotangent is shared by the devices its spec
        // leaves out, which the body's `psum` transposes sum again.
        for (ct, spec) in cts.iter_mut().zip(&p.out_specs) {
            let n: i64 = p
                .unmentioned(spec)
                .iter()
                .filter_map(|a| p.mesh.axis_size(a))
                .product();
            if n > 1 && ct.dtype().is_float() {
                *ct = &*ct / n as f64;
            }
        }
    }
    let mut operands: Vec<&Tensor> = x.iter().collect();
    operands.extend(cts.iter());
    let in_specs: Vec<_> = p.in_specs.iter().chain(&p.out_specs).cloned().collect();
    let params = shard_map_params(&p.mesh, &in_specs, &p.in_specs, body_vjp)
        .with("check_vma", ParamValue::Bool(p.check_vma));
    Tensor::bind(Prim::ShardMap, params, &operands)
        .into_iter()
        .zip(x)
        .map(|(ct, x)| x.dtype().is_float().then_some(ct))
        .collect()
}

/// The body VJP of a `check_vma=False` `shard_map` with each operand's cotangent summed over
/// the axes its in_spec leaves out (JAX's unchecked transpose: the body's cotangent of a
/// replicated operand differs between devices).
fn unchecked_cotangents(
    p: &ShardMapParams<'_>,
    body_vjp: &crate::jaxpr::ClosedJaxpr,
) -> crate::error::Result<crate::jaxpr::ClosedJaxpr> {
    trace(&body_vjp.jaxpr.in_avals(), |args| {
        let refs: Vec<&Tensor> = args.iter().collect();
        call_closed(body_vjp, &refs)
            .into_iter()
            .zip(&p.in_specs)
            .map(|(ct, spec)| {
                let axes = p.unmentioned(spec);
                let axes: Vec<&str> = axes.iter().map(String::as_str).collect();
                match axes.is_empty() || !ct.dtype().is_float() {
                    true => ct,
                    false => ct.psum(&axes),
                }
            })
            .collect()
    })
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
    let p = match CollectiveParams::read(prim, params, x.first().map_or(0, Tensor::rank)) {
        Ok(p) => p,
        Err(e) => return vec![Some(y[0].fail(prim.name(), e.to_string()))],
    };
    let axes = p.axes.clone();
    match op {
        CollectiveOp::Pmax
        | CollectiveOp::Pmin
        | CollectiveOp::AxisIndex
        | CollectiveOp::Psend
        | CollectiveOp::Precv => {
            vec![Some(y[0].fail(
                prim.name(),
                format!(
                    "{} is not differentiable (JAX defines no derivative for it)",
                    prim.name()
                ),
            ))]
        }
        CollectiveOp::Pvary => vec![Some(t.pvary(&axes))],
        // A tangent that lost its reduced/unreduced type on the way (most operations drop it)
        // takes the collective with the same values and the plain type.
        CollectiveOp::ReducedVaryCast if t.aval().reduced().is_disjoint(&axis_set(&axes)) => {
            vec![Some(t.pvary(&axes))]
        }
        CollectiveOp::UnreducedPsum if t.aval().unreduced().is_disjoint(&axis_set(&axes)) => {
            let refs: Vec<&str> = axes.iter().map(String::as_str).collect();
            vec![Some(t.psum(&refs))]
        }
        CollectiveOp::UnreducedReduceScatter
            if t.aval().unreduced().is_disjoint(&axis_set(&axes)) =>
        {
            let refs: Vec<&str> = axes.iter().map(String::as_str).collect();
            if let CollectiveKind::ReduceScatter {
                dimension, tiled, ..
            } = p.kind
            {
                vec![Some(t.psum_scatter_over(
                    &refs,
                    None,
                    dimension as i64,
                    tiled,
                ))]
            } else {
                vec![Some(
                    y[0].fail(prim.name(), "reads as a reduce_scatter".into()),
                )]
            }
        }
        CollectiveOp::RaggedAllToAll => vec![Some(y[0].fail(
            prim.name(),
            "ragged_all_to_all has six operands; its JVP is `ragged_jvp`".into(),
        ))],
        CollectiveOp::Psum
        | CollectiveOp::PsumInvariant
        | CollectiveOp::AllGather
        | CollectiveOp::AllGatherInvariant
        | CollectiveOp::ReduceScatter
        | CollectiveOp::Ppermute
        | CollectiveOp::AllToAll
        | CollectiveOp::Pbroadcast
        | CollectiveOp::Preduced
        | CollectiveOp::VaryUnreducedCast
        | CollectiveOp::UnreducedPsum
        | CollectiveOp::ReducedVaryCast
        | CollectiveOp::AllGatherReduced
        | CollectiveOp::UnreducedReduceScatter => {
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
    let body_jvp = match p.in_body(|| super::jvp(p.body)) {
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
    let params = shard_map_params(&p.mesh, &in_specs, &out_specs, body_jvp)
        .with("check_vma", ParamValue::Bool(p.check_vma));
    Tensor::bind(Prim::ShardMap, params, &operands)
        .into_iter()
        .skip(y.len())
        .map(Some)
        .collect()
}

/// The JVP of `ragged_all_to_all`: the same exchange (same offsets and sizes) of the tangents of
/// `operand` and `output`, a missing one taken as zeros; no tangent where both are missing.
pub(super) fn ragged_jvp(
    params: &Params,
    x: &[Tensor],
    ts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let t = |i: usize| ts.get(i).cloned().flatten();
    let (operand_dot, output_dot) = match (t(0), t(1)) {
        (None, None) => return vec![None],
        (a, b) => (
            a.unwrap_or_else(|| zeros_like(&x[0])),
            b.unwrap_or_else(|| zeros_like(&x[1])),
        ),
    };
    let mut operands = vec![&operand_dot, &output_dot];
    operands.extend(x.iter().skip(2));
    vec![Some(Tensor::bind1(
        Prim::RaggedAllToAll,
        params.clone(),
        &operands,
    ))]
}

/// The VJP of `ragged_all_to_all` (JAX's transpose rule) for the cotangent `g` of its result:
/// `operand`'s cotangent gathers back, on each sender, the slices of `g` its receivers wrote
/// (a `ragged_all_to_all` of `g` whose input offsets are where the slices were written, the
/// `all_to_all` of `output_offsets`, and whose output offsets are where they were read, the
/// `all_to_all` of `input_offsets`, with `recv_sizes` and `send_sizes` swapped); `output`'s
/// cotangent is `g` with the rows the exchange overwrote set to zero. The four integer
/// operands get none.
pub(super) fn ragged_vjp(params: &Params, x: &[Tensor], g: &Tensor) -> Vec<Option<Tensor>> {
    let prim = Prim::RaggedAllToAll;
    let fail = |e: String| vec![Some(g.fail(prim.name(), e)); x.len()];
    if x.len() != 6 {
        return fail(format!("takes 6 operands, got {}", x.len()));
    }
    let p = match CollectiveParams::read(prim, params, x[0].rank()) {
        Ok(p) => p,
        Err(e) => return fail(e.to_string()),
    };
    let axes = p.axis_refs();
    let groups = p.groups.as_deref();
    let exchanged = |v: &Tensor| v.all_to_all_over(&axes, groups, 0, 0, true);
    let written_at = exchanged(&x[4]);
    let read_at = exchanged(&x[2]);
    let zero_operand = zeros_like(&x[0]);
    let operand_ct = Tensor::bind1(
        prim,
        params.clone(),
        &[g, &zero_operand, &written_at, &x[5], &read_at, &x[3]],
    );
    // Row m of the result was written by the exchange where some received slice covers it:
    // written_at[i] <= m < written_at[i] + recv_sizes[i].
    let rows = g.shape().first().copied().unwrap_or(0);
    let slices = written_at.shape().first().copied().unwrap_or(0);
    let grid = [rows, slices];
    let m = g.iota_along(&grid, 0).astype(written_at.dtype());
    let start = written_at.broadcast_in_dim(&grid, &[1]);
    let end = (&written_at + &x[5]).broadcast_in_dim(&grid, &[1]);
    let covered = m.ge(&start).binary(Prim::And, &m.lt(&end));
    let written = covered.astype(crate::dtype::DType::I32).max(&[1]);
    let written = written
        .binary(Prim::Gt, &written.full_like_scalar(0.0))
        .broadcast_in_dim(g.shape(), &[0]);
    let output_ct = where_(&written, &zeros_like(g), g);
    let float = |i: usize| x[i].dtype().is_float();
    vec![
        float(0).then_some(operand_ct),
        float(1).then_some(output_ct),
        None,
        None,
        None,
        None,
    ]
}

/// Why `psend`/`precv` refuse differentiation: JAX defines no JVP or transpose rule for them,
/// so differentiating through one fails there too.
fn p2p_not_differentiable(prim: Prim) -> String {
    format!(
        "{} is not differentiable (JAX defines no JVP or transpose for psend and precv); use \
         ppermute, which is, or stop_gradient the value sent",
        prim.name()
    )
}

/// The JVP of `psend` and `precv`: none. A tangent reaching either is a typed error naming it;
/// without one (a constant sent, or the token into `precv`) the result has no tangent.
pub(super) fn p2p_jvp(prim: Prim, y: &[Tensor], ts: &[Option<Tensor>]) -> Vec<Option<Tensor>> {
    if let (Some(_), Some(y0)) = (ts.iter().flatten().next(), y.first()) {
        return vec![Some(y0.fail(prim.name(), p2p_not_differentiable(prim)))];
    }
    vec![None]
}

/// The transpose of `psend` and `precv`: none. A cotangent reaching either is a typed error
/// naming it.
pub(super) fn p2p_vjp(prim: Prim, gs: &[Option<Tensor>]) -> Vec<Option<Tensor>> {
    match gs.iter().flatten().next() {
        Some(g) => vec![Some(g.fail(prim.name(), p2p_not_differentiable(prim)))],
        None => vec![None],
    }
}
