//! The derivatives of `dot_product_attention` and its backward. The forward's VJP is the
//! backward operation itself (what cuDNN's fused backward computes on a GPU) unless the
//! statistics result has a cotangent; the JVPs, and the backward's own VJP (second order),
//! differentiate the decomposition
//! (`programs::attention_program`). The mask, boolean, has no derivative.

use super::custom::{body_jvp, body_vjp};
use super::rules::cotangents_or_zeros;
use crate::params::Params;
use crate::prim::{AttentionOp, Prim};
use crate::programs::attention_program;
use crate::trace::Tensor;

fn decomposition(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
) -> Result<tessera_ir_core::jaxpr::ClosedJaxpr, String> {
    let avals: Vec<_> = x.iter().map(|t| t.aval().clone()).collect();
    attention_program(AttentionOp::of(prim), params, &avals).map_err(|e| e.to_string())
}

/// The results' tangents: the decomposition's JVP (a tangent of the mask is never read).
pub(super) fn jvp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    ts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    match decomposition(prim, params, x) {
        Ok(program) => body_jvp(prim, &program, x, ts, y),
        Err(e) => vec![Some(y[0].fail(prim.name(), e)); y.len()],
    }
}

/// The operands' cotangents: the backward operation for the forward, the decomposition's VJP
/// for the backward.
pub(super) fn vjp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    // The backward operation gives the cotangents of the values' cotangent alone: where the
    // statistics have one too (a program reading them), or for the backward itself, the
    // decomposition is differentiated.
    let stats_read = gs.get(1).is_some_and(Option::is_some);
    if prim == Prim::DotProductAttentionBwd || stats_read {
        return match decomposition(prim, params, x) {
            Ok(program) => body_vjp(prim, &program, x, y, gs)
                .into_iter()
                .zip(x)
                .map(|(ct, x)| ct.filter(|_| x.dtype().is_float()))
                .collect(),
            Err(e) => vec![Some(y[0].fail(prim.name(), e)); x.len()],
        };
    }
    let g = cotangents_or_zeros(gs, y);
    let mut operands: Vec<&Tensor> = x.iter().collect();
    operands.extend([&y[0], &y[1], &g[0]]);
    let mut cts: Vec<Option<Tensor>> =
        Tensor::bind(Prim::DotProductAttentionBwd, params.clone(), &operands)
            .into_iter()
            .map(Some)
            .collect();
    // The mask's.
    cts.resize(x.len(), None);
    cts
}
