//! Batching rules of the collectives over the vmapped axis itself (JAX's `vmap(axis_name=...)`):
//! the batch elements play the devices of that axis. A value batched along dimension `d` varies
//! over the axis (element `e` is `x[e]` along `d`); an unbatched one is the same for every
//! element. So `psum` sums over the batch dimension, `all_gather` moves it where the gathered
//! dimension goes, `axis_index` is an iota, `ppermute` reorders the batch, and `all_to_all`
//! exchanges the batch dimension with the split one. A collective over the vmapped axis
//! together with other (mesh) axes reduces over the batch, then over the others with the same
//! primitive (`psum`, `pmax`, `pmin`, `pvary`); the others are refused over several axes.
//! `ragged_all_to_all` over the vmapped axis is refused, as JAX refuses it. A `psend`/`precv`
//! pair over it is the `ppermute` of the value sent (the send passes the value on as its token).

use super::{Batched, move_axis, to_front};
use crate::dtype::DType;
use crate::params::{ParamValue, Params};
use crate::prim::{CollectiveKind, CollectiveOp, CollectiveParams, Prim};
use crate::trace::Tensor;

fn names(axes: &[String]) -> ParamValue {
    ParamValue::Tuple(axes.iter().map(|a| ParamValue::Name(a.clone())).collect())
}

/// Whether the equation `prim(params)` is a collective naming `axis`.
pub(super) fn names_axis(prim: Prim, params: &Params, axis: &str) -> bool {
    use crate::prim::CollectiveOp::*;
    let Some(op) = prim.collective() else {
        return false;
    };
    let key = match op {
        Psum | Pmax | Pmin | Pvary | PsumInvariant | Preduced | VaryUnreducedCast
        | UnreducedPsum | ReducedVaryCast => "axes",
        AllGather
        | AllGatherInvariant
        | ReduceScatter
        | Ppermute
        | AllToAll
        | AxisIndex
        | Pbroadcast
        | RaggedAllToAll
        | AllGatherReduced
        | UnreducedReduceScatter
        | Psend
        | Precv => "axis_name",
    };
    let named = |v: &ParamValue| matches!(v, ParamValue::Name(n) | ParamValue::Str(n) if n == axis);
    params
        .get(key)
        .is_some_and(|v| named(v) || v.as_seq().is_some_and(|items| items.iter().any(named)))
}

/// Batches a collective that names the vmapped axis `axis` (of `size` elements).
pub(super) fn collective(
    prim: Prim,
    params: &Params,
    args: &[Batched],
    anchor: &Tensor,
    axis: &str,
    size: i64,
    rank: usize,
) -> Batched {
    let fail = |msg: String| (anchor.fail(prim.name(), msg), None);
    let p = match CollectiveParams::read(prim, params, rank) {
        Ok(p) => p,
        Err(e) => return fail(e.to_string()),
    };
    if p.groups.is_some() {
        return fail(format!(
            "axis_index_groups over the vmapped axis '{axis}' are not supported"
        ));
    }
    if let Some(CollectiveOp::AllGatherReduced | CollectiveOp::UnreducedReduceScatter) =
        prim.collective()
    {
        return fail(format!(
            "{} over the vmapped axis '{axis}' is not supported (reduced and unreduced \
             types exist over mesh axes only)",
            prim.name()
        ));
    }
    let others: Vec<String> = p.axes.iter().filter(|a| *a != axis).cloned().collect();
    let alone = |what: &str| -> Option<Batched> {
        (!others.is_empty()).then(|| {
            fail(format!(
                "{what} over the vmapped axis '{axis}' together with other axes ({}) is not \
                 supported; take the vmapped axis alone",
                others.join(", ")
            ))
        })
    };
    let x = args.first();
    match p.kind {
        CollectiveKind::Psum | CollectiveKind::Pmax | CollectiveKind::Pmin => {
            let Some(x) = x else {
                return fail("no operand".into());
            };
            let reduced = reduce_batch(prim, x, size);
            match others.is_empty() {
                true => (reduced, None),
                false => {
                    let p = params.clone().with("axes", names(&others));
                    (Tensor::bind1(prim, p, &[&reduced]), None)
                }
            }
        }
        CollectiveKind::Pvary => {
            let Some(x) = x else {
                return fail("no operand".into());
            };
            match others.is_empty() {
                true => x.clone(),
                false => {
                    let p = params.clone().with("axes", names(&others));
                    (Tensor::bind1(prim, p, &[&x.0]), x.1)
                }
            }
        }
        CollectiveKind::AxisIndex => alone("axis_index")
            .unwrap_or_else(|| (anchor.iota_along(&[size], 0).astype(DType::I32), Some(0))),
        CollectiveKind::AllGather {
            dimension, tiled, ..
        } => {
            let Some(x) = x else {
                return fail("no operand".into());
            };
            alone("all_gather").unwrap_or_else(|| (all_gather(x, size, dimension, tiled), None))
        }
        CollectiveKind::ReduceScatter {
            dimension, tiled, ..
        } => {
            let Some(x) = x else {
                return fail("no operand".into());
            };
            alone("psum_scatter").unwrap_or_else(|| reduce_scatter(x, size, dimension, tiled))
        }
        CollectiveKind::Ppermute { perm } => {
            let Some(x) = x else {
                return fail("no operand".into());
            };
            alone("ppermute").unwrap_or_else(|| (permute(x, size, &perm), Some(0)))
        }
        CollectiveKind::AllToAll {
            split_axis,
            concat_axis,
            ..
        } => {
            let Some(x) = x else {
                return fail("no operand".into());
            };
            alone("all_to_all")
                .unwrap_or_else(|| (all_to_all(x, size, split_axis, concat_axis), Some(0)))
        }
        CollectiveKind::Pbroadcast { source } => {
            let Some(x) = x else {
                return fail("no operand".into());
            };
            alone("pbroadcast").unwrap_or_else(|| (element(x, source), None))
        }
        // A send and its receive over the vmapped axis are a `ppermute` of the batch: the
        // send's token is the value sent (only its receive takes it, as the verifier checks),
        // and the receive reorders the batch.
        CollectiveKind::Psend { .. } => {
            let Some(x) = x else {
                return fail("no operand".into());
            };
            alone("psend").unwrap_or_else(|| x.clone())
        }
        CollectiveKind::Precv { perm, .. } => {
            let Some(x) = x else {
                return fail("no operand".into());
            };
            if x.0.dtype().is_token() {
                return fail(format!(
                    "precv over the vmapped axis '{axis}' takes the token of a psend over it"
                ));
            }
            alone("precv").unwrap_or_else(|| (permute(x, size, &perm), Some(0)))
        }
        CollectiveKind::RaggedAllToAll => fail(format!(
            "ragged_all_to_all over the vmapped axis '{axis}' is not supported (nor in JAX); \
             run it over a mesh axis of a shard_map instead"
        )),
        CollectiveKind::Preduced
        | CollectiveKind::VaryUnreducedCast
        | CollectiveKind::ReducedVaryCast
        | CollectiveKind::UnreducedPsum => fail(format!(
            "{} over the vmapped axis '{axis}' is not supported (reduced and unreduced types \
             exist over mesh axes only)",
            prim.name()
        )),
    }
}

/// The sum, maximum or minimum over the batch (an unbatched value stands for `size` copies).
fn reduce_batch(prim: Prim, x: &Batched, size: i64) -> Tensor {
    match (prim, x.1) {
        (Prim::Psum, Some(d)) => x.0.sum(&[d as i64]),
        (Prim::Psum, None) => &x.0 * size as f64,
        (Prim::Pmax, Some(d)) => x.0.max(&[d as i64]),
        (_, Some(d)) => x.0.min(&[d as i64]),
        (_, None) => x.0.clone(),
    }
}

/// Every element's value stacked at `dimension` (or concatenated along it, `tiled`).
fn all_gather(x: &Batched, size: i64, dimension: usize, tiled: bool) -> Tensor {
    let front = to_front(x, size);
    let stacked = move_axis(&front, 0, dimension);
    if !tiled {
        return stacked;
    }
    let mut shape = front.shape()[1..].to_vec();
    shape[dimension] *= size;
    stacked.reshape(&shape)
}

/// The batch's sum, split along `dimension` among the elements: element `e` keeps block `e`
/// (`tiled`) or index `e` of it.
fn reduce_scatter(x: &Batched, size: i64, dimension: usize, tiled: bool) -> Batched {
    let total = reduce_batch(Prim::Psum, x, size);
    if !tiled {
        return (total, Some(dimension));
    }
    let mut shape = total.shape().to_vec();
    let block = shape[dimension] / size.max(1);
    shape.splice(dimension..=dimension, [size, block]);
    (total.reshape(&shape), Some(dimension))
}

/// The batch reordered by `perm`'s `(source, target)` pairs; targets no pair names get zeros.
fn permute(x: &Batched, size: i64, perm: &[(i64, i64)]) -> Tensor {
    let front = to_front(x, size);
    let zeros = &Tensor::slice_axis(&front, 0, 0, 1) * 0.0;
    let rows: Vec<Tensor> = (0..size)
        .map(|target| match perm.iter().find(|&&(_, t)| t == target) {
            Some(&(source, _)) => Tensor::slice_axis(&front, 0, source, source + 1),
            None => zeros.clone(),
        })
        .collect();
    let Some((first, rest)) = rows.split_first() else {
        return front;
    };
    let refs: Vec<&Tensor> = rest.iter().collect();
    first.concatenate(&refs, 0)
}

/// Element `source`'s value, for every element.
fn element(x: &Batched, source: i64) -> Tensor {
    let Some(d) = x.1 else {
        return x.0.clone();
    };
    let one = Tensor::slice_axis(&x.0, d, source, source + 1);
    let mut shape = x.0.shape().to_vec();
    shape.remove(d);
    one.reshape(&shape)
}

/// `all_to_all` among the elements: each element's value is split along `split` into `size`
/// chunks, element `e` receives chunk `e` of every element `j` and concatenates them along
/// `concat` in the order of `j`. The result is batched in front.
fn all_to_all(x: &Batched, size: i64, split: usize, concat: usize) -> Tensor {
    let front = to_front(x, size); // [j] + dims
    let dims = front.shape()[1..].to_vec();
    let rank = dims.len();
    // [j] + dims[..split] + [e, chunk] + dims[split + 1..]
    let mut split_shape = vec![size];
    split_shape.extend_from_slice(&dims[..split]);
    split_shape.extend([size, dims[split] / size.max(1)]);
    split_shape.extend_from_slice(&dims[split + 1..]);
    let parts = front.reshape(&split_shape);
    // The position of the chunk's dimension k in `parts`.
    let at = |k: usize| match k.cmp(&split) {
        std::cmp::Ordering::Less => k + 1,
        std::cmp::Ordering::Equal => split + 2,
        std::cmp::Ordering::Greater => k + 2,
    };
    // [e, j] + chunk dims.
    let mut order = vec![(split + 1) as i64, 0];
    order.extend((0..rank).map(|k| at(k) as i64));
    let grouped = parts.transpose(&order);
    // j just before the chunk's dimension `concat`, then merged into it.
    let placed = move_axis(&grouped, 1, 1 + concat);
    let mut shape = grouped.shape().to_vec();
    shape.remove(1);
    shape[1 + concat] *= size;
    placed.reshape(&shape)
}
