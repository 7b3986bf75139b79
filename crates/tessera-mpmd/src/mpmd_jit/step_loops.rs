//! How many `treduce` loops a step holds. `mpmd_jit` pipelines each loop of a step: a step of
//! one loop runs its pipeline, then the code after it (the update); a step of several
//! sequential top-level loops is split into steps of one loop each (`chain.rs`). A step with no
//! loop, or with several and an option they do not support, is refused with a
//! [`StepLoopsError`] saying how to restructure it.

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
    /// A `treduce`'s parameters cannot be read.
    #[error(
        "the step's treduce (equation {equation}) has malformed parameters: {reason}; build \
         the loop with the tracing API's treduce, or give it the parameters treduce takes"
    )]
    MalformedLoop {
        /// The loop's equation index in the step.
        equation: usize,
        /// What is wrong with its parameters.
        reason: String,
    },
    /// The step holds several `treduce`s at its top level and asks for what a step of several
    /// loops does not support (`limit`).
    #[error(
        "the step holds {} treduce loops (equations {equations:?}: {}) and {limit}; mpmd_jit \
         runs a step's sequential top-level treduce loops one pipeline after another (the code \
         between two loops runs as the update of the first, on the groups holding its values), in \
         one process or one per group. Drop that, or restructure: \
         compile each loop as a step of its own and call them one after the other, passing the \
         results of one (e.g. the updated parameters, left on their groups by call_mpmd) to the \
         next; two accumulation loops over two data sources whose gradients are summed are also \
         one treduce over the micro-batches of both (concatenated along the micro-batch axis)",
        .equations.len(),
        kinds_text(.kinds)
    )]
    SeveralLoops {
        /// The loops' equation indices in the step.
        equations: Vec<usize>,
        /// What each loop computes.
        kinds: Vec<LoopKind>,
        /// What the step asks for that a step of several loops does not support.
        limit: String,
    },
}

fn kinds_text(kinds: &[LoopKind]) -> String {
    kinds
        .iter()
        .map(LoopKind::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The indices of the step's top-level `treduce`s, in program order (at least one).
pub(super) fn top_level_loops(step: &ClosedJaxpr) -> Result<Vec<usize>, StepLoopsError> {
    let jaxpr = &step.jaxpr;
    let equations: Vec<usize> = (0..jaxpr.eqns.len())
        .filter(|&i| jaxpr.eqns[i].prim == Prim::Treduce)
        .collect();
    match equations.is_empty() {
        true => Err(StepLoopsError::NoLoop),
        false => Ok(equations),
    }
}

/// The refusal of a step whose loops are `equations`, for `limit` (or of the first loop whose
/// parameters cannot be read).
pub(super) fn several(step: &ClosedJaxpr, equations: &[usize], limit: &str) -> StepLoopsError {
    let kinds = match equations
        .iter()
        .map(|&i| loop_kind(i, &step.jaxpr.eqns[i]))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(kinds) => kinds,
        Err(malformed) => return malformed,
    };
    StepLoopsError::SeveralLoops {
        equations: equations.to_vec(),
        kinds,
        limit: limit.to_string(),
    }
}

/// The index of the step's one top-level `treduce` (a step of several is split into steps of
/// one loop each before this, `chain.rs`).
pub(super) fn the_loop(step: &ClosedJaxpr) -> Result<usize, StepLoopsError> {
    match top_level_loops(step)?[..] {
        [index] => Ok(index),
        ref equations => Err(several(
            step,
            equations,
            "reached the analysis of a step of one loop",
        )),
    }
}

/// Whether a `treduce` equation's body takes gradients; an error where its parameters cannot be
/// read (a malformed loop is not taken for a forward-only one).
fn loop_kind(equation: usize, eqn: &tessera_ir::Eqn) -> Result<LoopKind, StepLoopsError> {
    let params = tessera_ir::prim::TreduceParams::read(&eqn.params).map_err(|e| {
        StepLoopsError::MalformedLoop {
            equation,
            reason: e.to_string(),
        }
    })?;
    Ok(match params.body.jaxpr.eqns.iter().any(is_value_and_grad) {
        true => LoopKind::Training,
        false => LoopKind::ForwardOnly,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use super::*;
    use tessera_ir::trace::{call_closed, trace, treduce};
    use tessera_ir::{DType, Params, ShapedArray};

    /// Two forward-only loops over one batch: `(w, xs) -> (sum of losses, sum of losses)`.
    fn two_loops() -> ClosedJaxpr {
        let f = |s: &[i64]| ShapedArray::new(DType::F32, s);
        let loss = trace(&[f(&[3]), f(&[3])], |a| vec![(&a[0] * &a[1]).sum(&[0])]).unwrap();
        trace(&[f(&[3]), f(&[2, 3])], |a| {
            let run = || {
                treduce(&[&a[0]], &[&a[1]], 0, "1f1b", &[], |w, mb| {
                    call_closed(&loss, &[&w[0], &mb[0]])
                })
            };
            let (first, second) = (run(), run());
            vec![first[0].sum(&[0]), second[0].sum(&[0])]
        })
        .unwrap()
    }

    #[test]
    fn a_loop_whose_parameters_cannot_be_read_is_an_error_not_a_forward_only_loop() {
        let mut step = two_loops();
        let loops = top_level_loops(&step).unwrap();
        assert_eq!(loops.len(), 2);
        let err = several(&step, &loops, "asks for something");
        assert!(
            matches!(&err, StepLoopsError::SeveralLoops { kinds, .. } if kinds == &[LoopKind::ForwardOnly; 2]),
            "{err}"
        );
        step.jaxpr.eqns[loops[1]].params = Params::new();
        let err = several(&step, &loops, "asks for something");
        assert!(
            matches!(&err, StepLoopsError::MalformedLoop { equation, .. } if *equation == loops[1]),
            "{err}"
        );
    }
}
