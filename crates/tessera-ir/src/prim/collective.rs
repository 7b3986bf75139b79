//! The parallel primitives of JAX's `lax.parallel` that run inside a `shard_map` body:
//! `psum`, `pmax`, `pmin`, `all_gather`, `reduce_scatter` (`psum_scatter`), `ppermute`,
//! `all_to_all`, `axis_index`, `pvary` and `pbroadcast`. Their axes are named mesh axes bound by
//! the enclosing `shard_map` (looked up in [`crate::axis_env`]).
//!
//! Typing follows JAX with `check_vma`: each value records the manual axes it varies over
//! (`vma`). Reductions take a value varying over their axes and return one invariant over them;
//! gathers, scatters, permutations and all-to-alls keep the input's `vma`; `axis_index` varies
//! over its axis; `pvary` casts an invariant value to a varying one.
//!
//! A single device cannot evaluate a collective: the SPMD interpreter ([`crate::spmd`]) runs
//! every device of the mesh in lock step and calls [`simulate`] with all devices' operands.

use std::collections::BTreeSet;

use ndarray::{ArrayD, Axis};
use tessera_sharding::{AbstractMesh, groups};

use super::{CollectiveOp, Prim, arity};
use crate::array::{Array, Elem, is_exact_int};
use crate::aval::ShapedArray;
use crate::axis_env;
use crate::dtype::DType;
use crate::error::{IrError, Result, type_error};
use crate::params::{ParamValue, Params};

/// A named-axis parameter: a single name or a tuple of names.
pub fn axis_names(prim: Prim, params: &Params, key: &str) -> Result<Vec<String>> {
    let bad = || {
        type_error(
            prim.name(),
            format!("parameter `{key}` must name mesh axes"),
        )
    };
    match params.get(key).ok_or_else(bad)? {
        ParamValue::Name(n) => Ok(vec![n.clone()]),
        v => v
            .as_seq()
            .ok_or_else(bad)?
            .iter()
            .map(|a| {
                if let ParamValue::Name(n) = a {
                    Ok(n.clone())
                } else {
                    Err(bad())
                }
            })
            .collect(),
    }
}

/// The axes a collective communicates over (`axes` for reductions and `pvary`, `axis_name` for
/// the others).
pub fn collective_axes(prim: Prim, params: &Params) -> Result<Vec<String>> {
    use CollectiveOp::*;
    match prim.collective() {
        Some(Psum | Pmax | Pmin | Pvary) => axis_names(prim, params, "axes"),
        Some(AllGather | ReduceScatter | Ppermute | AllToAll | AxisIndex | Pbroadcast) => {
            axis_names(prim, params, "axis_name")
        }
        None => Err(not_collective(prim)),
    }
}

fn not_collective(prim: Prim) -> IrError {
    type_error(prim.name(), "is not a collective")
}

/// `axis_index_groups`, where given.
pub fn index_groups(prim: Prim, params: &Params) -> Result<Option<Vec<Vec<i64>>>> {
    match params.get("axis_index_groups") {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => v
            .as_seq()
            .and_then(|gs| {
                gs.iter()
                    .map(ParamValue::as_ints)
                    .collect::<Option<Vec<_>>>()
            })
            .map(Some)
            .ok_or_else(|| {
                type_error(
                    prim.name(),
                    "axis_index_groups must be a tuple of integer tuples",
                )
            }),
    }
}

/// A `ppermute`'s `(source, target)` index pairs.
pub fn permutation(params: &Params) -> Result<Vec<(i64, i64)>> {
    let bad = || type_error("ppermute", "perm must be a tuple of (source, target) pairs");
    params
        .get("perm")
        .and_then(ParamValue::as_seq)
        .ok_or_else(bad)?
        .iter()
        .map(|p| {
            if let Some(&[s, t]) = p.as_ints().as_deref() {
                Ok((s, t))
            } else {
                Err(bad())
            }
        })
        .collect()
}

/// The replica groups (mesh positions) a collective communicates in, for `mesh`.
pub fn replica_groups(prim: Prim, params: &Params, mesh: &AbstractMesh) -> Result<Vec<Vec<i64>>> {
    let axes = collective_axes(prim, params)?;
    let ig = index_groups(prim, params)?;
    groups::replica_groups(mesh, &axes, ig.as_deref()).map_err(|e| sharding(prim, e))
}

fn sharding(prim: Prim, e: tessera_sharding::ShardingError) -> IrError {
    type_error(prim.name(), e.to_string())
}

fn group_size(prim: Prim, params: &Params, mesh: &AbstractMesh) -> Result<i64> {
    Ok(replica_groups(prim, params, mesh)?
        .first()
        .map_or(1, |g| g.len() as i64))
}

fn dim_param(prim: Prim, params: &Params, key: &str, rank: usize) -> Result<usize> {
    super::axis(prim, params.int(prim.name(), key)?, rank)
}

fn tiled(prim: Prim, params: &Params) -> Result<bool> {
    params.bool_or(prim.name(), "tiled", false)
}

/// `all_gather`'s dimension and `tiled`, for an operand of rank `rank`. The dimension is a
/// position in the result (a new dimension when untiled, a grown one when tiled); a negative
/// one counts from the end, as `lax.all_gather`'s `axis` does. Every rule (shape,
/// interpretation, transpose, batching, lowering) reads it here.
pub fn all_gather_dim(params: &Params, rank: usize) -> Result<(usize, bool)> {
    let prim = Prim::AllGather;
    let tiled = tiled(prim, params)?;
    let rank = rank + usize::from(!tiled);
    Ok((
        dim_param(prim, params, "all_gather_dimension", rank)?,
        tiled,
    ))
}

/// `psum_scatter`'s (`reduce_scatter`'s) `scatter_dimension`, a position in its operand of rank
/// `rank` (negative ones count from the end), and `tiled`.
pub fn scatter_dim(params: &Params, rank: usize) -> Result<(usize, bool)> {
    let prim = Prim::ReduceScatter;
    let d = dim_param(prim, params, "scatter_dimension", rank)?;
    Ok((d, tiled(prim, params)?))
}

/// `all_to_all`'s `split_axis` and `concat_axis`, positions in its operand of rank `rank`
/// (negative ones count from the end).
pub fn all_to_all_axes(params: &Params, rank: usize) -> Result<(usize, usize)> {
    let prim = Prim::AllToAll;
    Ok((
        dim_param(prim, params, "split_axis", rank)?,
        dim_param(prim, params, "concat_axis", rank)?,
    ))
}

/// The shape and `vma` rules.
pub(super) fn abstract_eval(
    prim: Prim,
    op: CollectiveOp,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    let axes = collective_axes(prim, params)?;
    let mesh = axis_env::mesh_for(prim.name(), &axes)?;
    if prim == Prim::AxisIndex {
        arity(prim, inputs.len(), 0)?;
        let mut out = ShapedArray::scalar(DType::I32);
        out.vma = axes.into_iter().collect();
        return Ok(vec![out]);
    }
    arity(prim, inputs.len(), 1)?;
    let x = &inputs[0];
    let mut out = x.clone();
    out.weak_type = false;
    out.sharding = None;
    if prim == Prim::Pvary {
        if let Some(a) = axes.iter().find(|a| x.vma.contains(*a)) {
            return Err(type_error(
                prim.name(),
                format!("the value already varies over '{a}'; pvary casts invariant values only"),
            ));
        }
        out.vma.extend(axes);
        return Ok(vec![out]);
    }
    if let Some(a) = axes.iter().find(|a| !x.vma.contains(*a)) {
        return Err(type_error(
            prim.name(),
            format!(
                "needs a value varying over '{a}', but {x} varies over {{{}}}; apply pvary \
                 first (the tracing API does this for you)",
                x.vma.iter().cloned().collect::<Vec<_>>().join(",")
            ),
        ));
    }
    let n = group_size(prim, params, &mesh)?;
    match op {
        CollectiveOp::Psum | CollectiveOp::Pmax | CollectiveOp::Pmin => {
            if index_groups(prim, params)?.is_none() {
                out.vma = &x.vma - &axes.iter().cloned().collect::<BTreeSet<_>>();
            }
        }
        CollectiveOp::AllGather => {
            let (d, tiled) = all_gather_dim(params, x.rank())?;
            check_size_param(prim, params, n)?;
            if tiled {
                out.shape[d] *= n;
            } else {
                out.shape.insert(d, n);
            }
        }
        CollectiveOp::ReduceScatter => {
            let (d, tiled) = scatter_dim(params, x.rank())?;
            check_size_param(prim, params, n)?;
            out.shape = scatter_shape(&x.shape, d, n, tiled)?;
        }
        CollectiveOp::AllToAll => {
            let (split, concat) = all_to_all_axes(params, x.rank())?;
            if x.shape[split] % n != 0 {
                return Err(type_error(
                    prim.name(),
                    format!(
                        "split_axis {split} has size {}, which the {n} devices of '{}' do not \
                         divide",
                        x.shape[split],
                        axes.join(",")
                    ),
                ));
            }
            out.shape[split] /= n;
            out.shape[concat] *= n;
        }
        CollectiveOp::Ppermute => {
            groups::check_permutation(&permutation(params)?, n).map_err(|e| sharding(prim, e))?;
        }
        CollectiveOp::Pbroadcast => {
            let source = params.int(prim.name(), "source")?;
            if !(0..n).contains(&source) {
                return Err(type_error(
                    prim.name(),
                    format!("source {source} is out of range for an axis of size {n}"),
                ));
            }
        }
        // Handled above.
        CollectiveOp::AxisIndex | CollectiveOp::Pvary => {}
    }
    Ok(vec![out])
}

fn check_size_param(prim: Prim, params: &Params, n: i64) -> Result<()> {
    let size = params.get("axis_size").and_then(ParamValue::as_int);
    if let Some(size) = size.filter(|&s| s != n) {
        return Err(type_error(
            prim.name(),
            format!("axis_size={size}, but the axes have {n} devices"),
        ));
    }
    Ok(())
}

/// `psum_scatter`'s result shape: dimension `d` divided by `n` (tiled) or removed (untiled,
/// where it must equal `n`).
pub fn scatter_shape(shape: &[i64], d: usize, n: i64, tiled: bool) -> Result<Vec<i64>> {
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

/// Evaluation on one device is impossible: collectives need every device's operand.
pub(super) fn eval(prim: Prim) -> Result<Vec<Array>> {
    Err(IrError::Eval(format!(
        "{} is a collective: it runs only inside shard_map, whose interpreter evaluates all \
         devices together",
        prim.name()
    )))
}

/// Evaluates a collective on every device of `mesh` at once: `xs[p]` is the operand on mesh
/// position `p` (empty for `axis_index`), the result is each position's value of type `out`.
pub fn simulate(
    prim: Prim,
    params: &Params,
    mesh: &AbstractMesh,
    xs: &[Array],
    out: &ShapedArray,
) -> Result<Vec<Array>> {
    let size = mesh.size() as usize;
    if prim == Prim::AxisIndex {
        let axes = collective_axes(prim, params)?;
        return (0..size as i64)
            .map(|p| {
                let i = groups::axis_index_of(mesh, &axes, p).map_err(|e| sharding(prim, e))?;
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
    let mut results: Vec<Option<Array>> = vec![None; size];
    for group in replica_groups(prim, params, mesh)? {
        let members: Vec<&Array> = group.iter().map(|&p| &xs[p as usize]).collect();
        for (k, value) in exchange(prim, params, &members)?.into_iter().enumerate() {
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

/// One group's exchange: the operands of its members in group order, their results in order.
fn exchange(prim: Prim, params: &Params, xs: &[&Array]) -> Result<Vec<ArrayD<Elem>>> {
    let n = xs.len();
    let rank = xs[0].dims().len();
    let dtype = xs[0].dtype();
    // Integers combine exactly (wrapping), floats in f64 rounded once at the end.
    let fold = |int: fn(i128, i128) -> i128, float: fn(f64, f64) -> f64| {
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
        vec![acc; n]
    };
    let op = prim.collective().ok_or_else(|| not_collective(prim))?;
    Ok(match op {
        CollectiveOp::Psum => fold(i128::wrapping_add, |a, b| a + b),
        CollectiveOp::Pmax => fold(i128::max, f64::max),
        CollectiveOp::Pmin => fold(i128::min, f64::min),
        CollectiveOp::Pvary => xs.iter().map(|x| x.elems()).collect(),
        CollectiveOp::Pbroadcast => {
            let s = params.int(prim.name(), "source")? as usize;
            vec![xs[s].elems(); n]
        }
        CollectiveOp::Ppermute => {
            let mut outs = vec![ArrayD::from_elem(xs[0].elems().raw_dim(), Elem::ZERO); n];
            for (s, t) in permutation(params)? {
                outs[t as usize] = xs[s as usize].elems();
            }
            outs
        }
        CollectiveOp::AllGather => {
            let (d, tiled) = all_gather_dim(params, rank)?;
            let elems: Vec<_> = xs.iter().map(|x| x.elems()).collect();
            let views: Vec<_> = elems.iter().map(|x| x.view()).collect();
            let joined = if tiled {
                ndarray::concatenate(Axis(d), &views)
            } else {
                ndarray::stack(Axis(d), &views)
            }
            .map_err(|e| IrError::Eval(format!("all_gather: {e}")))?;
            vec![joined; n]
        }
        CollectiveOp::ReduceScatter => {
            let (d, tiled) = scatter_dim(params, rank)?;
            let total = &fold(i128::wrapping_add, |a, b| a + b)[0];
            let chunks = split(total, d, n);
            if tiled {
                chunks
            } else {
                chunks
                    .into_iter()
                    .map(|c| c.index_axis_move(Axis(d), 0))
                    .collect()
            }
        }
        CollectiveOp::AllToAll => {
            let (split_axis, concat_axis) = all_to_all_axes(params, rank)?;
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
        CollectiveOp::AxisIndex => {
            return Err(IrError::Eval(
                "axis_index exchanges nothing; simulate gives each position its index".into(),
            ));
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
