//! Derivatives of primitives that JAX defines through another program: the JVP (or VJP) of a
//! primitive is that of its expansion program, called on the operands (and tangents or
//! cotangents). Used by the cumulative reductions (`cumprod`, `cummax`, `cummin`,
//! `cumlogsumexp`: JAX differentiates its `associative_scan`).

use super::rules::{cotangents_or_zeros, zeros_like};
use crate::error::Result;
use crate::jaxpr::ClosedJaxpr;
use crate::params::Params;
use crate::prim::Prim;
use crate::programs::cumulative_program;
use crate::trace::{Tensor, call_closed};

/// The expansion program of a cumulative primitive for operand `x`.
fn cumulative(prim: Prim, params: &Params, x: &Tensor) -> Result<ClosedJaxpr> {
    let op = match prim.reduction() {
        Some(crate::prim::ReductionOp::Cumulative(op)) => op,
        Some(_) | None => {
            return Err(crate::error::type_error(
                prim.name(),
                "is not a cumulative reduction",
            ));
        }
    };
    cumulative_program(op, params, x.aval())
}

/// The tangents of the results of `program(x)` along `ts`: its JVP program, called.
pub(super) fn program_jvp(
    prim: Prim,
    program: Result<ClosedJaxpr>,
    x: &[Tensor],
    ts: &[Option<Tensor>],
    y: &[Tensor],
) -> Vec<Option<Tensor>> {
    if ts.iter().all(Option::is_none) {
        return vec![None; y.len()];
    }
    let inner = match program.and_then(|p| super::jvp::jvp(&p)) {
        Ok(inner) => inner,
        Err(e) => return vec![Some(y[0].fail(prim.name(), format!("in its JVP: {e}"))); y.len()],
    };
    let tangents: Vec<Tensor> = x
        .iter()
        .zip(ts)
        .map(|(xi, ti)| ti.clone().unwrap_or_else(|| zeros_like(xi)))
        .collect();
    let operands: Vec<&Tensor> = x.iter().chain(tangents.iter()).collect();
    call_closed(&inner, &operands)
        .into_iter()
        .skip(y.len())
        .map(Some)
        .collect()
}

/// The cotangents of the operands of `program(x)`: its VJP program, called.
pub(super) fn program_vjp(
    prim: Prim,
    program: Result<ClosedJaxpr>,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let backward = match program.and_then(|p| super::vjp(&p)) {
        Ok(b) => b,
        Err(e) => return vec![Some(y[0].fail(prim.name(), format!("in its VJP: {e}"))); x.len()],
    };
    let cts = cotangents_or_zeros(gs, y);
    let operands: Vec<&Tensor> = x.iter().chain(cts.iter()).collect();
    call_closed(&backward, &operands)
        .into_iter()
        .zip(x)
        .map(|(ct, x)| x.dtype().is_float().then_some(ct))
        .collect()
}

/// JVP of a cumulative reduction (JAX: the JVP of its associative scan).
pub(super) fn cumulative_jvp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    ts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    program_jvp(prim, cumulative(prim, params, &x[0]), x, ts, y)
}

/// VJP of a cumulative reduction (the transpose of its JVP, as in JAX).
pub(super) fn cumulative_vjp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    program_vjp(prim, cumulative(prim, params, &x[0]), x, y, gs)
}
