//! Derivatives of `cond` and `while`.
//!
//! - `cond`: its JVP is a `cond` of the branches' JVPs on the same index (taking the tangent
//!   results), its VJP a `cond` of the branches' VJPs; the index gets no cotangent.
//! - `while`: forward mode only, as in JAX. Its JVP is a `while` carrying primal and tangent
//!   carries side by side, the condition reading the primal ones; its VJP is an error saying to
//!   use `scan` / `fori_loop` with a static trip count (the number of steps is unknown until the
//!   loop has run, so no residuals can be stacked for it).

use super::rules::{cotangents_or_zeros, zeros_like};
use crate::aval::ShapedArray;
use crate::params::Params;
use crate::passes::inline_calls;
use crate::prim::{Prim, WhileParams, cond_branches, cond_params, while_params};
use crate::trace::{Tensor, call_closed, trace};

fn fail_all(anchor: &Tensor, prim: &str, message: String, n: usize) -> Vec<Option<Tensor>> {
    vec![Some(anchor.fail(prim, message)); n]
}

fn dense(x: &[Tensor], ts: &[Option<Tensor>]) -> Vec<Tensor> {
    x.iter()
        .zip(ts)
        .map(|(xi, ti)| ti.clone().unwrap_or_else(|| zeros_like(xi)))
        .collect()
}

/// The tangents of a `cond`'s results.
pub(super) fn cond_jvp(
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    ts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let branches = cond_branches(params).and_then(|bs| {
        bs.into_iter()
            .map(super::jvp)
            .collect::<crate::error::Result<Vec<_>>>()
    });
    let branches = match branches {
        Ok(b) => b,
        Err(e) => return fail_all(&y[0], "cond", format!("in a branch's JVP: {e}"), y.len()),
    };
    let tangents = dense(&x[1..], &ts[1..]);
    let operands: Vec<&Tensor> = x.iter().chain(&tangents).collect();
    Tensor::bind(Prim::Cond, cond_params(branches), &operands)
        .into_iter()
        .skip(y.len())
        .map(Some)
        .collect()
}

/// The cotangents of a `cond`'s operands.
pub(super) fn cond_vjp(
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let branches = cond_branches(params).and_then(|bs| {
        bs.into_iter()
            .map(super::vjp)
            .collect::<crate::error::Result<Vec<_>>>()
    });
    let branches = match branches {
        Ok(b) => b,
        Err(e) => return fail_all(&y[0], "cond", format!("in a branch's VJP: {e}"), x.len()),
    };
    let cts = cotangents_or_zeros(gs, y);
    let operands: Vec<&Tensor> = x.iter().chain(&cts).collect();
    let grads = Tensor::bind(Prim::Cond, cond_params(branches), &operands);
    std::iter::once(None)
        .chain(
            grads
                .into_iter()
                .zip(&x[1..])
                .map(|(g, xi)| xi.dtype().is_float().then_some(g)),
        )
        .collect()
}

/// The tangents of a `while`'s results.
pub(super) fn while_jvp(
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    ts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let p = match WhileParams::read(params) {
        Ok(p) => p,
        Err(e) => return fail_all(&y[0], "while", e.to_string(), y.len()),
    };
    let body_jvp = match super::jvp(p.body) {
        Ok(b) => b,
        Err(e) => return fail_all(&y[0], "while", format!("in the body's JVP: {e}"), y.len()),
    };
    let (ncc, nbc) = (p.cond_nconsts, p.body_nconsts);
    let nh = y.len();
    let tangents = dense(x, ts);
    let (cond_consts, rest) = x.split_at(ncc);
    let (body_consts, carry) = rest.split_at(nbc);
    let t_body = &tangents[ncc..ncc + nbc];
    let t_carry = &tangents[ncc + nbc..];
    let avals =
        |ts: &[&Tensor]| -> Vec<ShapedArray> { ts.iter().map(|t| t.aval().clone()).collect() };
    // cond': (cond_consts, carry, t_carry) -> cond(cond_consts, carry)
    let cond_in: Vec<&Tensor> = cond_consts.iter().chain(carry).chain(t_carry).collect();
    let cond = p.cond;
    let new_cond = trace(&avals(&cond_in), |a| {
        let refs: Vec<&Tensor> = a[..ncc + nh].iter().collect();
        call_closed(cond, &refs)
    });
    // body': (body_consts, t_body_consts, carry, t_carry) -> (carry', t_carry')
    let body_in: Vec<&Tensor> = body_consts
        .iter()
        .chain(t_body)
        .chain(carry)
        .chain(t_carry)
        .collect();
    let new_body = trace(&avals(&body_in), |a| {
        let (bc, rest) = a.split_at(nbc);
        let (tbc, rest) = rest.split_at(nbc);
        let (h, th) = rest.split_at(nh);
        let refs: Vec<&Tensor> = bc.iter().chain(h).chain(tbc).chain(th).collect();
        call_closed(&body_jvp, &refs)
    });
    let (new_cond, new_body) = match (new_cond, new_body) {
        (Ok(c), Ok(b)) => (inline_calls(&c), inline_calls(&b)),
        (Err(e), _) | (_, Err(e)) => {
            return fail_all(
                &y[0],
                "while",
                format!("tracing the JVP loop: {e}"),
                y.len(),
            );
        }
    };
    let operands: Vec<&Tensor> = cond_consts.iter().chain(body_in).collect();
    let params = while_params(new_body, 2 * nbc, new_cond, ncc);
    Tensor::bind(Prim::While, params, &operands)
        .into_iter()
        .skip(nh)
        .map(Some)
        .collect()
}

/// `while` has no VJP (as in JAX).
pub(super) fn while_vjp(x: &[Tensor], y: &[Tensor]) -> Vec<Option<Tensor>> {
    fail_all(
        &y[0],
        "while",
        "reverse-mode differentiation of a while loop is not supported (as in JAX: its trip \
         count is unknown until it has run); use scan or fori_loop with a static trip count"
            .into(),
        x.len(),
    )
}
