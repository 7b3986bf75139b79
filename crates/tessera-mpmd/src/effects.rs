//! Host callbacks in pipeline stages. A stage's backward program recomputes the stage's forward
//! from its saved inputs (`partition.rs`), so a `debug_callback` or `io_callback` of the loss
//! would run twice per micro-batch: once in the forward task, once in the backward's
//! recomputation. JAX runs a callback of a differentiated function once per evaluation (on the
//! primals), so [`drop_recomputed_effects`] removes from the backward programs every
//! `debug_callback` and every `io_callback` whose results nothing reads: each runs once per
//! micro-batch, in its stage's forward task. [`refuse_unkeepable_effects`] refuses what the
//! pipeline cannot run as the step says: an `io_callback` whose results the loss reads (the
//! backward would call it again) and ordered `io_callback`s in more than one stage (the stages
//! run on different groups, interleaved by the schedule, so their calls cannot keep program
//! order). [`refuse_effects_outside_loops`] refuses effectful callbacks outside the loop of a step
//! that does not run as one program (the update and the code before the loop are split by where
//! their results live, which would drop a callback returning nothing). Programs holding
//! callbacks on groups of several devices are lowered for GSPMD
//! ([`Partitioner::for_callbacks`](tessera_stablehlo::Partitioner::for_callbacks)), each callback
//! running once, on the group's first device, with the whole operands.

use std::collections::HashSet;

use tessera_ir::passes::eliminate_dead_code;
use tessera_ir::{Atom, ClosedJaxpr, Jaxpr, Prim, Var};

/// Why a loss's host callbacks cannot run in a pipeline's stages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallbackStageError {
    /// An `io_callback`'s results are read by the loss.
    #[error(
        "an io_callback in pipeline stage {stage} returns values the loss reads; the stage's \
         backward recomputes its forward, which would call it a second time per micro-batch \
         (JAX calls it once): use a pure_callback if the function has no side effects (it may \
         then be called again), or call the io_callback before the loop and pass its result to \
         the loop"
    )]
    RecomputedIoCallback {
        /// The stage holding it.
        stage: usize,
    },
    /// A host callback with side effects sits outside the step's `treduce`s.
    #[error(
        "the step holds `{prim}` {place}; mpmd_jit splits the code outside its loops by where \
         their results live (the parameters' groups, the host), so a callback returning nothing \
         would not run: return the value it reads from the step and use it on the host after \
         the call, move the callback into the loop body (it then runs once per micro-batch), or \
         run the step as one program (an MpmdMesh of one group, in one process, one treduce, \
         Fusion::Auto), which runs it where the step says"
    )]
    OutsideTheLoop {
        /// The callback's primitive name.
        prim: &'static str,
        /// Where it sits: "before the treduce", "after the treduce", "between two treduces".
        place: &'static str,
    },
    /// Ordered `io_callback`s sit in several stages.
    #[error(
        "ordered io_callbacks sit in pipeline stages {stages:?}; the schedule interleaves the \
         stages' micro-batches (on different groups, or in its own order on one), so their \
         calls cannot keep program order (JAX refuses ordered effects on more than one device): keep the \
         ordered io_callbacks in one stage, pass ordered=false, or run the step on one group \
         (an MpmdMesh of one group with Fusion::Auto compiles it as one program)"
    )]
    OrderedAcrossStages {
        /// The stages holding ordered `io_callback`s.
        stages: Vec<usize>,
    },
}

/// Whether `jaxpr`, or a jaxpr nested in it, holds an equation `pred` accepts.
fn holds(jaxpr: &Jaxpr, pred: &dyn Fn(&tessera_ir::Eqn, &HashSet<Var>) -> bool) -> bool {
    let used = used_vars(jaxpr);
    jaxpr
        .eqns
        .iter()
        .any(|e| pred(e, &used) || e.params.jaxprs().iter().any(|j| holds(&j.jaxpr, pred)))
}

/// The variables read by an equation or returned by `jaxpr`.
fn used_vars(jaxpr: &Jaxpr) -> HashSet<Var> {
    jaxpr
        .eqns
        .iter()
        .flat_map(|e| e.inputs.iter())
        .chain(&jaxpr.outvars)
        .filter_map(|a| match a {
            Atom::Var(v) => Some(*v),
            Atom::Lit(..) => None,
        })
        .collect()
}

/// Refuses stage programs (`stages[s]` is stage `s`'s forward program) whose host callbacks
/// the pipeline cannot run as the step says (see the module docs); `recomputed`: the stages have
/// backward programs recomputing their forwards (not a forward-only pipeline).
pub fn refuse_unkeepable_effects(
    stages: &[&ClosedJaxpr],
    recomputed: bool,
) -> Result<(), CallbackStageError> {
    for (stage, program) in stages.iter().enumerate().filter(|_| recomputed) {
        let reads_io = |e: &tessera_ir::Eqn, used: &HashSet<Var>| {
            e.prim == Prim::IoCallback && e.outputs.iter().any(|v| used.contains(v))
        };
        if holds(&program.jaxpr, &reads_io) {
            return Err(CallbackStageError::RecomputedIoCallback { stage });
        }
    }
    let ordered: Vec<usize> = stages
        .iter()
        .enumerate()
        .filter(|(_, p)| tessera_ir::prim::jaxpr_has_ordered_effects(&p.jaxpr))
        .map(|(s, _)| s)
        .collect();
    if ordered.len() > 1 {
        return Err(CallbackStageError::OrderedAcrossStages { stages: ordered });
    }
    Ok(())
}

/// `program` without its `debug_callback`s and the `io_callback`s whose results nothing reads
/// (inside nested jaxprs too), then without the code only they read.
pub fn drop_recomputed_effects(program: &ClosedJaxpr) -> ClosedJaxpr {
    let mut out = program.clone();
    strip(&mut out.jaxpr);
    eliminate_dead_code(&out)
}

fn strip(jaxpr: &mut Jaxpr) {
    let used = used_vars(jaxpr);
    jaxpr.eqns.retain(|e| {
        let unread = e.outputs.iter().all(|v| !used.contains(v));
        !(matches!(e.prim, Prim::DebugCallback | Prim::IoCallback) && unread)
    });
    for eqn in &mut jaxpr.eqns {
        for (_, value) in eqn.params.entries_mut().iter_mut() {
            value.for_each_jaxpr_mut(&mut |inner| strip(&mut inner.jaxpr));
        }
    }
}

/// The name of the first effectful primitive in `eqn` or its nested jaxprs.
fn effect_name(eqn: &tessera_ir::Eqn) -> Option<&'static str> {
    if tessera_ir::prim::is_effectful(eqn.prim) {
        return Some(eqn.prim.name());
    }
    eqn.params
        .jaxprs()
        .iter()
        .find_map(|j| j.jaxpr.eqns.iter().find_map(effect_name))
}

/// Refuses a `debug_callback` or `io_callback` at the top level of `step` outside its
/// `treduce`s (or nested in another equation there), naming where it sits.
pub fn refuse_effects_outside_loops(step: &ClosedJaxpr) -> Result<(), CallbackStageError> {
    let loops: Vec<usize> = step
        .jaxpr
        .eqns
        .iter()
        .enumerate()
        .filter(|(_, e)| e.prim == Prim::Treduce)
        .map(|(i, _)| i)
        .collect();
    for (i, eqn) in step.jaxpr.eqns.iter().enumerate() {
        if eqn.prim == Prim::Treduce {
            continue;
        }
        if let Some(prim) = effect_name(eqn) {
            let before = loops.iter().filter(|&&l| l < i).count();
            let place = match (before, before == loops.len()) {
                (0, _) => "before the treduce",
                (_, true) => "after the treduce",
                (_, false) => "between two treduces",
            };
            return Err(CallbackStageError::OutsideTheLoop { prim, place });
        }
    }
    Ok(())
}
