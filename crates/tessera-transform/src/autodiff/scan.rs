//! Derivatives of `scan`, each a scan again, so loops stay loops (module size and compile time
//! do not grow with the trip count):
//!
//! - JVP: one scan of the body's JVP, carrying primal and tangent carries side by side (its
//!   constants are the primal and tangent constants, its scanned operands the primal and tangent
//!   `xs`); its tangent results are the equation's tangents.
//! - VJP: the body is split into a forward with residuals and a backward from them
//!   (`vjp_split`, JAX's linearize and transpose); a forward scan of the first stacks each step's
//!   residuals, then a scan in the opposite direction runs the backward on each step's
//!   residuals, carrying the carries' cotangents and the constants' summed cotangents, and
//!   stacking the `xs`' cotangents.

use super::rules::{add_any, cotangents_or_zeros, zeros_like};
use crate::aval::ShapedArray;
use crate::params::Params;
use crate::prim::{Prim, ScanParams, scan_params, unstacked};
use crate::trace::{Tensor, call_closed, trace};

fn fail_all(anchor: &Tensor, message: String, n: usize) -> Vec<Option<Tensor>> {
    vec![Some(anchor.fail("scan", message)); n]
}

fn avals(ts: &[Tensor]) -> Vec<ShapedArray> {
    ts.iter().map(|t| t.aval().clone()).collect()
}

/// The tangents of a `scan`'s results.
pub(super) fn scan_jvp(
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    ts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let p = match ScanParams::read(params) {
        Ok(p) => p,
        Err(e) => return fail_all(&y[0], e.to_string(), y.len()),
    };
    let body_jvp = match super::jvp(p.body) {
        Ok(b) => b,
        Err(e) => return fail_all(&y[0], format!("in the JVP of the body: {e}"), y.len()),
    };
    let (nc, nh) = (p.num_consts, p.num_carry);
    let tangents: Vec<Tensor> = x
        .iter()
        .zip(ts)
        .map(|(xi, ti)| ti.clone().unwrap_or_else(|| zeros_like(xi)))
        .collect();
    // Operands laid out as (consts, t_consts, carry, t_carry, xs, t_xs).
    let mut operands: Vec<Tensor> = Vec::new();
    for (lo, hi) in [(0, nc), (nc, nc + nh), (nc + nh, x.len())] {
        operands.extend_from_slice(&x[lo..hi]);
        operands.extend_from_slice(&tangents[lo..hi]);
    }
    let mut body_avals = avals(&operands[..2 * (nc + nh)]);
    body_avals.extend(
        operands[2 * (nc + nh)..]
            .iter()
            .map(|t| unstacked(t.aval())),
    );
    let nx = x.len() - nc - nh;
    let n_out = p.body.jaxpr.outvars.len();
    let body = trace(&body_avals, |a| {
        // Back to the JVP's order (primals, then tangents).
        let (c, tc) = (&a[..nc], &a[nc..2 * nc]);
        let (h, th) = (&a[2 * nc..2 * nc + nh], &a[2 * nc + nh..2 * (nc + nh)]);
        let rest = &a[2 * (nc + nh)..];
        let (xs, txs) = (&rest[..nx], &rest[nx..]);
        let args: Vec<&Tensor> = c
            .iter()
            .chain(h)
            .chain(xs)
            .chain(tc)
            .chain(th)
            .chain(txs)
            .collect();
        let outs = call_closed(&body_jvp, &args);
        let (primal, tangent) = outs.split_at(n_out);
        // (carry, t_carry, ys, t_ys)
        let mut r = primal[..nh].to_vec();
        r.extend_from_slice(&tangent[..nh]);
        r.extend_from_slice(&primal[nh..]);
        r.extend_from_slice(&tangent[nh..]);
        r
    });
    let body = match body {
        Ok(b) => crate::passes::inline_calls(&b),
        Err(e) => return fail_all(&y[0], format!("tracing the JVP body: {e}"), y.len()),
    };
    let refs: Vec<&Tensor> = operands.iter().collect();
    let params = scan_params(body, p.length, p.reverse, 2 * nc, 2 * nh);
    let outs = Tensor::bind(Prim::Scan, params, &refs);
    let ny = y.len() - nh;
    let mut dys: Vec<Option<Tensor>> = outs[nh..2 * nh].iter().cloned().map(Some).collect();
    dys.extend(outs[2 * nh + ny..].iter().cloned().map(Some));
    dys
}

/// The cotangents of a `scan`'s operands.
pub(super) fn scan_vjp(
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let p = match ScanParams::read(params) {
        Ok(p) => p,
        Err(e) => return fail_all(&y[0], e.to_string(), x.len()),
    };
    // The body's forward with residuals and its backward from them (JAX's linearize and
    // transpose of the body).
    let split = match super::vjp_split(p.body) {
        Ok(s) => s,
        Err(e) => return fail_all(&y[0], format!("in the VJP of the body: {e}"), x.len()),
    };
    let (nc, nh) = (p.num_consts, p.num_carry);
    let n_out = p.body.jaxpr.outvars.len();
    // Forward: the same loop, also stacking each step's residuals.
    let refs: Vec<&Tensor> = x.iter().collect();
    let fwd = scan_params(split.forward.clone(), p.length, p.reverse, nc, nh);
    let residuals = Tensor::bind(Prim::Scan, fwd, &refs).split_off(n_out);
    // Backward, in the other direction: (ct_consts_acc, ct_carry; residuals, ct_ys).
    let cts = cotangents_or_zeros(gs, y);
    let (ct_final, ct_ys) = cts.split_at(nh);
    let mut operands: Vec<Tensor> = x[..nc].iter().map(zeros_like).collect();
    operands.extend_from_slice(ct_final);
    operands.extend(residuals);
    operands.extend_from_slice(ct_ys);
    let mut bwd_avals = avals(&operands[..nc + nh]);
    bwd_avals.extend(operands[nc + nh..].iter().map(|t| unstacked(t.aval())));
    let backward = &split.backward;
    let n_res = split.num_residuals;
    let bwd = trace(&bwd_avals, |a| {
        let (acc, rest) = a.split_at(nc);
        let (ct_h, rest) = rest.split_at(nh);
        let (res, ct_y) = rest.split_at(n_res);
        let args: Vec<&Tensor> = res.iter().chain(ct_h).chain(ct_y).collect();
        let g = call_closed(backward, &args);
        let (ct_c, rest) = g.split_at(nc);
        let mut outs: Vec<Tensor> = acc.iter().zip(ct_c).map(|(a, b)| add_any(a, b)).collect();
        outs.extend_from_slice(rest);
        outs
    });
    let bwd = match bwd {
        Ok(b) => crate::passes::inline_calls(&b),
        Err(e) => return fail_all(&y[0], format!("tracing the backward scan: {e}"), x.len()),
    };
    let refs: Vec<&Tensor> = operands.iter().collect();
    let params = scan_params(bwd, p.length, !p.reverse, 0, nc + nh);
    let grads = Tensor::bind(Prim::Scan, params, &refs);
    grads
        .into_iter()
        .zip(x)
        .map(|(g, xi)| xi.dtype().is_float().then_some(g))
        .collect()
}
