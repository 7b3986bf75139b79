//! Batching host callbacks, as JAX does. `pure_callback` follows its `vmap_method`:
//! `sequential` calls the callback once per batch element (a host loop, registered as a new
//! callback that wraps the old one), `expand_dims` calls it once on the operands with the batch
//! dimension in front (unbatched ones get a leading dimension of size 1), `broadcast_all` once on
//! operands all broadcast to the batch size; without a `vmap_method` it is refused, as JAX
//! refuses it. An unordered `io_callback` and a `debug_callback` are called once per element
//! (JAX maps them sequentially); an ordered `io_callback` is refused (JAX: "Cannot vmap ordered
//! IO callback").

use std::sync::Arc;

use super::{Batched, to_front};
use crate::array::Array;
use crate::aval::ShapedArray;
use crate::callback::{CallbackId, register};
use crate::prim::{CallbackOp, CallbackParams, Prim, VmapMethod, call_host_callback};
use crate::trace::Tensor;

/// Batches one callback equation; `out` are its unbatched result types.
pub(super) fn callback(
    prim: Prim,
    params: &crate::params::Params,
    args: &[Batched],
    size: i64,
    out: &[ShapedArray],
) -> Vec<Batched> {
    let fail = |message: String| -> Vec<Batched> {
        let t = args[0].0.fail(prim.name(), message);
        out.iter().map(|_| (t.clone(), None)).collect()
    };
    let Some(op) = prim.callback_op() else {
        return fail("is not a host callback".into());
    };
    let p = match CallbackParams::read(prim, op, params) {
        Ok(p) => p,
        Err(e) => return fail(e.to_string()),
    };
    let method = match op {
        CallbackOp::Pure => match p.vmap_method {
            Some(m) => m,
            None => {
                return fail(
                    "vmap of a pure_callback needs a vmap_method (sequential, expand_dims or \
                     broadcast_all), as in JAX; pass one to trace::pure_callback"
                        .into(),
                );
            }
        },
        CallbackOp::Io if p.ordered => {
            return fail(
                "cannot vmap an ordered io_callback (as in JAX); use ordered=false".into(),
            );
        }
        CallbackOp::Io | CallbackOp::Debug => VmapMethod::Sequential,
    };
    let batched_avals: Vec<ShapedArray> = p
        .result_avals
        .iter()
        .map(|a| {
            let mut shape = vec![size];
            shape.extend_from_slice(&a.shape);
            ShapedArray::new(a.dtype, &shape)
        })
        .collect();
    let (id, operands): (CallbackId, Vec<Tensor>) = match method {
        VmapMethod::Sequential => {
            let batched: Vec<bool> = args.iter().map(|a| a.1.is_some()).collect();
            let operands = args
                .iter()
                .map(|a| match a.1 {
                    Some(_) => to_front(a, size),
                    None => a.0.clone(),
                })
                .collect();
            let id = sequential(prim, p.id, batched, size, p.result_avals.clone());
            (id, operands)
        }
        VmapMethod::ExpandDims | VmapMethod::BroadcastAll => {
            let operands = args
                .iter()
                .map(|a| match (a.1, method) {
                    (Some(_), _) | (None, VmapMethod::BroadcastAll) => to_front(a, size),
                    (None, VmapMethod::ExpandDims | VmapMethod::Sequential) => {
                        let mut shape = vec![1];
                        shape.extend_from_slice(a.0.shape());
                        a.0.reshape(&shape)
                    }
                })
                .collect();
            (p.id, operands)
        }
    };
    let new = CallbackParams {
        id,
        result_avals: batched_avals,
        ..p
    };
    let refs: Vec<&Tensor> = operands.iter().collect();
    Tensor::bind(prim, new.to_params(op), &refs)
        .into_iter()
        .map(|t| (t, Some(0)))
        .collect()
}

/// Registers a callback that calls `inner` once per batch element: row `k` of each batched
/// operand (batch dimension in front), unbatched operands whole, results stacked.
fn sequential(
    prim: Prim,
    inner: CallbackId,
    batched: Vec<bool>,
    size: i64,
    result_avals: Vec<ShapedArray>,
) -> CallbackId {
    let name = prim.name();
    register(Arc::new(move |args: &[Array]| {
        let mut per_result: Vec<Vec<Array>> = vec![Vec::new(); result_avals.len()];
        for k in 0..size as usize {
            let row: Vec<Array> = args
                .iter()
                .zip(&batched)
                .map(|(a, &b)| if b { a.row(k) } else { Ok(a.clone()) })
                .collect::<crate::Result<_>>()
                .map_err(|e| e.to_string())?;
            let outs =
                call_host_callback(name, inner, &row, &result_avals).map_err(|e| e.to_string())?;
            for (acc, o) in per_result.iter_mut().zip(outs) {
                acc.push(o);
            }
        }
        per_result
            .iter()
            .zip(&result_avals)
            .map(|(rows, a)| Array::stack_rows(a.dtype, &a.shape, rows).map_err(|e| e.to_string()))
            .collect()
    }))
}
