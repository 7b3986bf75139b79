//! Identity-like and call primitives: `stop_gradient`, `copy`, `pipeline_enter_stage` (a stage
//! boundary marker, identity on values), `jit` (a nested call of a closed jaxpr) and `checkpoint`
//! (a nested call whose forward autodiff recomputes in the backward pass instead of saving its
//! intermediate values: JAX's `remat`).

use super::{Prim, arity};
use crate::array::Array;
use crate::aval::ShapedArray;
use crate::error::{Result, type_error};
use crate::params::Params;

pub(super) fn abstract_eval(
    prim: Prim,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    match prim {
        Prim::Jit | Prim::Checkpoint => {
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
        Prim::PipelineEnterStage => {
            params.int(prim.name(), "stage")?;
            Ok(inputs.to_vec())
        }
        _ => {
            arity(prim, inputs.len(), 1)?;
            Ok(inputs.to_vec())
        }
    }
}

pub(super) fn eval(
    prim: Prim,
    params: &Params,
    inputs: &[Array],
    _outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    match prim {
        Prim::Jit | Prim::Checkpoint => {
            crate::interp::eval_closed(params.jaxpr(prim.name(), "jaxpr")?, inputs)
        }
        _ => Ok(inputs.to_vec()),
    }
}
