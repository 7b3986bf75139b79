//! Evaluation rules of the `control` family (moved from the core crate's `prim/control.rs`).

use tessera_ir_core::array::Array;
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::error::Result;
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::{ControlOp, Prim};

pub(crate) fn eval(
    prim: Prim,
    op: ControlOp,
    params: &Params,
    inputs: &[Array],
    _outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    match op {
        ControlOp::Jit | ControlOp::Checkpoint => {
            crate::interp::eval_closed(params.jaxpr(prim.name(), "jaxpr")?, inputs)
        }
        ControlOp::StopGradient
        | ControlOp::Copy
        | ControlOp::OptimizationBarrier
        | ControlOp::Reshard
        | ControlOp::AsyncDone
        | ControlOp::PipelineEnterStage
        | ControlOp::ShardingConstraint => Ok(inputs.to_vec()),
    }
}
