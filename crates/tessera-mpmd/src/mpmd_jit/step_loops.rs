//! How many `treduce` loops a step holds. `mpmd_jit` pipelines one loop per step: its plan,
//! schedule and runtime run one pipeline, then the code after it (the update). A step with no
//! loop or with several is refused with a [`StepLoopsError`] saying how to restructure it.

use std::fmt;

use tessera_ir::{ClosedJaxpr, Prim};

use super::analyze::is_value_and_grad;

/// What a `treduce` of the step computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopKind {
    /// Its body holds a `value_and_grad_call`: gradients accumulated over the micro-batches.
    Training,
    /// Its body is the loss itself: run forward only (an eval loss, inference).
    ForwardOnly,
}

impl fmt::Display for LoopKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoopKind::Training => f.write_str("training"),
            LoopKind::ForwardOnly => f.write_str("forward-only"),
        }
    }
}

/// A step `mpmd_jit` cannot pipeline for the number of its `treduce` loops.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepLoopsError {
    /// The step holds no `treduce`.
    #[error(
        "mpmd_jit pipelines the step's treduce loop and the step holds none; write the \
         micro-batch loop as a treduce (or treduce_i), or compile a step holding one \
         value_and_grad_call with mpmd_jit_by_yield"
    )]
    NoLoop,
    /// The step holds several `treduce`s at its top level.
    #[error(
        "the step holds {} treduce loops (equations {equations:?}: {}); mpmd_jit pipelines one \
         treduce per step. Restructure: compile each loop as a step of its own and call them one \
         after the other, passing the results of one (e.g. the updated parameters, left on their \
         groups by call_mpmd) to the next: a training step, then an eval step whose treduce body \
         is the staged loss alone (run forward only); two accumulation loops over two data \
         sources whose gradients are summed are one treduce over the micro-batches of both \
         (concatenated along the micro-batch axis)",
        .equations.len(),
        kinds_text(.kinds)
    )]
    SeveralLoops {
        /// The loops' equation indices in the step.
        equations: Vec<usize>,
        /// What each loop computes.
        kinds: Vec<LoopKind>,
    },
}

fn kinds_text(kinds: &[LoopKind]) -> String {
    kinds
        .iter()
        .map(LoopKind::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The index of the step's one top-level `treduce`.
pub(super) fn the_loop(step: &ClosedJaxpr) -> Result<usize, StepLoopsError> {
    let jaxpr = &step.jaxpr;
    let equations: Vec<usize> = (0..jaxpr.eqns.len())
        .filter(|&i| jaxpr.eqns[i].prim == Prim::Treduce)
        .collect();
    match equations[..] {
        [] => Err(StepLoopsError::NoLoop),
        [index] => Ok(index),
        _ => {
            let kinds = equations
                .iter()
                .map(|&i| loop_kind(&jaxpr.eqns[i]))
                .collect();
            Err(StepLoopsError::SeveralLoops { equations, kinds })
        }
    }
}

/// Whether a `treduce` equation's body takes gradients.
fn loop_kind(eqn: &tessera_ir::Eqn) -> LoopKind {
    let body = tessera_ir::prim::TreduceParams::read(&eqn.params)
        .ok()
        .map(|p| p.body.jaxpr.eqns.iter().any(is_value_and_grad));
    match body {
        Some(true) => LoopKind::Training,
        Some(false) | None => LoopKind::ForwardOnly,
    }
}
