//! Host callbacks (`pure_callback`, `io_callback`, `debug_callback`): each becomes
//! `stablehlo.custom_call @tessera_host_callback` with `api_version = 4` (XLA's typed FFI) and
//! `backend_config = {callback_id = N : i64}`, the registry id of its closure; `tessera-pjrt`
//! registers the FFI handler that calls it. Effectful callbacks (`io_callback`,
//! `debug_callback`) are marked `has_side_effect = true`, so XLA neither removes nor merges
//! them. An ordered `io_callback` takes and returns one more value, an `i32[]` order token
//! (`order_token = 1` in its `backend_config`): the body's ordered callbacks are chained through
//! it, so each waits for the one before (JAX threads a runtime token the same way).
//!
//! Under GSPMD, in a module for several partitions, the call carries JAX's sharding for a
//! callback of a `jit` (`_callback_op_sharding`): maximal on device 0 (`{maximal device=0}`),
//! so it runs once, on the first device, with the whole logical operands, and XLA hands its
//! results to every device (its partitioner refuses a side-effecting call without a sharding).
//! Under Shardy the plugins drop the same annotation (`sdy.sharding` with a one-device mesh)
//! from the call, so there it carries none: a `pure_callback` is then called by every device,
//! and a side-effecting callback is refused by XLA's partitioner. Inside a `shard_map` body
//! (all axes manual) it carries none either.

use melior::ir::Value;
use tessera_ir::callback::{CALLBACK_ID_ATTR, HOST_CALLBACK_TARGET, ORDER_TOKEN_ATTR};
use tessera_ir::prim::{CallbackParams, is_effectful};
use tessera_ir::{DType, Prim, ShapedArray};

use super::Ctx;
use super::control::constant_scalar;
use crate::context::LowerError;
use crate::emit::quote;
use crate::sharding::Partitioner;

/// The sharding attribute of a callback in `ctx`'s module (see the module docs).
fn placement(ctx: &Ctx<'_, '_, '_>) -> Option<(&'static str, String)> {
    let manual = tessera_ir::axis_env::current_mesh().is_some();
    let gspmd = match ctx.body.partitioner() {
        Partitioner::Gspmd => true,
        Partitioner::Shardy => false,
    };
    (gspmd && ctx.body.num_partitions() > 1 && !manual)
        .then(|| ("mhlo.sharding", quote("{maximal device=0}")))
}

fn attrs(
    ctx: &Ctx<'_, '_, '_>,
    prim: Prim,
    p: &tessera_ir::Params,
    ordered: bool,
) -> Result<Vec<(&'static str, String)>, LowerError> {
    let refused = |reason: String| LowerError::Unsupported {
        prim: prim.name().into(),
        reason,
    };
    let op = prim
        .callback_op()
        .ok_or_else(|| refused("is not a host callback".into()))?;
    let cp = CallbackParams::read(prim, op, p).map_err(|e| refused(e.to_string()))?;
    let token = if ordered {
        format!(", {ORDER_TOKEN_ATTR} = 1 : i64")
    } else {
        String::new()
    };
    let mut attrs = vec![
        ("api_version", "4 : i32".to_owned()),
        (
            "backend_config",
            format!("{{{CALLBACK_ID_ATTR} = {} : i64{token}}}", cp.id.0),
        ),
        ("call_target_name", quote(HOST_CALLBACK_TARGET)),
    ];
    if is_effectful(prim) {
        attrs.push(("has_side_effect", "true".to_owned()));
    }
    attrs.extend(placement(ctx));
    Ok(attrs)
}

/// An unordered callback: one custom call on the operands, typed as the results.
pub(super) fn callback<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    p: &tessera_ir::Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let results: Vec<&ShapedArray> = ctx.out_avals.iter().collect();
    ctx.op(
        "stablehlo.custom_call",
        inputs,
        &results,
        &attrs(ctx, prim, p, false)?,
    )
}

/// An ordered `io_callback`: the custom call also takes the order token `token` (the previous
/// ordered callback's, or a fresh one) and returns the next, which is the last of the values
/// returned.
pub(super) fn ordered<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    p: &tessera_ir::Params,
    inputs: &[Value<'c, 'b>],
    token: Option<Value<'c, 'b>>,
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let token_aval = ShapedArray::new(DType::I32, &[]);
    let token = match token {
        Some(t) => t,
        None => constant_scalar(ctx.body, 0.0, &token_aval)?,
    };
    let mut operands = inputs.to_vec();
    operands.push(token);
    let mut results: Vec<&ShapedArray> = ctx.out_avals.iter().collect();
    results.push(&token_aval);
    ctx.op(
        "stablehlo.custom_call",
        &operands,
        &results,
        &attrs(ctx, prim, p, true)?,
    )
}
