//! Batching of `sort` and `top_k`: every operand gets the batch dimension in
//! front and the sorted dimension (`dimension`, `axis`) moves one further.

use super::{Batched, to_front, with_param};
use crate::params::{ParamValue, Params};
use crate::prim::{Prim, SortOp, SortParams, top_k_params};
use crate::trace::Tensor;

/// Batches one `sort` or `top_k` equation.
pub(super) fn sort(prim: Prim, params: &Params, args: &[Batched], size: i64) -> Vec<Batched> {
    let operands: Vec<Tensor> = args.iter().map(|a| to_front(a, size)).collect();
    let rank = operands[0].rank() - 1;
    let shifted = match prim.sort_op() {
        Some(SortOp::Sort) => SortParams::read(params, rank)
            .map(|p| with_param(params, "dimension", ParamValue::Int(p.dimension as i64 + 1))),
        Some(SortOp::TopK) => top_k_params(params, rank)
            .map(|(_, axis)| with_param(params, "axis", ParamValue::Int(axis as i64 + 1))),
        None => Ok(params.clone()),
    };
    let outs = match shifted {
        Ok(p) => Tensor::bind(prim, p, &operands.iter().collect::<Vec<_>>()),
        Err(e) => vec![operands[0].fail(prim.name(), e.to_string()); args.len().max(2)],
    };
    outs.into_iter().map(|t| (t, Some(0))).collect()
}
