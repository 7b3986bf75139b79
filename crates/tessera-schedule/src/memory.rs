//! What a plan implies for memory: per stage, the peak number of micro-batches in flight (whose
//! forward has run and whose backward has not finished), and per actor a predicted peak of live
//! bytes from each stage's activation bytes per micro-batch and what its backward allocates.
//!
//! Counts are taken between actions, as a runtime that frees a value after its last reader sees
//! them: a micro-batch is in flight at a stage from the end of the action holding its forward to
//! the end of the action holding its backward (`Bwd`, or `BwdW` when split). A forward and its
//! backward fused into one action never leave an activation behind.

use crate::schedule::Plan;
use crate::task::{Action, TaskKind};

/// Per stage, the peak number of micro-batches in flight (see the module docs).
pub fn peak_inflight(plan: &Plan) -> Vec<u32> {
    let stages = plan.num_stages as usize;
    let mut peak = vec![0_u32; stages];
    for list in &plan.actors {
        let mut live = vec![0_i64; stages];
        for action in list {
            step(&mut live, action);
            for (p, &l) in peak.iter_mut().zip(&live) {
                *p = (*p).max(l.max(0) as u32);
            }
        }
    }
    peak
}

/// What one micro-batch of a stage holds, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageBytes {
    /// The activations (residuals) a forward leaves for the backward, live from the forward to
    /// the backward (`Bwd`, or `BwdI` when split).
    pub activation: u64,
    /// The residuals `BwdI` leaves for `BwdW`, live between the two.
    pub weight_residual: u64,
    /// What a backward allocates besides those while it runs (a new gradient accumulator).
    pub backward: u64,
    /// The gradient accumulators the stage's first weight gradient (`Bwd`, or `BwdW` when
    /// split) makes, live from that action to the end of the step.
    pub accumulators: u64,
}

/// Per actor, the predicted peak live bytes: `resident[a]` (what the actor holds from the start:
/// parameters, inputs) plus, at each action, its stages' live micro-batch bytes and the
/// accumulators of the stages whose first weight gradient has run ([`StageBytes`]). During an
/// action its forwards' activations are already live (unless the action runs their backward
/// too: then they stay inside its one program), its backwards' inputs not yet freed, and
/// the accumulators a first weight gradient makes already held; a `BwdI` adds its weight
/// residuals unless the same action runs its `BwdW`.
pub fn predict_peak_bytes(plan: &Plan, resident: &[u64], bytes: &[StageBytes]) -> Vec<u64> {
    let stages = plan.num_stages as usize;
    let per = |s: usize| bytes.get(s).copied().unwrap_or_default();
    // Saturating: bytes beyond `u64::MAX` are more than any device holds, not a wrap-around.
    let total = |fwd: &[i64], wgt: &[i64]| -> u64 {
        (0..stages)
            .map(|s| {
                (fwd[s].max(0) as u64)
                    .saturating_mul(per(s).activation)
                    .saturating_add((wgt[s].max(0) as u64).saturating_mul(per(s).weight_residual))
            })
            .fold(0, u64::saturating_add)
    };
    plan.actors
        .iter()
        .enumerate()
        .map(|(a, list)| {
            let (mut fwd, mut wgt) = (vec![0_i64; stages], vec![0_i64; stages]);
            let mut peak = 0_u64;
            // The stages whose accumulators exist, and their bytes.
            let (mut accumulating, mut held) = (vec![false; stages], 0_u64);
            for action in list {
                let (mut during, mut extra) = (fwd.clone(), 0);
                for task in action.tasks() {
                    let s = task.stage as usize;
                    if s >= stages {
                        continue; // a stage the plan does not have (`validate` refuses it)
                    }
                    match task.kind {
                        // Its activations, unless the action's own backward reads them (then
                        // they stay inside the one program, never a value between actions).
                        TaskKind::Fwd if !backward_fused(action, task) => during[s] += 1,
                        TaskKind::Fwd => {}
                        TaskKind::Bwd | TaskKind::BwdW => {
                            extra = u64::saturating_add(extra, per(s).backward);
                            if !accumulating[s] {
                                accumulating[s] = true;
                                held = u64::saturating_add(held, per(s).accumulators);
                            }
                        }
                        // Its weight residuals, unless the action's own `BwdW` reads them (then
                        // they stay inside the one program, never a value between actions).
                        TaskKind::BwdI if !weight_gradient_fused(action, task) => {
                            extra = u64::saturating_add(extra, per(s).weight_residual);
                        }
                        TaskKind::BwdI => {}
                    }
                }
                peak = peak.max(
                    total(&during, &wgt)
                        .saturating_add(extra)
                        .saturating_add(held),
                );
                for task in action.tasks() {
                    let s = task.stage as usize;
                    if s >= stages {
                        continue; // a stage the plan does not have (`validate` refuses it)
                    }
                    match task.kind {
                        TaskKind::Fwd => fwd[s] += 1,
                        TaskKind::Bwd => fwd[s] -= 1,
                        TaskKind::BwdI => {
                            fwd[s] -= 1;
                            wgt[s] += 1;
                        }
                        TaskKind::BwdW => wgt[s] -= 1,
                    }
                }
            }
            resident.get(a).copied().unwrap_or(0).saturating_add(peak)
        })
        .collect()
}

/// Whether `action` also holds the backward (`Bwd` or `BwdI`) of `task` (a `Fwd`): the same
/// stage and micro-batch.
fn backward_fused(action: &Action, task: &crate::task::Task) -> bool {
    action.tasks().iter().any(|t| {
        matches!(t.kind, TaskKind::Bwd | TaskKind::BwdI) && t.stage == task.stage && t.mb == task.mb
    })
}

/// Whether `action` also holds the weight gradient of `task` (a `BwdI`): the same stage and
/// micro-batch.
fn weight_gradient_fused(action: &Action, task: &crate::task::Task) -> bool {
    action
        .tasks()
        .iter()
        .any(|t| t.kind == TaskKind::BwdW && t.stage == task.stage && t.mb == task.mb)
}

/// Applies one action's forwards and backwards to the per-stage in-flight counts.
fn step(live: &mut [i64], action: &Action) {
    for task in action.tasks() {
        let Some(n) = live.get_mut(task.stage as usize) else {
            continue;
        };
        match task.kind {
            TaskKind::Fwd => *n += 1,
            TaskKind::Bwd | TaskKind::BwdW => *n -= 1,
            TaskKind::BwdI => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Placement, Task};

    /// One stage whose forward and backward of each micro-batch run as one program (the last
    /// stage of `1f1b-fuse-last`): its activations never leave the program, so none is live
    /// between actions and the prediction is what it holds from the start; run apart, one
    /// micro-batch's activation is live while its backward runs.
    #[test]
    fn a_forward_fused_with_its_backward_leaves_no_activation() {
        let plan = |actions: Vec<Action>| Plan {
            name: "test".into(),
            num_stages: 1,
            num_microbatches: 2,
            placement: Placement::plain(1),
            actors: vec![actions],
        };
        let bytes = [StageBytes {
            activation: 1000,
            ..StageBytes::default()
        }];
        let fused = plan(
            (0..2)
                .map(|mb| Action::Fused(vec![Task::fwd(0, mb), Task::bwd(0, mb)]))
                .collect(),
        );
        assert_eq!(predict_peak_bytes(&fused, &[10], &bytes), vec![10]);
        let apart = plan(
            (0..2)
                .flat_map(|mb| {
                    [
                        Action::Single(Task::fwd(0, mb)),
                        Action::Single(Task::bwd(0, mb)),
                    ]
                })
                .collect(),
        );
        assert_eq!(predict_peak_bytes(&apart, &[10], &bytes), vec![1010]);
    }
}
