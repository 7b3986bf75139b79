//! Batching of control flow and custom derivatives (issue 20).
//!
//! - A custom call is the same call of its batched body, with its rule jaxprs batched alike.
//!   Every operand and result is batched in front (an unbatched operand is broadcast): a
//!   backward rule gives cotangents of the operands' types, which must then be the batched types.
//! - `scan` is the same scan of its batched body: batched constants in front (unbatched ones
//!   stay shared), every carry batched in front (an unbatched initial carry is broadcast, since a
//!   step may make it batched), batched `xs` with their batch dimension second (after the scanned
//!   one); the stacked results come out with their batch dimension second.

use super::{Batched, move_axis, to_front, with_param};
use crate::params::{ParamValue, Params};
use crate::prim::{Prim, ScanParams};
use crate::trace::Tensor;

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
        .0
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
