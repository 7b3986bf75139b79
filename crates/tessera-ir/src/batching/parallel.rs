//! Batching rules of the collectives and of `shard_map`. The batch dimension of `vmap` is a
//! positional dimension, distinct from the mesh axes the collectives name, so a collective
//! batches like JAX's non-frame batchers: elementwise collectives keep the batch dimension where
//! it is, and those with dimension parameters get the batch dimension in front and their
//! dimensions, normalised first (a negative one counts from the end), shifted by one. A `shard_map` batches its body (under the mesh's axes), with an
//! unsplit leading dimension added to the specs of batched operands and of every result; a
//! `checkpoint` region batches its body the same way.

use tessera_sharding::{DimSpec, PartitionSpec};

use super::{Batched, to_front, with_param};
use crate::params::{ParamValue, Params};
use crate::prim::{CollectiveKind, CollectiveParams, Prim, ShardMapParams, shard_map_params};
use crate::trace::Tensor;

/// Batches a collective; `size` is the batch size.
pub(super) fn collective(prim: Prim, params: &Params, args: &[Batched], size: i64) -> Vec<Batched> {
    let x = &args[0].0;
    // The operand's rank without the batch dimension.
    let rank = x.rank() - usize::from(args[0].1.is_some());
    let p = match CollectiveParams::read(prim, params, rank) {
        Ok(p) => p,
        Err(e) => return vec![(x.fail(prim.name(), e.to_string()), None)],
    };
    // The parameters with the named dimensions (normalised) shifted past a batch dimension in
    // front, and the operand moved there.
    let front = |dims: &[(&str, usize)]| {
        let p = dims.iter().fold(params.clone(), |p, &(key, d)| {
            with_param(&p, key, ParamValue::Int(d as i64 + 1))
        });
        let x = to_front(&args[0], size);
        vec![(Tensor::bind1(prim, p, &[&x]), Some(0))]
    };
    match p.kind {
        CollectiveKind::AllGather { dimension, .. } => {
            front(&[("all_gather_dimension", dimension)])
        }
        CollectiveKind::ReduceScatter { dimension, .. } => {
            front(&[("scatter_dimension", dimension)])
        }
        CollectiveKind::AllToAll {
            split_axis,
            concat_axis,
            ..
        } => front(&[("split_axis", split_axis), ("concat_axis", concat_axis)]),
        CollectiveKind::AxisIndex => vec![(
            x.fail("axis_index", "axis_index takes no operands to batch".into()),
            None,
        )],
        CollectiveKind::Psum
        | CollectiveKind::Pmax
        | CollectiveKind::Pmin
        | CollectiveKind::Ppermute { .. }
        | CollectiveKind::Pvary
        | CollectiveKind::Preduced
        | CollectiveKind::VaryUnreducedCast
        | CollectiveKind::UnreducedPsum
        | CollectiveKind::Pbroadcast { .. } => {
            vec![(Tensor::bind1(prim, params.clone(), &[x]), args[0].1)]
        }
    }
}

fn with_leading_none(spec: &PartitionSpec) -> PartitionSpec {
    let dims = std::iter::once(DimSpec::from_axes::<&str>(&[]))
        .chain(spec.dims().iter().cloned())
        .collect();
    PartitionSpec::new(dims)
}

/// How a nested body is batched: each operand's batch dimension moved to the front (unbatched
/// operands as they are), with the matching `in_axes` for `vmap` of the body.
fn batched_in_front(args: &[Batched], size: i64) -> (Vec<Tensor>, Vec<Option<usize>>) {
    args.iter()
        .map(|a| match a.1 {
            Some(_) => (to_front(a, size), Some(0)),
            None => (a.0.clone(), None),
        })
        .unzip()
}

/// Batches a `shard_map`: batched operands get their batch dimension in front, unsplit.
pub(super) fn shard_map(
    params: &Params,
    args: &[Batched],
    size: i64,
    results: usize,
) -> Vec<Batched> {
    let anchor = &args[0].0;
    let fail = |msg: String| vec![(anchor.fail("shard_map", msg), None); results];
    let p = match ShardMapParams::read(params) {
        Ok(p) => p,
        Err(e) => return fail(e.to_string()),
    };
    let (operands, in_axes) = batched_in_front(args, size);
    let out_axes = vec![0; results];
    let body = match p.in_body(|| super::vmap(p.body, &in_axes, &out_axes, size)) {
        Ok(b) => b,
        Err(e) => return fail(format!("in the batched body: {e}")),
    };
    let in_specs: Vec<PartitionSpec> = p
        .in_specs
        .iter()
        .zip(args)
        .map(|(s, a)| {
            if a.1.is_some() {
                with_leading_none(s)
            } else {
                s.clone()
            }
        })
        .collect();
    let out_specs: Vec<PartitionSpec> = p.out_specs.iter().map(with_leading_none).collect();
    let refs: Vec<&Tensor> = operands.iter().collect();
    Tensor::bind(
        Prim::ShardMap,
        shard_map_params(&p.mesh, &in_specs, &out_specs, body)
            .with("check_vma", ParamValue::Bool(p.check_vma)),
        &refs,
    )
    .into_iter()
    .map(|t| (t, Some(0)))
    .collect()
}

/// Batches a `checkpoint` region: the same region around its batched body.
pub(super) fn checkpoint(
    params: &Params,
    args: &[Batched],
    size: i64,
    results: usize,
) -> Vec<Batched> {
    let anchor = &args[0].0;
    let (operands, in_axes) = batched_in_front(args, size);
    let body = params
        .jaxpr("checkpoint", "jaxpr")
        .and_then(|b| super::vmap(b, &in_axes, &vec![0; results], size));
    let body = match body {
        Ok(b) => b,
        Err(e) => return vec![(anchor.fail("checkpoint", e.to_string()), None); results],
    };
    let refs: Vec<&Tensor> = operands.iter().collect();
    let params = with_param(params, "jaxpr", ParamValue::Jaxpr(Box::new(body)));
    Tensor::bind(Prim::Checkpoint, params, &refs)
        .into_iter()
        .map(|t| (t, Some(0)))
        .collect()
}
