//! Asynchronous collectives (`psum_start` ... `ppermute_done`), lowered as JAX lowers them: a
//! start becomes a `stablehlo.async_start` whose region computes the synchronous collective
//! on the region's argument and returns it, typed `!stablehlo.future<T>`; its done becomes a
//! `stablehlo.async_done` of that future, typed `T`.
//!
//! StableHLO requires the region to hold exactly one operation before its return. Where the
//! synchronous lowering takes more (a `pbroadcast`, built from a select and an all-reduce; an
//! untiled `all_gather` or `psum_scatter`, whose reshape follows the collective; a collective
//! over a single device, which is no operation at all), and where every group of the
//! collective holds one device (XLA removes such a collective, and its GPU compiler then
//! aborts on the done left behind), the start lowers as the synchronous collective and its
//! done as the identity: the values are the same, and XLA schedules
//! collectives asynchronously by itself. (JAX refuses to lower an untiled `reduce_scatter_start`
//! and lowers `pbroadcast_start` on GPU only.) An untiled `unreduced_reduce_scatter_start` is
//! refused with [`LowerError::Unsupported`], as JAX refuses it.
//!
//! The starts of the reduced/unreduced collectives (`psum_invariant_start`,
//! `unreduced_psum_start`, `all_gather_reduced_start`, `unreduced_reduce_scatter_start`) wrap
//! the lowering of their collective, which is that of `psum`, `all_gather` and
//! `psum_scatter` (the types differ, not the values).

use melior::ir::block::BlockLike;
use melior::ir::operation::OperationLike;
use melior::ir::{Region, Value};
use melior::ir::{RegionLike, ValueLike};
use tessera_ir::prim::CollectiveParams;
use tessera_ir::{Params, Prim, axis_env};

use super::{Ctx, mlir_type, parallel};
use crate::context::LowerError;

/// A start: the synchronous collective inside an `async_start` region.
pub(super) fn start<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    if prim == Prim::UnreducedReduceScatterStart
        && params.get("tiled") == Some(&tessera_ir::ParamValue::Bool(false))
    {
        return Err(LowerError::Unsupported {
            prim: prim.name().into(),
            reason: "an untiled unreduced_reduce_scatter_start has no asynchronous lowering (nor \
                     in JAX, whose lowering raises NotImplementedError); pass tiled=true, or \
                     use the synchronous unreduced_psum_scatter"
                .into(),
        });
    }
    let (Some(x), Some(out)) = (ctx.in_avals.first(), ctx.out_avals.first()) else {
        return Err(LowerError::Build(format!(
            "{} takes one operand and gives one result",
            prim.name()
        )));
    };
    let region = ctx
        .body
        .region(&[&mlir_type(x)], "stablehlo.return", |b, args| {
            let inner = Ctx {
                body: b,
                in_avals: ctx.in_avals,
                out_avals: ctx.out_avals,
            };
            parallel::collective(&inner, prim.synchronous(), params, args)
        })?;
    if operations(&region) != 2 || within_single_devices(ctx, prim, params) {
        return parallel::collective(ctx, prim.synchronous(), params, inputs);
    }
    let future = format!("!stablehlo.future<{}>", mlir_type(out));
    ctx.body.op_with_regions(
        "stablehlo.async_start",
        inputs,
        &[&future],
        &[],
        vec![region],
    )
}

/// Whether the start's collective runs within groups of one device each (its axes of size 1):
/// it then moves nothing, XLA removes it, and the `async_done` left without its collective
/// stops XLA's GPU compiler (a failed check that aborts the process; JAX's `psum_start` on one
/// GPU fails too, "Unsupported async done wrapped instruction"). Such a start lowers
/// synchronously.
fn within_single_devices(ctx: &Ctx<'_, '_, '_>, prim: Prim, params: &Params) -> bool {
    let sync = prim.synchronous();
    let rank = ctx
        .in_avals
        .first()
        .map_or(0, tessera_ir::ShapedArray::rank);
    let Ok(p) = CollectiveParams::read(sync, params, rank) else {
        return false;
    };
    let Ok(mesh) = axis_env::mesh_for(sync.name(), &p.axes) else {
        return false;
    };
    p.replica_groups(sync, &mesh)
        .is_ok_and(|groups| groups.iter().all(|g| g.len() <= 1))
}

/// The number of operations in the first block of `region`, its terminator included.
fn operations(region: &Region<'_>) -> usize {
    let mut next = region.first_block().and_then(|b| b.first_operation());
    let mut n = 0;
    while let Some(op) = next {
        n += 1;
        next = op.next_in_block();
    }
    n
}

/// A done: the `async_done` of the start's future, or the value itself where the start
/// lowered synchronously.
pub(super) fn done<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let is_future = inputs
        .first()
        .is_some_and(|v| v.r#type().to_string().starts_with("!stablehlo.future"));
    if !is_future {
        return Ok(inputs.to_vec());
    }
    let types: Vec<String> = ctx.out_avals.iter().map(mlir_type).collect();
    let refs: Vec<&str> = types.iter().map(String::as_str).collect();
    ctx.body.op("stablehlo.async_done", inputs, &refs, &[])
}
