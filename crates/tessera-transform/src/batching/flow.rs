//! Batching of control flow and custom derivatives.
//!
//! - A custom call is the same call of its batched body, with its rule jaxprs batched alike.
//!   Every operand and result is batched in front (an unbatched operand is broadcast): a
//!   backward rule gives cotangents of the operands' types, which must then be the batched types.
//! - `scan` is the same scan of its batched body: batched constants in front (unbatched ones
//!   stay shared), every carry batched in front (an unbatched initial carry is broadcast, since a
//!   step may make it batched), batched `xs` with their batch dimension second (after the scanned
//!   one); the stacked results come out with their batch dimension second.
//! - `cond` with an unbatched index is the same `cond` of its batched branches; with a batched
//!   index every branch runs (batched) and each result is selected per batch element
//!   (`select_n` on the index, out-of-range indices taking the last branch), as JAX does.
//! - `while` runs while the condition holds for any batch element, with every carry batched; a
//!   step updates only the elements whose condition holds (`select_n`), as JAX does for a
//!   batched predicate (an unbatched one is the same loop).

use super::{Batched, move_axis, to_front, with_param};
use crate::dtype::DType;
use crate::params::{ParamValue, Params};
use crate::passes::inline_calls;
use crate::prim::{Prim, ScanParams, WhileParams, cond_branches, cond_params, while_params};
use crate::trace::{Tensor, call_closed, trace, where_};

/// Batches `scan`.
pub(super) fn scan(params: &Params, args: &[Batched], size: i64, results: usize) -> Vec<Batched> {
    let anchor = &args[0].0;
    let fail = |msg: String| vec![(anchor.fail("scan", msg), None); results];
    let p = match ScanParams::read(params) {
        Ok(p) => p,
        Err(e) => return fail(e.to_string()),
    };
    let (nc, nh) = (p.num_consts, p.num_carry);
    let mut operands = Vec::new();
    let mut in_axes = Vec::new();
    for (k, a) in args.iter().enumerate() {
        let (t, ax) = match (k < nc, k < nc + nh, a.1) {
            (true, _, None) => (a.0.clone(), None),
            (false, true, _) | (true, _, Some(_)) => (to_front(a, size), Some(0)),
            (false, false, None) => (a.0.clone(), None),
            (false, false, Some(_)) => (move_axis(&to_front(a, size), 0, 1), Some(0)),
        };
        operands.push(t);
        in_axes.push(ax);
    }
    let outs = vec![0; p.body.jaxpr.outvars.len()];
    let body = match super::vmap(p.body, &in_axes, &outs, size) {
        Ok(b) => b,
        Err(e) => return fail(format!("batching the body: {e}")),
    };
    let params = with_param(params, "jaxpr", ParamValue::Jaxpr(Box::new(body)));
    let refs: Vec<&Tensor> = operands.iter().collect();
    Tensor::bind(Prim::Scan, params, &refs)
        .into_iter()
        .enumerate()
        .map(|(k, t)| (t, Some(usize::from(k >= nh))))
        .collect()
}

/// Batches `custom_jvp_call` / `custom_vjp_call`.
pub(super) fn custom_call(
    prim: Prim,
    params: &Params,
    args: &[Batched],
    size: i64,
    results: usize,
) -> Vec<Batched> {
    let anchor = &args[0].0;
    let operands: Vec<Tensor> = args.iter().map(|a| to_front(a, size)).collect();
    let mut params = params.clone();
    let jaxprs: Vec<(String, ParamValue)> = params
        .entries()
        .iter()
        .filter(|(_, v)| matches!(v, ParamValue::Jaxpr(_)))
        .cloned()
        .collect();
    for (name, value) in jaxprs {
        let ParamValue::Jaxpr(j) = value else {
            continue;
        };
        let n_in = j.jaxpr.invars.len();
        let axes = vec![Some(0); n_in];
        let outs = vec![0; j.jaxpr.outvars.len()];
        match super::vmap(&j, &axes, &outs, size) {
            Ok(b) => params = with_param(&params, &name, ParamValue::Jaxpr(Box::new(b))),
            Err(e) => {
                let msg = format!("batching `{name}`: {e}");
                return vec![(anchor.fail(prim.name(), msg), None); results];
            }
        }
    }
    let refs: Vec<&Tensor> = operands.iter().collect();
    Tensor::bind(prim, params, &refs)
        .into_iter()
        .map(|t| (t, Some(0)))
        .collect()
}

fn fail_results(anchor: &Tensor, prim: &str, message: String, n: usize) -> Vec<Batched> {
    vec![(anchor.fail(prim, message), None); n]
}

/// Batches `cond`.
pub(super) fn cond(params: &Params, args: &[Batched], size: i64, results: usize) -> Vec<Batched> {
    let anchor = &args[0].0;
    let branches = match cond_branches(params) {
        Ok(b) => b,
        Err(e) => return fail_results(anchor, "cond", e.to_string(), results),
    };
    let (index, rest) = args.split_first().unwrap_or((&args[0], &[]));
    let mut operands = Vec::new();
    let mut in_axes = Vec::new();
    for a in rest {
        match a.1 {
            Some(_) => {
                operands.push(to_front(a, size));
                in_axes.push(Some(0));
            }
            None => {
                operands.push(a.0.clone());
                in_axes.push(None);
            }
        }
    }
    let batched = branches
        .iter()
        .map(|b| super::vmap(b, &in_axes, &vec![0; results], size))
        .collect::<crate::error::Result<Vec<_>>>();
    let batched = match batched {
        Ok(b) => b,
        Err(e) => return fail_results(anchor, "cond", format!("batching a branch: {e}"), results),
    };
    let refs: Vec<&Tensor> = operands.iter().collect();
    let Some(_) = index.1 else {
        let mut all = vec![&index.0];
        all.extend(refs);
        return Tensor::bind(Prim::Cond, cond_params(batched), &all)
            .into_iter()
            .map(|t| (t, Some(0)))
            .collect();
    };
    let n = batched.len();
    let idx = to_front(index, size).astype(DType::I32);
    let last = idx.full_like_scalar((n - 1) as f64);
    let in_range = where_(&idx.ge(&idx.full_like_scalar(0.0)), &idx, &last);
    let idx = where_(
        &in_range.lt(&idx.full_like_scalar(n as f64)),
        &in_range,
        &last,
    );
    let outs: Vec<Vec<Tensor>> = batched.iter().map(|b| call_closed(b, &refs)).collect();
    (0..results)
        .map(|r| {
            let cases: Vec<&Tensor> = outs.iter().map(|o| &o[r]).collect();
            let which = idx.broadcast_in_dim(cases[0].shape(), &[0]);
            let mut ops = vec![&which];
            ops.extend(cases);
            (Tensor::bind1(Prim::SelectN, Params::new(), &ops), Some(0))
        })
        .collect()
}

/// Batches `while`.
pub(super) fn while_loop(
    params: &Params,
    args: &[Batched],
    size: i64,
    results: usize,
) -> Vec<Batched> {
    let anchor = &args[0].0;
    let p = match WhileParams::read(params) {
        Ok(p) => p,
        Err(e) => return fail_results(anchor, "while", e.to_string(), results),
    };
    let nc = p.num_consts();
    let operands: Vec<Tensor> = args
        .iter()
        .enumerate()
        .map(|(k, a)| {
            if k < nc && a.1.is_none() {
                a.0.clone()
            } else {
                to_front(a, size)
            }
        })
        .collect();
    let axes: Vec<Option<usize>> = args
        .iter()
        .enumerate()
        .map(|(k, a)| (k >= nc || a.1.is_some()).then_some(0))
        .collect();
    let (cond_axes, rest) = axes.split_at(p.cond_nconsts);
    let (body_axes, carry_axes) = rest.split_at(p.body_nconsts);
    let cond_in: Vec<Option<usize>> = cond_axes.iter().chain(carry_axes).copied().collect();
    let body_in: Vec<Option<usize>> = body_axes.iter().chain(carry_axes).copied().collect();
    let cond = super::vmap(p.cond, &cond_in, &[0], size);
    let body = super::vmap(p.body, &body_in, &vec![0; results], size);
    let (cond, body) = match (cond, body) {
        (Ok(c), Ok(b)) => (c, b),
        (Err(e), _) | (_, Err(e)) => {
            return fail_results(anchor, "while", format!("batching the loop: {e}"), results);
        }
    };
    let avals = |ts: &[Tensor]| -> Vec<crate::aval::ShapedArray> {
        ts.iter().map(|t| t.aval().clone()).collect()
    };
    let (cond_consts, rest) = operands.split_at(p.cond_nconsts);
    let (body_consts, carry) = rest.split_at(p.body_nconsts);
    let ncc = p.cond_nconsts;
    // The loop: (cond_consts; cond_consts, body_consts, carry); it goes on while any holds.
    let any_cond_in: Vec<Tensor> = cond_consts.iter().chain(carry).cloned().collect();
    let any = trace(&avals(&any_cond_in), |a| {
        let refs: Vec<&Tensor> = a.iter().collect();
        let go = call_closed(&cond, &refs).remove(0);
        let axes = Params::new().with("axes", ParamValue::ints(&[0]));
        vec![Tensor::bind1(Prim::ReduceOr, axes, &[&go])]
    });
    let step_in: Vec<Tensor> = cond_consts
        .iter()
        .chain(body_consts)
        .chain(carry)
        .cloned()
        .collect();
    let nbc = p.body_nconsts;
    let step = trace(&avals(&step_in), |a| {
        let (cc, rest) = a.split_at(ncc);
        let (bc, h) = rest.split_at(nbc);
        let cond_refs: Vec<&Tensor> = cc.iter().chain(h).collect();
        let go = call_closed(&cond, &cond_refs).remove(0);
        let body_refs: Vec<&Tensor> = bc.iter().chain(h).collect();
        let next = call_closed(&body, &body_refs);
        next.iter()
            .zip(h)
            .map(|(new, old)| {
                let which = go.broadcast_in_dim(new.shape(), &[0]);
                Tensor::bind1(Prim::SelectN, Params::new(), &[&which, old, new])
            })
            .collect()
    });
    let (any, step) = match (any, step) {
        (Ok(a), Ok(s)) => (inline_calls(&a), inline_calls(&s)),
        (Err(e), _) | (_, Err(e)) => {
            return fail_results(anchor, "while", format!("batching the loop: {e}"), results);
        }
    };
    let mut all: Vec<&Tensor> = cond_consts.iter().collect();
    all.extend(step_in.iter());
    Tensor::bind(Prim::While, while_params(step, ncc + nbc, any, ncc), &all)
        .into_iter()
        .map(|t| (t, Some(0)))
        .collect()
}
