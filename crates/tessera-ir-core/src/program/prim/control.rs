//! Identity-like and call primitives: `stop_gradient`, `copy`, `pipeline_enter_stage` (a stage
//! boundary marker, identity on values), `jit` (a nested call of a closed jaxpr) and `checkpoint`
//! (a nested call whose forward autodiff recomputes in the backward pass instead of saving its
//! intermediate values: JAX's `remat`), `optimization_barrier` (identity on any number of values
//! that the compiler keeps together: what stops it merging a recomputation with its original),
//! `sharding_constraint` (identity on values; its
//! rules live in `constraint.rs`) and the `*_done` ends of asynchronous collectives (identity
//! on values; see `pending.rs`).

use super::{ControlOp, Prim, arity};
use crate::aval::ShapedArray;
use crate::error::{Result, type_error};
use crate::program::params::Params;

pub(super) fn abstract_eval(
    prim: Prim,
    op: ControlOp,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    match op {
        ControlOp::Jit | ControlOp::Checkpoint => {
            let inner = params.jaxpr(prim.name(), "jaxpr")?;
            let expected = inner.jaxpr.in_avals();
            if expected.len() != inputs.len()
                || expected.iter().zip(inputs).any(|(e, a)| !e.same_type(a))
            {
                let shown = |v: &[ShapedArray]| {
                    v.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(type_error(
                    prim.name(),
                    format!(
                        "the nested jaxpr takes ({}) but is called with ({})",
                        shown(&expected),
                        shown(inputs)
                    ),
                ));
            }
            Ok(inner.jaxpr.out_avals())
        }
        ControlOp::PipelineEnterStage => {
            params.int(prim.name(), "stage")?;
            Ok(inputs.to_vec())
        }
        ControlOp::OptimizationBarrier => Ok(inputs.to_vec()),
        ControlOp::StopGradient | ControlOp::Copy | ControlOp::AsyncDone => {
            arity(prim, inputs.len(), 1)?;
            Ok(inputs.to_vec())
        }
        // The destination sharding is not printed: the result keeps the operand's dimensions
        // and varying axes, and is no longer reduced or unreduced over any axis.
        ControlOp::Reshard => {
            arity(prim, inputs.len(), 1)?;
            let mut out = inputs[0].clone();
            out.set_reduced_unreduced(Default::default(), Default::default());
            Ok(vec![out])
        }
        ControlOp::ShardingConstraint => super::constraint::abstract_eval(params, inputs),
    }
}
