//! Batching of control flow and custom derivatives (issue 20): a custom call is the same call
//! of its batched body, with its rule jaxprs batched alike. Every operand and result is batched
//! in front (an unbatched operand is broadcast): a backward rule gives cotangents of the
//! operands' types, which must then be the batched types.

use super::{Batched, to_front, with_param};
use crate::params::{ParamValue, Params};
use crate::prim::Prim;
use crate::trace::Tensor;

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
