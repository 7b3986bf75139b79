//! Batching rules of the collectives and of `shard_map`. The batch dimension of `vmap` is a
//! positional dimension, distinct from the mesh axes the collectives name, so a collective
//! batches like JAX's non-frame batchers: elementwise collectives keep the batch dimension where
//! it is, and those with dimension parameters get the batch dimension in front and their
//! dimensions, normalised first (a negative one counts from the end), shifted by one.
//! The reduced/unreduced collectives (`preduced`, `vary_unreduced_cast_p`,
//! `reduced_vary_cast_p`, `unreduced_psum`, `all_gather_reduced`, `unreduced_reduce_scatter`)
//! are refused, as JAX's batchers refuse them.
//! `ragged_all_to_all` batches as JAX's rule does: the batch's elements are laid end to end in
//! one exchange, their offsets shifted to each element's rows. A `shard_map` batches its body
//! (under the mesh's axes), with an unsplit leading dimension added to the specs of batched
//! operands and of every result; a `checkpoint` region batches its body the same way.

use tessera_sharding::{DimSpec, PartitionSpec};

use super::{Batched, to_front, with_param};
use crate::params::{ParamValue, Params};
use crate::prim::{
    CollectiveKind, CollectiveOp, CollectiveParams, Prim, ShardMapParams, shard_map_params,
};
use crate::trace::Tensor;

/// Batches a collective; `size` is the batch size.
pub(super) fn collective(prim: Prim, params: &Params, args: &[Batched], size: i64) -> Vec<Batched> {
    let x = &args[0].0;
    // The operand's rank without the batch dimension.
    // (A `precv`'s token has rank 0 but may carry its send's batch dimension.)
    let rank = x.rank().saturating_sub(usize::from(args[0].1.is_some()));
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
    // JAX's batchers of the reduced/unreduced collectives raise NotImplementedError.
    let refused = |what: &str| {
        vec![(
            x.fail(
                prim.name(),
                format!(
                    "vmap of {what} is not supported (nor in JAX, whose batching rule raises \
                     NotImplementedError); vmap the program without the reduced/unreduced \
                     casts (psum and pvary batch)"
                ),
            ),
            None,
        )]
    };
    match prim.collective() {
        Some(
            CollectiveOp::AllGatherReduced
            | CollectiveOp::UnreducedReduceScatter
            | CollectiveOp::ReducedVaryCast
            | CollectiveOp::Preduced
            | CollectiveOp::VaryUnreducedCast
            | CollectiveOp::UnreducedPsum,
        ) => return refused(prim.name()),
        Some(
            CollectiveOp::Psum
            | CollectiveOp::Pmax
            | CollectiveOp::Pmin
            | CollectiveOp::AllGather
            | CollectiveOp::ReduceScatter
            | CollectiveOp::Ppermute
            | CollectiveOp::AllToAll
            | CollectiveOp::AxisIndex
            | CollectiveOp::Pvary
            | CollectiveOp::Pbroadcast
            | CollectiveOp::PsumInvariant
            | CollectiveOp::AllGatherInvariant
            | CollectiveOp::RaggedAllToAll
            | CollectiveOp::Psend
            | CollectiveOp::Precv,
        )
        | None => {}
    }
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
        CollectiveKind::RaggedAllToAll => vec![ragged(prim, params, &p, args, size)],
        // A send of a batched value sends the whole batch: its token stands for the batch
        // (batched where the value is), and the receive taking it receives the batch there.
        CollectiveKind::Psend { .. } => {
            vec![(Tensor::bind1(prim, params.clone(), &[x]), args[0].1)]
        }
        CollectiveKind::Precv { mut out_shape, .. } => {
            let d = args[0].1.unwrap_or(0).min(out_shape.rank());
            out_shape.shape.insert(d, size);
            let p = with_param(
                params,
                "out_shape",
                crate::prim::out_shape_param(&out_shape),
            );
            vec![(Tensor::bind1(prim, p, &[x]), Some(d))]
        }
        CollectiveKind::Psum
        | CollectiveKind::Pmax
        | CollectiveKind::Pmin
        | CollectiveKind::Ppermute { .. }
        | CollectiveKind::Pvary
        | CollectiveKind::Preduced
        | CollectiveKind::VaryUnreducedCast
        | CollectiveKind::ReducedVaryCast
        | CollectiveKind::UnreducedPsum
        | CollectiveKind::Pbroadcast { .. } => {
            vec![(Tensor::bind1(prim, params.clone(), &[x]), args[0].1)]
        }
    }
}

/// Batches `ragged_all_to_all` (JAX's rule): each element's operand and output are stacked
/// along their leading dimension (element `b`'s rows after those of elements `0..b`), and its
/// offsets shifted by as many rows. The offset and size vectors interleave the elements slice by
/// slice (`[K, B]` flattened), so that entry `k` of every element still goes to the device that
/// entry `k` names. Groups (`axis_index_groups`) are refused, as JAX refuses them.
fn ragged(
    prim: Prim,
    params: &Params,
    p: &CollectiveParams,
    args: &[Batched],
    size: i64,
) -> Batched {
    let anchor = &args[0].0;
    if args.iter().all(|a| a.1.is_none()) {
        let refs: Vec<&Tensor> = args.iter().map(|a| &a.0).collect();
        return (Tensor::bind1(prim, params.clone(), &refs), None);
    }
    if p.groups.is_some() {
        return (
            anchor.fail(
                prim.name(),
                "vmap of ragged_all_to_all with axis_index_groups is not supported (nor in \
                 JAX); exchange over whole axes"
                    .into(),
            ),
            None,
        );
    }
    let [operand, output, index @ ..] = args else {
        return (
            anchor.fail(prim.name(), format!("takes 6 operands, got {}", args.len())),
            None,
        );
    };
    let operand = to_front(operand, size);
    let output = to_front(output, size);
    let (rows_in, rows_out) = (operand.shape()[1], output.shape()[1]);
    // [B, K] -> [K, B], and each element's offsets shifted to its rows.
    let index: Vec<Tensor> = index
        .iter()
        .map(|v| to_front(v, size).transpose(&[1, 0]))
        .collect();
    let shifted = |v: &Tensor, rows: i64| {
        let element = v.iota_along(v.shape(), 1).astype(v.dtype());
        v + &(&element * &element.full_like_scalar(rows as f64))
    };
    let merge = |t: &Tensor| {
        let mut shape = vec![t.shape()[0] * t.shape()[1]];
        shape.extend_from_slice(&t.shape()[2..]);
        t.reshape(&shape)
    };
    let input_offsets = merge(&shifted(&index[0], rows_in));
    let send_sizes = merge(&index[1]);
    let output_offsets = merge(&shifted(&index[2], rows_out));
    let recv_sizes = merge(&index[3]);
    let result = Tensor::bind1(
        prim,
        params.clone(),
        &[
            &merge(&operand),
            &merge(&output),
            &input_offsets,
            &send_sizes,
            &output_offsets,
            &recv_sizes,
        ],
    );
    (result.reshape(output.shape()), Some(0))
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
    // The body's constraints name the mesh's manual axes: `spmd_axis_name` does not reach
    // them (the specs keep the batch dimension unsplit).
    let body = match p
        .in_body(|| super::without_spmd(|| super::vmap(p.body, &in_axes, &out_axes, size)))
    {
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
