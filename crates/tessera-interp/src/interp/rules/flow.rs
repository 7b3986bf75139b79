//! Evaluation rules of the `flow` family (moved from the core crate's `prim/flow.rs`).

use tessera_ir_core::array::Array;
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::error::Result;
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::{FlowOp, Prim};

pub(crate) fn eval(
    prim: Prim,
    op: FlowOp,
    params: &Params,
    inputs: &[Array],
    outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    match op {
        FlowOp::CustomJvp | FlowOp::CustomVjp => {
            crate::interp::eval_closed(params.jaxpr(prim.name(), "call_jaxpr")?, inputs)
        }
        FlowOp::Scan => super::scan::eval(params, inputs, outputs),
        FlowOp::Cond => super::branch::cond_eval(params, inputs),
        FlowOp::While => super::branch::while_eval(params, inputs),
    }
}
