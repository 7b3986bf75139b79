//! Calls and markers: `jit` (a nested jaxpr) and `pipeline_enter_stage` (identity).

use super::{Primitive, TypeError, type_err};
use crate::interp::{Array, EvalError, eval_closed, prim_err};
use crate::types::ShapedArray;

/// The shape rule: a call returns its body's output avals; the marker returns its operands'.
pub fn shape_rule(prim: &Primitive, ins: &[ShapedArray]) -> Result<Vec<ShapedArray>, TypeError> {
    match prim {
        Primitive::Jit { jaxpr, .. } => {
            let want = jaxpr.jaxpr.in_avals();
            if want.len() != ins.len() || want.iter().zip(ins).any(|(w, a)| !w.same_type(a)) {
                let w: Vec<String> = want.iter().map(|a| a.to_string()).collect();
                return Err(type_err(
                    prim,
                    ins,
                    format!("the body takes ({})", w.join(", ")),
                ));
            }
            Ok(jaxpr.jaxpr.out_avals())
        }
        Primitive::PipelineEnterStage { .. } => Ok(ins.to_vec()),
        _ => Err(type_err(prim, ins, "not a call".into())),
    }
}

/// Evaluates a call by interpreting its body; the marker passes its operands through.
pub fn eval(prim: &Primitive, args: &[Array]) -> Result<Vec<Array>, EvalError> {
    match prim {
        Primitive::Jit { jaxpr, .. } => eval_closed(jaxpr, args),
        Primitive::PipelineEnterStage { .. } => Ok(args.to_vec()),
        _ => Err(prim_err(prim, "not a call")),
    }
}
