//! The VJP of a `checkpoint` region (JAX's `remat`): the forward pass keeps only the region's
//! results; the backward pass calls the region's own VJP program, which recomputes the region's
//! intermediate values from its operands. Memory traded for compute, as pipeline stages want.
//! A nested `jit` that inlining keeps (one with constants) is differentiated the same way: its
//! VJP program (constants included) is called with the operands and cotangents.

use crate::params::Params;
use crate::prim::Prim;
use crate::trace::{Tensor, call_closed};

/// The cotangents of a `checkpoint`'s or nested `jit`'s operands, recomputing its forward.
pub(super) fn call_vjp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let Some(anchor) = y.first() else {
        return vec![None; x.len()];
    };
    let body_vjp = match params.jaxpr(prim.name(), "jaxpr").and_then(super::vjp) {
        Ok(b) => b,
        Err(e) => {
            let msg = format!("in the VJP of the nested {}: {e}", prim.name());
            return vec![Some(anchor.fail(prim.name(), msg)); x.len()];
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
