//! Derivatives of `custom_jvp_call` and `custom_vjp_call`: the user's rule where the call
//! carries one, else the derivative of the body (calls parsed from jaxpr text, whose rules JAX
//! prints as Python functions).
//!
//! - JVP: a JVP rule is called on the primals and tangents; a custom VJP has no forward mode (as
//!   in JAX: differentiate it in reverse mode).
//! - VJP: a custom VJP's forward rule is run again for its residuals and its backward rule gives
//!   the cotangents; a JVP rule is transposed (its tangent results are linear in the tangents:
//!   the VJP of the rule with respect to the tangents, taken at zero tangents).

use super::rules::{cotangents_or_zeros, zeros_like};
use crate::jaxpr::ClosedJaxpr;
use crate::params::Params;
use crate::prim::{CustomRule, Prim, call_name, custom_rule};
use crate::trace::{Tensor, call_closed, trace};

fn failed(anchor: &Tensor, prim: Prim, message: String, n: usize) -> Vec<Option<Tensor>> {
    vec![Some(anchor.fail(prim.name(), message)); n]
}

/// Tangents with zeros for the symbolic ones.
fn dense(x: &[Tensor], ts: &[Option<Tensor>]) -> Vec<Tensor> {
    x.iter()
        .zip(ts)
        .map(|(xi, ti)| ti.clone().unwrap_or_else(|| zeros_like(xi)))
        .collect()
}

/// The tangents of the results of a call of `body` (differentiated through).
pub(super) fn body_jvp(
    prim: Prim,
    body: &ClosedJaxpr,
    x: &[Tensor],
    ts: &[Option<Tensor>],
    y: &[Tensor],
) -> Vec<Option<Tensor>> {
    let inner = match super::jvp(body) {
        Ok(inner) => inner,
        Err(e) => return failed(&y[0], prim, format!("in the JVP of its body: {e}"), y.len()),
    };
    let tangents = dense(x, ts);
    let operands: Vec<&Tensor> = x.iter().chain(&tangents).collect();
    let outs = call_closed(&inner, &operands);
    outs.into_iter().skip(y.len()).map(Some).collect()
}

/// The cotangents of the operands of a call of `body` (differentiated through).
pub(super) fn body_vjp(
    prim: Prim,
    body: &ClosedJaxpr,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let inner = match super::vjp(body) {
        Ok(inner) => inner,
        Err(e) => return failed(&y[0], prim, format!("in the VJP of its body: {e}"), x.len()),
    };
    let cts = cotangents_or_zeros(gs, y);
    let operands: Vec<&Tensor> = x.iter().chain(&cts).collect();
    keep_float(x, call_closed(&inner, &operands))
}

fn keep_float(x: &[Tensor], cts: Vec<Tensor>) -> Vec<Option<Tensor>> {
    x.iter()
        .zip(cts)
        .map(|(xi, ct)| xi.dtype().is_float().then_some(ct))
        .collect()
}

/// The JVP rule of `custom_jvp_call` and `custom_vjp_call`.
pub(super) fn custom_jvp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    ts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let rule = custom_rule(prim, params);
    let body = params.jaxpr(prim.name(), "call_jaxpr");
    match (rule, body) {
        (Err(e), _) | (_, Err(e)) => failed(&y[0], prim, e.to_string(), y.len()),
        (Ok(CustomRule::Body), Ok(body)) => body_jvp(prim, body, x, ts, y),
        (Ok(CustomRule::Jvp(rule)), Ok(_)) => {
            let tangents = dense(x, ts);
            let operands: Vec<&Tensor> = x.iter().chain(&tangents).collect();
            call_closed(rule, &operands)
                .into_iter()
                .skip(y.len())
                .map(Some)
                .collect()
        }
        (Ok(CustomRule::Vjp { .. }), Ok(_)) => failed(
            &y[0],
            prim,
            format!(
                "`{}` has a custom VJP rule, which gives no forward-mode derivative (as in \
                 JAX); differentiate it in reverse mode (vjp, grad)",
                call_name(params)
            ),
            y.len(),
        ),
    }
}

/// The VJP rule of `custom_jvp_call` and `custom_vjp_call`.
pub(super) fn custom_vjp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let rule = custom_rule(prim, params);
    let body = params.jaxpr(prim.name(), "call_jaxpr");
    match (rule, body) {
        (Err(e), _) | (_, Err(e)) => failed(&y[0], prim, e.to_string(), x.len()),
        (Ok(CustomRule::Body), Ok(body)) => body_vjp(prim, body, x, y, gs),
        (Ok(CustomRule::Vjp { fwd, bwd }), Ok(_)) => {
            let xs: Vec<&Tensor> = x.iter().collect();
            let residuals = call_closed(fwd, &xs).split_off(y.len());
            let cts = cotangents_or_zeros(gs, y);
            let operands: Vec<&Tensor> = residuals.iter().chain(&cts).collect();
            keep_float(x, call_closed(bwd, &operands))
        }
        (Ok(CustomRule::Jvp(rule)), Ok(_)) => transposed_jvp_rule(prim, rule, x, y, gs),
    }
}

/// `custom_jvp_call`'s VJP from its JVP rule: the rule's tangent results as a program of
/// `(x..., t...)`, differentiated in reverse at `t = 0`; the cotangents of `t` are those of `x`.
fn transposed_jvp_rule(
    prim: Prim,
    rule: &ClosedJaxpr,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let n_out = y.len();
    let tangent_part = trace(&rule.jaxpr.in_avals(), |a| {
        let operands: Vec<&Tensor> = a.iter().collect();
        call_closed(rule, &operands).split_off(n_out)
    })
    .and_then(|p| super::vjp(&p));
    let backward = match tangent_part {
        Ok(b) => b,
        Err(e) => {
            return failed(
                &y[0],
                prim,
                format!("transposing the JVP rule: {e}"),
                x.len(),
            );
        }
    };
    let zeros: Vec<Tensor> = x.iter().map(zeros_like).collect();
    let cts = cotangents_or_zeros(gs, y);
    let operands: Vec<&Tensor> = x.iter().chain(&zeros).chain(&cts).collect();
    let all = call_closed(&backward, &operands);
    keep_float(x, all.into_iter().skip(x.len()).collect())
}
