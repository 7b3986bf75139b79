//! `shard_map` and the collectives, lowered as JAX lowers them for SPMD partitioning. Under
//! Shardy a `shard_map` is one `sdy.manual_computation` whose region is the body on manual
//! per-device blocks (`in_shardings`, `out_shardings` from its specs, every mesh axis manual);
//! under GSPMD it wraps each operand in `@Sharding` + `@SPMDFullToShardShape` custom calls and
//! each result in `@Sharding` + `@SPMDShardToFullShape`, with the body inline. Collectives
//! become `all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all` and `collective_permute`
//! over global device ids (both partitioners), with the replica groups and source–target pairs
//! that `tessera-ir` computes (the interpreter uses the same ones), and `axis_index` reads
//! `partition_id`. `ragged_all_to_all` has no StableHLO op: as JAX does, it becomes a
//! `stablehlo.custom_call @ragged_all_to_all` (typed-FFI `api_version = 4`) whose
//! `backend_config` dictionary holds the `replica_groups` and the `channel_id`. XLA's GPU and
//! TPU backends implement that target; the CPU plugin does not, so such a module compiles only
//! for those (the interpreter runs the primitive everywhere).

use melior::ir::Value;
use tessera_ir::passes::inline_all;
use tessera_ir::prim::{CollectiveKind, CollectiveParams, ShardMapParams};
use tessera_ir::{DType, Params, Prim, ShapedArray, axis_env};
use tessera_sharding::{AbstractMesh, Mesh, NamedSharding, PartitionSpec, groups};

use super::control::constant_scalar;
use super::reduce::combiner;
use super::{Ctx, Functions, ir, lower_body, mlir_type};
use crate::context::LowerError;
use crate::emit::quote;
use crate::sharding::Partitioner;
use tessera_ir::prim::ReduceKind;

pub(super) const CHANNEL: &str = "#stablehlo.channel_handle<handle = 1, type = 1>";

fn custom_call<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    target: &str,
    x: Value<'c, 'b>,
    sharding: &str,
    out: &ShapedArray,
) -> Result<Value<'c, 'b>, LowerError> {
    let attrs = [
        ("call_target_name", quote(target)),
        ("mhlo.sharding", quote(sharding)),
    ];
    Ok(ctx
        .body
        .op("stablehlo.custom_call", &[x], &[&mlir_type(out)], &attrs)?
        .remove(0))
}

/// `spec` over `mesh` with its devices in order (a shard_map's or a constraint's mesh).
pub(super) fn named(
    mesh: &AbstractMesh,
    spec: &PartitionSpec,
) -> Result<NamedSharding, LowerError> {
    let mesh = Mesh::iota(mesh.clone());
    Ok(NamedSharding::with_partial_axes(&mesh, spec.clone())?)
}

fn hlo_sharding(
    mesh: &AbstractMesh,
    spec: &PartitionSpec,
    rank: usize,
) -> Result<String, LowerError> {
    Ok(named(mesh, spec)?.to_hlo_sharding(rank)?.to_string())
}

/// The rank of a value as lowered: a key array has a trailing dimension for its two words.
fn physical_rank(aval: &ShapedArray) -> usize {
    aval.rank() + usize::from(aval.dtype.is_key())
}

/// `shard_map`: the body on manual blocks, in the module's partitioner's form.
pub(super) fn shard_map<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    params: &Params,
    inputs: &[Value<'c, 'b>],
    functions: &mut Functions<'_, 'c>,
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let p = ShardMapParams::read(params).map_err(ir)?;
    match ctx.body.partitioner() {
        Partitioner::Shardy => manual_computation(ctx, &p, inputs, functions),
        Partitioner::Gspmd => spmd_custom_calls(ctx, &p, inputs, functions),
    }
}

/// Shardy: `sdy.manual_computation` over every axis of the mesh, its region the body (which,
/// isolated from above, holds its own constants). Over one device there is nothing manual and
/// the body is inlined, as JAX does.
fn manual_computation<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    p: &ShardMapParams<'_>,
    inputs: &[Value<'c, 'b>],
    functions: &mut Functions<'_, 'c>,
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let body = inline_all(p.body);
    if p.mesh.size() == 1 {
        let consts = body
            .consts
            .iter()
            .map(|c| super::control::constant_array(ctx.body, c))
            .collect::<Result<Vec<_>, _>>()?;
        return p.in_body(|| lower_body(ctx.body, &body.jaxpr, &consts, inputs, functions));
    }
    let per_value = |specs: &[PartitionSpec], avals: &[ShapedArray]| {
        let shardings = specs
            .iter()
            .zip(avals)
            .map(|(spec, aval)| {
                ctx.body
                    .sdy_sharding(&named(&p.mesh, spec)?, physical_rank(aval), &[])
            })
            .collect::<Result<Vec<_>, LowerError>>()?;
        Ok::<_, LowerError>(format!(
            "#sdy.sharding_per_value<[{}]>",
            shardings.join(", ")
        ))
    };
    let axes: Vec<String> = p
        .mesh
        .axis_names()
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect();
    let attrs = [
        ("in_shardings", per_value(&p.in_specs, ctx.in_avals)?),
        (
            "manual_axes",
            format!("#sdy<manual_axes{{{}}}>", axes.join(", ")),
        ),
        ("out_shardings", per_value(&p.out_specs, ctx.out_avals)?),
    ];
    let block_types: Vec<String> = body.jaxpr.in_avals().iter().map(mlir_type).collect();
    let block_refs: Vec<&str> = block_types.iter().map(String::as_str).collect();
    let region = ctx
        .body
        .region(&block_refs, "sdy.return", |inner, blocks| {
            let consts = body
                .consts
                .iter()
                .map(|c| super::control::constant_array(inner, c))
                .collect::<Result<Vec<_>, _>>()?;
            p.in_body(|| lower_body(inner, &body.jaxpr, &consts, blocks, functions))
        })?;
    let out_types: Vec<String> = ctx.out_avals.iter().map(mlir_type).collect();
    let out_refs: Vec<&str> = out_types.iter().map(String::as_str).collect();
    ctx.body.op_with_regions(
        "sdy.manual_computation",
        inputs,
        &out_refs,
        &attrs,
        vec![region],
    )
}

/// GSPMD: the body inlined between full-to-shard and shard-to-full conversions.
fn spmd_custom_calls<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    p: &ShardMapParams<'_>,
    inputs: &[Value<'c, 'b>],
    functions: &mut Functions<'_, 'c>,
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let body = inline_all(p.body);
    let block_avals = body.jaxpr.in_avals();
    let mut blocks = Vec::with_capacity(inputs.len());
    for (i, &x) in inputs.iter().enumerate() {
        let global = &ctx.in_avals[i];
        let sharding = hlo_sharding(&p.mesh, &p.in_specs[i], physical_rank(global))?;
        let s = custom_call(ctx, "Sharding", x, &sharding, global)?;
        blocks.push(custom_call(
            ctx,
            "SPMDFullToShardShape",
            s,
            "{manual}",
            &block_avals[i],
        )?);
    }
    let consts = body
        .consts
        .iter()
        .map(|c| super::control::constant_array(ctx.body, c))
        .collect::<Result<Vec<_>, _>>()?;
    let outs = p.in_body(|| lower_body(ctx.body, &body.jaxpr, &consts, &blocks, functions))?;
    let out_blocks = body.jaxpr.out_avals();
    outs.iter()
        .enumerate()
        .map(|(k, &o)| {
            let global = &ctx.out_avals[k];
            let s = custom_call(ctx, "Sharding", o, "{manual}", &out_blocks[k])?;
            let sharding = hlo_sharding(&p.mesh, &p.out_specs[k], physical_rank(global))?;
            custom_call(ctx, "SPMDShardToFullShape", s, &sharding, global)
        })
        .collect()
}

/// `dense<[[...]]> : tensor<GxNxi64>`, uneven groups padded with -1 as JAX does.
pub(super) fn groups_attr(groups: &[Vec<i64>]) -> String {
    let width = groups.iter().map(Vec::len).max().unwrap_or(0);
    let rows: Vec<String> = groups
        .iter()
        .map(|g| {
            let cells: Vec<String> = (0..width)
                .map(|i| g.get(i).copied().unwrap_or(-1).to_string())
                .collect();
            format!("[{}]", cells.join(", "))
        })
        .collect();
    format!(
        "dense<[{}]> : tensor<{}x{}xi64>",
        rows.join(", "),
        groups.len(),
        width
    )
}

/// `source_target_pairs` of a permutation: `[source, target]` rows, a `0x2` tensor when there
/// are none (a `ppermute` or `psend` with an empty `perm`, whose result is zeros).
pub(super) fn pairs_attr(pairs: &[(i64, i64)]) -> String {
    if pairs.is_empty() {
        return "dense<> : tensor<0x2xi64>".to_owned();
    }
    let rows: Vec<Vec<i64>> = pairs.iter().map(|&(s, t)| vec![s, t]).collect();
    groups_attr(&rows)
}

/// Every collective (and `pvary`, a no-op once lowered).
pub(super) fn collective<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let rank = ctx.in_avals.first().map_or(0, ShapedArray::rank);
    let p = CollectiveParams::read(prim, params, rank).map_err(ir)?;
    let mesh = axis_env::mesh_for(prim.name(), &p.axes).map_err(ir)?;
    let out = &ctx.out_avals[0];
    let groups = || p.replica_groups(prim, &mesh).map_err(ir);
    let value = match &p.kind {
        CollectiveKind::Pvary
        | CollectiveKind::Preduced
        | CollectiveKind::VaryUnreducedCast
        | CollectiveKind::ReducedVaryCast => inputs[0],
        CollectiveKind::AxisIndex => axis_index(ctx, &mesh, &p.axes)?,
        CollectiveKind::Psum | CollectiveKind::UnreducedPsum => {
            all_reduce(ctx, ReduceKind::Sum, inputs[0], &groups()?)?
        }
        CollectiveKind::Pmax => all_reduce(ctx, ReduceKind::Max, inputs[0], &groups()?)?,
        CollectiveKind::Pmin => all_reduce(ctx, ReduceKind::Min, inputs[0], &groups()?)?,
        &CollectiveKind::Pbroadcast { source } => {
            let sources: Vec<i64> = match &p.groups {
                Some(index_groups) => index_groups
                    .iter()
                    .filter_map(|g| g.get(source as usize).copied())
                    .collect(),
                None => vec![source],
            };
            pbroadcast(ctx, inputs[0], &mesh, &p.axes, &sources, &groups()?)?
        }
        &CollectiveKind::AllGather {
            dimension, tiled, ..
        } => all_gather(ctx, inputs[0], dimension, tiled, &groups()?)?,
        &CollectiveKind::ReduceScatter { dimension, .. } => {
            reduce_scatter(ctx, dimension, inputs[0], &groups()?)?
        }
        &CollectiveKind::AllToAll {
            split_axis,
            concat_axis,
            ..
        } => {
            let groups = groups()?;
            let n = groups.first().map_or(1, Vec::len);
            if n == 1 {
                inputs[0]
            } else {
                let attrs = [
                    ("channel_handle", CHANNEL.into()),
                    ("concat_dimension", format!("{concat_axis} : i64")),
                    ("replica_groups", groups_attr(&groups)),
                    ("split_count", format!("{n} : i64")),
                    ("split_dimension", format!("{split_axis} : i64")),
                ];
                ctx.body.op(
                    "stablehlo.all_to_all",
                    &[inputs[0]],
                    &[&mlir_type(out)],
                    &attrs,
                )?[0]
            }
        }
        CollectiveKind::RaggedAllToAll => ragged_all_to_all(ctx, inputs, &groups()?)?,
        CollectiveKind::Psend { .. } => {
            return super::p2p::lower(ctx, super::p2p::Direction::Send, prim, params, inputs);
        }
        CollectiveKind::Precv { .. } => {
            return super::p2p::lower(ctx, super::p2p::Direction::Receive, prim, params, inputs);
        }
        CollectiveKind::Ppermute { perm } => {
            let pairs = groups::permute_pairs(&mesh, &p.axes, perm)
                .map_err(|e| LowerError::Build(e.to_string()))?;
            let attrs = [
                ("channel_handle", CHANNEL.into()),
                ("source_target_pairs", pairs_attr(&pairs)),
            ];
            ctx.body.op(
                "stablehlo.collective_permute",
                &[inputs[0]],
                &[&mlir_type(out)],
                &attrs,
            )?[0]
        }
    };
    Ok(vec![value])
}

/// The attributes of JAX's `ragged_all_to_all` custom call over `groups`: the call target, the
/// typed-FFI API version and the `backend_config` dictionary (`replica_groups`, `channel_id`).
/// Groups of unequal sizes are refused, as JAX refuses them.
fn ragged_all_to_all_attrs(groups: &[Vec<i64>]) -> Result<[(&'static str, String); 3], LowerError> {
    let n = groups.first().map_or(0, Vec::len);
    if groups.iter().any(|g| g.len() != n) {
        return Err(LowerError::Build(format!(
            "ragged_all_to_all needs replica groups of one size, got {groups:?}; give \
             axis_index_groups groups of equal size"
        )));
    }
    Ok([
        ("api_version", "4 : i32".into()),
        (
            "backend_config",
            format!(
                "{{channel_id = 1 : i64, replica_groups = {}}}",
                groups_attr(groups)
            ),
        ),
        ("call_target_name", quote("ragged_all_to_all")),
    ])
}

/// `ragged_all_to_all`: a custom call on its six operands, typed as `output`.
fn ragged_all_to_all<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    inputs: &[Value<'c, 'b>],
    groups: &[Vec<i64>],
) -> Result<Value<'c, 'b>, LowerError> {
    let attrs = ragged_all_to_all_attrs(groups)?;
    Ok(ctx.body.op(
        "stablehlo.custom_call",
        inputs,
        &[&mlir_type(&ctx.out_avals[0])],
        &attrs,
    )?[0])
}

/// `all_gather` along result dimension `d`: an untiled gather first gives each block a unit
/// dimension at `d`, which the gather grows.
fn all_gather<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    x: Value<'c, 'b>,
    d: usize,
    tiled: bool,
    groups: &[Vec<i64>],
) -> Result<Value<'c, 'b>, LowerError> {
    let mut x = x;
    if !tiled {
        let mut unit = ctx.in_avals[0].clone();
        unit.shape.insert(d, 1);
        let dims: Vec<i64> = (0..unit.rank() as i64).filter(|&i| i != d as i64).collect();
        x = ctx.body.op(
            "stablehlo.broadcast_in_dim",
            &[x],
            &[&mlir_type(&unit)],
            &[("broadcast_dimensions", super::i64_array(&dims))],
        )?[0];
    }
    let attrs = [
        ("all_gather_dim", format!("{d} : i64")),
        ("channel_handle", CHANNEL.into()),
        ("replica_groups", groups_attr(groups)),
        ("use_global_device_ids", "unit".into()),
    ];
    Ok(ctx.body.op(
        "stablehlo.all_gather",
        &[x],
        &[&mlir_type(&ctx.out_avals[0])],
        &attrs,
    )?[0])
}

fn reducer_region<'c>(
    ctx: &Ctx<'_, 'c, '_>,
    kind: ReduceKind,
    dtype: DType,
) -> Result<melior::ir::Region<'c>, LowerError> {
    let st = mlir_type(&ShapedArray::scalar(dtype));
    let combiner = combiner(kind);
    ctx.body.region(&[&st, &st], "stablehlo.return", |b, xs| {
        b.op(combiner, xs, &[&st], &[])
    })
}

fn all_reduce<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    kind: ReduceKind,
    x: Value<'c, 'b>,
    groups: &[Vec<i64>],
) -> Result<Value<'c, 'b>, LowerError> {
    all_reduce_of(ctx, kind, x, groups, &ctx.out_avals[0])
}

/// [`all_reduce`] of a value of type `aval`.
fn all_reduce_of<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    kind: ReduceKind,
    x: Value<'c, 'b>,
    groups: &[Vec<i64>],
    aval: &ShapedArray,
) -> Result<Value<'c, 'b>, LowerError> {
    let attrs = [
        ("channel_handle", CHANNEL.into()),
        ("replica_groups", groups_attr(groups)),
        ("use_global_device_ids", "unit".into()),
    ];
    let region = reducer_region(ctx, kind, aval.dtype)?;
    Ok(ctx
        .body
        .op_with_regions(
            "stablehlo.all_reduce",
            &[x],
            &[&mlir_type(aval)],
            &attrs,
            vec![region],
        )?
        .remove(0))
}

fn reduce_scatter<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    d: usize,
    x: Value<'c, 'b>,
    groups: &[Vec<i64>],
) -> Result<Value<'c, 'b>, LowerError> {
    let input = &ctx.in_avals[0];
    let n = groups.first().map_or(1, Vec::len) as i64;
    let mut tiled = input.clone();
    tiled.shape[d] /= n;
    let attrs = [
        ("channel_handle", CHANNEL.into()),
        ("replica_groups", groups_attr(groups)),
        ("scatter_dimension", format!("{d} : i64")),
        ("use_global_device_ids", "unit".into()),
    ];
    let region = reducer_region(ctx, ReduceKind::Sum, input.dtype)?;
    let y = ctx
        .body
        .op_with_regions(
            "stablehlo.reduce_scatter",
            &[x],
            &[&mlir_type(&tiled)],
            &attrs,
            vec![region],
        )?
        .remove(0);
    let out = &ctx.out_avals[0];
    if out.shape == tiled.shape {
        return Ok(y);
    }
    Ok(ctx
        .body
        .op("stablehlo.reshape", &[y], &[&mlir_type(out)], &[])?
        .remove(0))
}

/// This device's index along `axes` combined, row-major over the axes as named (JAX's
/// `axis_index` of a tuple of names), as `i32`: per axis `partition_id / stride % size`.
fn axis_index<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    mesh: &AbstractMesh,
    axes: &[String],
) -> Result<Value<'c, 'b>, LowerError> {
    let u32 = ShapedArray::scalar(DType::U32);
    let ty = mlir_type(&u32);
    let id = ctx.body.op("stablehlo.partition_id", &[], &[&ty], &[])?[0];
    let mut index: Option<Value<'c, 'b>> = None;
    for axis in axes {
        let pos = mesh
            .axis_index(axis)
            .ok_or_else(|| LowerError::Build(format!("unbound axis name: {axis}")))?;
        let stride: i64 = mesh.axis_sizes()[pos + 1..].iter().product();
        let size = mesh.axis_sizes()[pos];
        let stride = constant_scalar(ctx.body, stride as f64, &u32)?;
        let size_value = constant_scalar(ctx.body, size as f64, &u32)?;
        let q = ctx
            .body
            .op("stablehlo.divide", &[id, stride], &[&ty], &[])?[0];
        let r = ctx
            .body
            .op("stablehlo.remainder", &[q, size_value], &[&ty], &[])?[0];
        index = Some(match index {
            None => r,
            Some(before) => {
                let scaled =
                    ctx.body
                        .op("stablehlo.multiply", &[before, size_value], &[&ty], &[])?[0];
                ctx.body.op("stablehlo.add", &[scaled, r], &[&ty], &[])?[0]
            }
        });
    }
    let index = index.ok_or_else(|| LowerError::Build("axis_index over no axis".into()))?;
    let i32 = mlir_type(&ShapedArray::scalar(DType::I32));
    Ok(ctx.body.op("stablehlo.convert", &[index], &[&i32], &[])?[0])
}

/// `pbroadcast` as JAX defines it: the source's value masked in, zeros elsewhere, summed in
/// each group (floats as their bits, so the sum is exact). `sources` are the indices along `axes` of the groups' sources (one without
/// groups).
fn pbroadcast<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    x: Value<'c, 'b>,
    mesh: &AbstractMesh,
    axes: &[String],
    sources: &[i64],
    groups: &[Vec<i64>],
) -> Result<Value<'c, 'b>, LowerError> {
    let aval = &ctx.in_avals[0];
    let idx = axis_index(ctx, mesh, axes)?;
    let i32s = ShapedArray::scalar(DType::I32);
    let pred = mlir_type(&ShapedArray::scalar(DType::Bool));
    let mut here: Option<Value<'c, 'b>> = None;
    for &source in sources {
        let src = constant_scalar(ctx.body, source as f64, &i32s)?;
        let at = ctx.body.op(
            "stablehlo.compare",
            &[idx, src],
            &[&pred],
            &[(
                "comparison_direction",
                "#stablehlo<comparison_direction EQ>".into(),
            )],
        )?[0];
        here = Some(match here {
            Some(h) => ctx.body.op("stablehlo.or", &[h, at], &[&pred], &[])?[0],
            None => at,
        });
    }
    let here = here.ok_or_else(|| LowerError::Build("pbroadcast without a source".into()))?;
    // Floats are summed as their bits (an integer of their width): integer sums of one value
    // and zeros are exact, where a float all-reduce turned a source's -0.0 into +0.0 (its
    // accumulator starts at +0.0). JAX lowers a collective_broadcast, on GPUs only.
    let bits = match aval.dtype {
        DType::F64 => Some(DType::I64),
        DType::F32 => Some(DType::I32),
        DType::F16 | DType::BF16 => Some(DType::I16),
        DType::Bool
        | DType::I8
        | DType::I16
        | DType::I32
        | DType::I64
        | DType::U8
        | DType::U16
        | DType::U32
        | DType::U64
        | DType::KeyFry
        | DType::Token => None,
    };
    let aval = &ShapedArray::new(bits.unwrap_or(aval.dtype), &aval.shape);
    let ty = mlir_type(aval);
    let x = match bits {
        Some(_) => ctx
            .body
            .op("stablehlo.bitcast_convert", &[x], &[&ty], &[])?[0],
        None => x,
    };
    let zeros = constant_scalar(ctx.body, 0.0, &ShapedArray::scalar(aval.dtype))?;
    let zeros = ctx.body.op(
        "stablehlo.broadcast_in_dim",
        &[zeros],
        &[&ty],
        &[("broadcast_dimensions", super::i64_array(&[]))],
    )?[0];
    let masked = ctx
        .body
        .op("stablehlo.select", &[here, x, zeros], &[&ty], &[])?[0];
    let summed = all_reduce_of(ctx, ReduceKind::Sum, masked, groups, aval)?;
    match bits {
        Some(_) => {
            let out = mlir_type(&ctx.out_avals[0]);
            Ok(ctx
                .body
                .op("stablehlo.bitcast_convert", &[summed], &[&out], &[])?[0])
        }
        None => Ok(summed),
    }
}
