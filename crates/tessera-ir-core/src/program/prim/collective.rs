//! The parallel primitives of JAX's `lax.parallel` that run inside a `shard_map` body:
//! `psum`, `pmax`, `pmin`, `all_gather`, `reduce_scatter` (`psum_scatter`), `ppermute`,
//! `all_to_all`, `axis_index`, `pvary` and `pbroadcast`, and those of `check_vma=True` bodies
//! and of JAX's reduced/unreduced types: `psum_invariant` and `all_gather_invariant` (a `psum`
//! and an `all_gather` whose results are invariant over their axes), `preduced` and
//! `vary_unreduced_cast_p` (identities on values that mark the result reduced, `R:`, or
//! unreduced, `U:`) and `unreduced_psum` (the sum an unreduced value owes). Their axes are named
//! mesh axes bound by the enclosing `shard_map` (looked up in [`crate::axis_env`]).
//!
//! Typing follows JAX with `check_vma`: each value records the manual axes it varies over
//! (`vma`). Reductions take a value varying over their axes and return one invariant over them;
//! gathers, scatters, permutations and all-to-alls keep the input's `vma`; `axis_index` varies
//! over its axis; `pvary` casts an invariant value to a varying one. In a `check_vma=False` body
//! (and `pmap`'s) values carry no such types, and collectives take any operand.
//!
//! `ragged_all_to_all`, whose six operands carry its offsets and sizes, has its rules in
//! `ragged.rs`; `psend` and `precv` (a token-ordered send and receive) in `p2p.rs`; the type
//! rules of `reduced_vary_cast_p`, `all_gather_reduced` and `unreduced_reduce_scatter` (JAX's
//! checks of reduced and unreduced axes) are in `reduced.rs`.
//!
//! A single device cannot evaluate a collective: the SPMD interpreter ([`crate::spmd`]) runs
//! every device of the mesh in lock step and calls [`simulate`] with all devices' operands.

use std::collections::BTreeSet;

use ndarray::{ArrayD, Axis};
use tessera_sharding::{AbstractMesh, groups};

use super::{CollectiveKind, CollectiveOp, CollectiveParams, Prim, arity, p2p, ragged, reduced};
use crate::array::{Array, Elem, is_exact_int};
use crate::aval::ShapedArray;
use crate::axis_env;
use crate::dtype::DType;
use crate::error::{IrError, Result, type_error};
use crate::program::params::Params;

fn sharding(prim: Prim, e: tessera_sharding::ShardingError) -> IrError {
    type_error(prim.name(), e.to_string())
}

/// The shape and `vma` rules.
pub(super) fn abstract_eval(
    prim: Prim,
    op: CollectiveOp,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    let operands = match op {
        CollectiveOp::AxisIndex => 0,
        CollectiveOp::RaggedAllToAll => 6,
        CollectiveOp::Psend | CollectiveOp::Precv => 1,
        CollectiveOp::Psum
        | CollectiveOp::Pmax
        | CollectiveOp::Pmin
        | CollectiveOp::AllGather
        | CollectiveOp::ReduceScatter
        | CollectiveOp::Ppermute
        | CollectiveOp::AllToAll
        | CollectiveOp::Pvary
        | CollectiveOp::Pbroadcast
        | CollectiveOp::PsumInvariant
        | CollectiveOp::AllGatherInvariant
        | CollectiveOp::Preduced
        | CollectiveOp::VaryUnreducedCast
        | CollectiveOp::UnreducedPsum
        | CollectiveOp::ReducedVaryCast
        | CollectiveOp::AllGatherReduced
        | CollectiveOp::UnreducedReduceScatter => 1,
    };
    arity(prim, inputs.len(), operands)?;
    let rank = inputs.first().map_or(0, ShapedArray::rank);
    let p = CollectiveParams::read(prim, params, rank)?;
    let mesh = axis_env::mesh_for(prim.name(), &p.axes)?;
    let Some(x) = inputs.first() else {
        let mut out = ShapedArray::scalar(DType::I32);
        out.vma = p.axes.into_iter().collect();
        return Ok(vec![out]);
    };
    let mut out = x.clone();
    out.weak_type = false;
    out.sharding = None;
    let checked = axis_env::check_vma();
    let axes: BTreeSet<String> = p.axes.iter().cloned().collect();
    if matches!(
        op,
        CollectiveOp::AllGatherReduced | CollectiveOp::UnreducedReduceScatter
    ) {
        let n = p
            .replica_groups(prim, &mesh)?
            .first()
            .map_or(1, |g| g.len() as i64);
        return reduced::out_type(prim, &p, x, out, n);
    }
    let invariant_operand = |what: &str| match p.axes.iter().find(|a| x.vma.contains(*a)) {
        Some(a) if checked => Err(type_error(
            prim.name(),
            format!("the value varies over '{a}'; {what} takes values invariant over its axes"),
        )),
        Some(_) | None => Ok(()),
    };
    match p.kind {
        CollectiveKind::Preduced => {
            invariant_operand("preduced")?;
            if !x.reduced().is_disjoint(&axes) {
                return Err(type_error(
                    prim.name(),
                    format!("the operand is already reduced over some of its axes: {x}"),
                ));
            }
            out.set_reduced_unreduced(&x.reduced() | &axes, x.unreduced());
            return Ok(vec![out]);
        }
        CollectiveKind::UnreducedPsum => {
            if x.unreduced().is_disjoint(&axes) {
                return Err(type_error(
                    prim.name(),
                    format!(
                        "is an Unreduced -> Invariant collective: the operand must be unreduced \
                         (`U:`) over some of its axes, got {x}; cast a varying value with \
                         vary_unreduced_cast first, or use psum"
                    ),
                ));
            }
            invariant_operand("unreduced_psum")?;
            out.set_reduced_unreduced(x.reduced(), &x.unreduced() - &axes);
            return Ok(vec![out]);
        }
        CollectiveKind::VaryUnreducedCast => {
            if let Some(a) = p.axes.iter().find(|a| checked && !x.vma.contains(*a)) {
                return Err(type_error(
                    prim.name(),
                    format!("needs a value varying over '{a}', but {x} does not"),
                ));
            }
            out.vma = &x.vma - &axes;
            out.set_reduced_unreduced(x.reduced(), &x.unreduced() | &axes);
            return Ok(vec![out]);
        }
        CollectiveKind::ReducedVaryCast => {
            return Ok(vec![reduced::reduced_vary_cast(prim, x, out, &axes)?]);
        }
        CollectiveKind::RaggedAllToAll => {
            let n = p
                .replica_groups(prim, &mesh)?
                .first()
                .map_or(1, |g| g.len() as i64);
            return ragged::out_type(prim, &p, inputs, n);
        }
        CollectiveKind::Psend { .. } | CollectiveKind::Precv { .. } => {
            let n = p
                .replica_groups(prim, &mesh)?
                .first()
                .map_or(1, |g| g.len() as i64);
            return p2p::out_type(prim, &p, x, n);
        }
        CollectiveKind::Psum
        | CollectiveKind::Pmax
        | CollectiveKind::Pmin
        | CollectiveKind::Pvary
        | CollectiveKind::AxisIndex
        | CollectiveKind::AllGather { .. }
        | CollectiveKind::ReduceScatter { .. }
        | CollectiveKind::Ppermute { .. }
        | CollectiveKind::AllToAll { .. }
        | CollectiveKind::Pbroadcast { .. } => {}
    }
    if p.kind == CollectiveKind::Pvary {
        // Unchecked (`check_vma=False`) the varying axes are not typed, so a cast over an axis
        // the value already varies over says nothing (JAX's `pvary` there is the identity).
        if let Some(a) = p.axes.iter().find(|a| checked && x.vma.contains(*a)) {
            return Err(type_error(
                prim.name(),
                format!("the value already varies over '{a}'; pvary casts invariant values only"),
            ));
        }
        out.vma.extend(p.axes);
        return Ok(vec![out]);
    }
    if let Some(a) = p.axes.iter().find(|a| checked && !x.vma.contains(*a)) {
        return Err(type_error(
            prim.name(),
            format!(
                "needs a value varying over '{a}', but {x} varies over {{{}}}; apply pvary \
                 first (the tracing API does this for you)",
                x.vma.iter().cloned().collect::<Vec<_>>().join(",")
            ),
        ));
    }
    let n = p
        .replica_groups(prim, &mesh)?
        .first()
        .map_or(1, |g| g.len() as i64);
    out_type(prim, &p, x, out, n)
}

/// The result type of a collective other than `axis_index` and `pvary` on `x`, whose groups
/// have `n` devices; `out` is `x` with the collective's weak type and sharding.
fn out_type(
    prim: Prim,
    p: &CollectiveParams,
    x: &ShapedArray,
    mut out: ShapedArray,
    n: i64,
) -> Result<Vec<ShapedArray>> {
    match &p.kind {
        CollectiveKind::Psum | CollectiveKind::Pmax | CollectiveKind::Pmin => {
            if p.groups.is_none() {
                out.vma = &x.vma - &p.axes.iter().cloned().collect::<BTreeSet<_>>();
            }
        }
        &CollectiveKind::AllGather {
            dimension,
            tiled,
            axis_size,
        } => {
            check_axis_size(prim, axis_size, n)?;
            if prim == Prim::AllGatherInvariant {
                out.vma = &x.vma - &p.axes.iter().cloned().collect::<BTreeSet<_>>();
            }
            if tiled {
                out.shape[dimension] *= n;
            } else {
                out.shape.insert(dimension, n);
            }
        }
        &CollectiveKind::ReduceScatter {
            dimension,
            tiled,
            axis_size,
        } => {
            check_axis_size(prim, axis_size, n)?;
            out.shape = scatter_shape(&x.shape, dimension, n, tiled)?;
        }
        &CollectiveKind::AllToAll {
            split_axis,
            concat_axis,
            ..
        } => {
            if x.shape[split_axis] % n != 0 {
                return Err(type_error(
                    prim.name(),
                    format!(
                        "split_axis {split_axis} has size {}, which the {n} devices of '{}' do \
                         not divide",
                        x.shape[split_axis],
                        p.axes.join(",")
                    ),
                ));
            }
            out.shape[split_axis] /= n;
            out.shape[concat_axis] *= n;
        }
        CollectiveKind::Ppermute { perm } => {
            groups::check_permutation(perm, n).map_err(|e| sharding(prim, e))?;
        }
        &CollectiveKind::Pbroadcast { source } => {
            if !(0..n).contains(&source) {
                return Err(type_error(
                    prim.name(),
                    format!("source {source} is out of range for groups of {n} devices"),
                ));
            }
        }
        // Typed by `abstract_eval` itself (`ragged_all_to_all` by `ragged::out_type`).
        CollectiveKind::AxisIndex
        | CollectiveKind::RaggedAllToAll
        | CollectiveKind::Psend { .. }
        | CollectiveKind::Precv { .. }
        | CollectiveKind::Pvary
        | CollectiveKind::Preduced
        | CollectiveKind::VaryUnreducedCast
        | CollectiveKind::ReducedVaryCast
        | CollectiveKind::UnreducedPsum => {}
    }
    Ok(vec![out])
}

pub(super) fn check_axis_size(prim: Prim, axis_size: i64, n: i64) -> Result<()> {
    if axis_size != n {
        return Err(type_error(
            prim.name(),
            format!("axis_size={axis_size}, but the axes have {n} devices"),
        ));
    }
    Ok(())
}

/// `psum_scatter`'s result shape: dimension `d` divided by `n` (tiled) or removed (untiled,
/// where it must equal `n`).
pub(super) fn scatter_shape(shape: &[i64], d: usize, n: i64, tiled: bool) -> Result<Vec<i64>> {
    let mut out = shape.to_vec();
    let size = shape[d];
    if tiled {
        if size % n != 0 {
            return Err(type_error(
                "psum_scatter",
                format!(
                    "scatter dimension {d} has size {size}, which is not divisible by the {n} \
                     devices of the axis; pad it or scatter another dimension"
                ),
            ));
        }
        out[d] = size / n;
    } else {
        if size != n {
            return Err(type_error(
                "psum_scatter",
                format!(
                    "untiled scatter dimension {d} has size {size} but the axis has {n} \
                     devices; they must be equal (or pass tiled=true)"
                ),
            ));
        }
        out.remove(d);
    }
    Ok(out)
}

/// Evaluates a collective on every device of `mesh` at once: `operands[p]` are the operands on
/// mesh position `p` (none for `axis_index`, six for `ragged_all_to_all`, one for the others),
/// the result is each position's value of type `out`.
pub fn simulate(
    prim: Prim,
    params: &Params,
    mesh: &AbstractMesh,
    operands: &[Vec<Array>],
    out: &ShapedArray,
) -> Result<Vec<Array>> {
    let size = mesh.size() as usize;
    let xs: Vec<&Array> = operands.iter().filter_map(|o| o.first()).collect();
    let rank = xs.first().map_or(0, |x| x.dims().len());
    let p = CollectiveParams::read(prim, params, rank)?;
    if p.kind == CollectiveKind::AxisIndex {
        return (0..size as i64)
            .map(|pos| {
                let i = groups::axis_index_of(mesh, &p.axes, pos).map_err(|e| sharding(prim, e))?;
                Ok(Array::scalar(DType::I32, i as f64))
            })
            .collect();
    }
    if xs.len() != size {
        return Err(IrError::Eval(format!(
            "{} got {} device operands for a mesh of {size}",
            prim.name(),
            xs.len()
        )));
    }
    if let CollectiveKind::Ppermute { perm } = &p.kind {
        return permute(prim, mesh, &p.axes, perm, &xs, out);
    }
    if p.kind == CollectiveKind::RaggedAllToAll {
        return ragged::simulate(prim, &p, mesh, operands, out);
    }
    if matches!(
        p.kind,
        CollectiveKind::Psend { .. } | CollectiveKind::Precv { .. }
    ) {
        return p2p::simulate(prim, &p, mesh, &xs, out);
    }
    let mut results: Vec<Option<Array>> = vec![None; size];
    for group in p.replica_groups(prim, mesh)? {
        let members = group
            .iter()
            .map(|&g| {
                xs.get(g as usize).copied().ok_or_else(|| {
                    IrError::Eval(format!(
                        "{}: replica group {group:?} names a position outside the mesh of {size}",
                        prim.name()
                    ))
                })
            })
            .collect::<Result<Vec<&Array>>>()?;
        for (k, value) in exchange(prim, &p.kind, &members)?.into_iter().enumerate() {
            results[group[k] as usize] = Some(Array::from_elems(out.dtype, value));
        }
    }
    results
        .into_iter()
        .map(|r| {
            r.ok_or_else(|| IrError::Eval(format!("{} left a device without a value", prim.name())))
        })
        .collect()
}

/// `ppermute`: each target position takes its source's operand, the others zeros. The pairs
/// are those the lowering sends (`groups::permute_pairs`: JAX numbers each group's members in
/// device order, whatever order the axes are named in).
pub(super) fn permute(
    prim: Prim,
    mesh: &AbstractMesh,
    axes: &[String],
    perm: &[(i64, i64)],
    xs: &[&Array],
    out: &ShapedArray,
) -> Result<Vec<Array>> {
    let pairs = groups::permute_pairs(mesh, axes, perm).map_err(|e| sharding(prim, e))?;
    let mut results: Vec<Array> = xs.iter().map(|_| Array::zeros(out)).collect();
    for (s, t) in pairs {
        results[t as usize] = xs[s as usize].converted(out.dtype);
    }
    Ok(results)
}

/// An all-reduce of the group's operands: integers combine exactly (wrapping), floats in f64
/// rounded once at the end; every member gets the result.
fn fold(
    xs: &[&Array],
    int: fn(i128, i128) -> i128,
    float: fn(f64, f64) -> f64,
) -> Vec<ArrayD<Elem>> {
    let dtype = xs[0].dtype();
    let acc = if is_exact_int(dtype) {
        let mut acc = xs[0].ints();
        for x in &xs[1..] {
            acc.zip_mut_with(&x.ints(), |a, &b| *a = int(*a, b));
        }
        acc.mapv(|v| Elem::from_int(dtype, v))
    } else {
        let mut acc = xs[0].values();
        for x in &xs[1..] {
            acc.zip_mut_with(&x.values(), |a, &b| *a = float(*a, b));
        }
        acc.mapv(|v| Elem::from_f64(dtype, v))
    };
    vec![acc; xs.len()]
}

/// One group's exchange: the operands of its members in group order, their results in order.
fn exchange(prim: Prim, kind: &CollectiveKind, xs: &[&Array]) -> Result<Vec<ArrayD<Elem>>> {
    let n = xs.len();
    Ok(match kind {
        CollectiveKind::Psum | CollectiveKind::UnreducedPsum => {
            fold(xs, i128::wrapping_add, |a, b| a + b)
        }
        CollectiveKind::Pmax => fold(xs, i128::max, f64::max),
        CollectiveKind::Pmin => fold(xs, i128::min, f64::min),
        CollectiveKind::Pvary
        | CollectiveKind::Preduced
        | CollectiveKind::VaryUnreducedCast
        | CollectiveKind::ReducedVaryCast => xs.iter().map(|x| x.elems()).collect(),
        &CollectiveKind::Pbroadcast { source } => {
            let from = xs.get(source as usize).ok_or_else(|| {
                IrError::Eval(format!(
                    "pbroadcast: source {source} is not in a group of {n}"
                ))
            })?;
            vec![from.elems(); n]
        }
        CollectiveKind::Ppermute { .. } => {
            return Err(IrError::Eval(
                "ppermute moves whole operands between positions (see `permute`)".into(),
            ));
        }
        CollectiveKind::Psend { .. } | CollectiveKind::Precv { .. } => {
            return Err(IrError::Eval(format!(
                "{} is simulated as a send/receive pair (see `p2p::simulate`)",
                prim.name()
            )));
        }
        CollectiveKind::RaggedAllToAll => {
            return Err(IrError::Eval(
                "ragged_all_to_all exchanges six operands per device (see `ragged::simulate`)"
                    .into(),
            ));
        }
        &CollectiveKind::AllGather {
            dimension, tiled, ..
        } => {
            let elems: Vec<_> = xs.iter().map(|x| x.elems()).collect();
            let views: Vec<_> = elems.iter().map(|x| x.view()).collect();
            let joined = if tiled {
                ndarray::concatenate(Axis(dimension), &views)
            } else {
                ndarray::stack(Axis(dimension), &views)
            }
            .map_err(|e| IrError::Eval(format!("all_gather: {e}")))?;
            vec![joined; n]
        }
        &CollectiveKind::ReduceScatter {
            dimension, tiled, ..
        } => {
            let total = &fold(xs, i128::wrapping_add, |a, b| a + b)[0];
            let chunks = split(total, dimension, n);
            if tiled {
                chunks
            } else {
                chunks
                    .into_iter()
                    .map(|c| c.index_axis_move(Axis(dimension), 0))
                    .collect()
            }
        }
        &CollectiveKind::AllToAll {
            split_axis,
            concat_axis,
            ..
        } => {
            let pieces: Vec<Vec<ArrayD<Elem>>> = xs
                .iter()
                .map(|x| split(&x.elems(), split_axis, n))
                .collect();
            (0..n)
                .map(|k| {
                    let views: Vec<_> = pieces.iter().map(|p| p[k].view()).collect();
                    ndarray::concatenate(Axis(concat_axis), &views)
                        .map_err(|e| IrError::Eval(format!("all_to_all: {e}")))
                })
                .collect::<Result<_>>()?
        }
        CollectiveKind::AxisIndex => {
            return Err(IrError::Eval(format!(
                "{} exchanges nothing; simulate gives each position its index",
                prim.name()
            )));
        }
    })
}

/// `n` equal chunks of `a` along `axis`.
fn split(a: &ArrayD<Elem>, axis: usize, n: usize) -> Vec<ArrayD<Elem>> {
    let step = a.shape()[axis] / n.max(1);
    (0..n)
        .map(|k| {
            a.slice_axis(Axis(axis), ndarray::Slice::from(k * step..(k + 1) * step))
                .to_owned()
        })
        .collect()
}
