//! `psend` and `precv` as JAX's GPU lowering emits them: a `psend` creates a token
//! (`stablehlo.after_all` of nothing, what JAX's `hlo.create_token` builds) and sends its
//! operand with `stablehlo.send`, whose result token is the `psend`'s; a `precv` receives with
//! `stablehlo.recv` on that token and returns the received array (not the recv's own token).
//! Both carry the `source_target_pairs` a `ppermute` with the same `perm` would (mesh positions
//! of each group, as `groups::permute_pairs` numbers them), the collective channel handle of a
//! manual body, `is_host_transfer = false`, and a manual sharding (`mhlo.sharding =
//! "{manual}"`), as JAX sets on both. XLA's GPU backends implement them (NCCL send/recv); its
//! CPU plugin does not compile them.

use melior::ir::Value;
use tessera_ir::prim::{CollectiveKind, CollectiveParams};
use tessera_ir::{Params, Prim, ShapedArray, axis_env};
use tessera_sharding::groups;

use super::parallel::{CHANNEL, pairs_attr};
use super::{Ctx, ir, mlir_type};
use crate::context::LowerError;
use crate::emit::quote;

/// The MLIR type of a token.
pub(super) const TOKEN: &str = "!stablehlo.token";

/// Which of the pair an equation is.
#[derive(Debug, Clone, Copy)]
pub(super) enum Direction {
    /// `psend`.
    Send,
    /// `precv`.
    Receive,
}

/// Lowers a `psend` or a `precv`.
pub(super) fn lower<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    direction: Direction,
    prim: Prim,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let rank = ctx.in_avals.first().map_or(0, ShapedArray::rank);
    let p = CollectiveParams::read(prim, params, rank).map_err(ir)?;
    let mesh = axis_env::mesh_for(prim.name(), &p.axes).map_err(ir)?;
    let (CollectiveKind::Psend { perm } | CollectiveKind::Precv { perm, .. }) = &p.kind else {
        return Err(LowerError::Build(format!(
            "{} is not a send or a receive",
            prim.name()
        )));
    };
    let pairs = groups::permute_pairs(&mesh, &p.axes, perm)
        .map_err(|e| LowerError::Build(format!("{}: {e}", prim.name())))?;
    let attrs = [
        ("channel_handle", CHANNEL.to_owned()),
        ("is_host_transfer", "false".to_owned()),
        ("mhlo.sharding", quote("{manual}")),
        ("source_target_pairs", pairs_attr(&pairs)),
    ];
    let Some(&x) = inputs.first() else {
        return Err(LowerError::Build(format!(
            "{} takes one operand",
            prim.name()
        )));
    };
    match direction {
        Direction::Send => {
            let token = ctx.body.op("stablehlo.after_all", &[], &[TOKEN], &[])?[0];
            ctx.body.op("stablehlo.send", &[x, token], &[TOKEN], &attrs)
        }
        Direction::Receive => {
            let out = mlir_type(&ctx.out_avals[0]);
            let received = ctx
                .body
                .op("stablehlo.recv", &[x], &[&out, TOKEN], &attrs)?;
            Ok(received.into_iter().take(1).collect())
        }
    }
}
