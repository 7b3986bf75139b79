//! The VJP of a `checkpoint` region (JAX's `remat`): the forward pass keeps only the region's
//! results; the backward pass calls the region's own VJP program, which recomputes the region's
//! intermediate values from its operands. Memory traded for compute, as pipeline stages want.

use crate::params::Params;
use crate::trace::{Tensor, call_closed};

/// The cotangents of a `checkpoint`'s operands, recomputing its forward.
pub(super) fn checkpoint_vjp(
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let anchor = &y[0];
    let body_vjp = match params.jaxpr("checkpoint", "jaxpr").and_then(super::vjp) {
        Ok(b) => b,
        Err(e) => {
            let msg = format!("in the checkpointed region's VJP: {e}");
            return vec![Some(anchor.fail("checkpoint", msg)); x.len()];
        }
    };
    let cts = super::rules::cotangents_or_zeros(gs, y);
    let operands: Vec<&Tensor> = x.iter().chain(cts.iter()).collect();
    call_closed(&body_vjp, &operands)
        .into_iter()
        .zip(x)
        .map(|(ct, x)| x.dtype().is_float().then_some(ct))
        .collect()
}
