//! Validation of any plan, and the transfers it implies.
//!
//! A plan is valid when:
//! 1. it has one task list per actor of its placement, and no empty fused action;
//! 2. every task names an existing stage and microbatch, on the actor that runs that stage;
//! 3. every piece of work runs exactly once: for each stage and microbatch one `Fwd`, and either
//!    one `Bwd` or one `BwdI` and one `BwdW`;
//! 4. dependencies hold: `Fwd(s, m)` needs `Fwd(s-1, m)`; `Bwd`/`BwdI(s, m)` need `Fwd(s, m)`
//!    and the input gradient of `s+1` (its `Bwd` or `BwdI`); `BwdW(s, m)` needs `BwdI(s, m)`.
//!    Inside a fused action the tasks run in order, so a task may only need earlier ones;
//! 5. no deadlock: each actor runs its list in order, an action starts once everything it needs
//!    is done (blocking receives, buffered sends), and every action eventually runs.

use std::collections::HashMap;

use serde::Serialize;

use crate::error::{Blocked, Position, ValidationError};
use crate::schedule::Plan;
use crate::task::{Action, ActorId, Part, StageId, Task, TaskKind};

/// Checks the invariants listed in the module docs; the first violation found is returned.
pub fn validate(plan: &Plan) -> Result<(), ValidationError> {
    let index = Index::build(plan)?;
    run(plan, &index, |_| 0.0, 0.0).map(|_| ())
}

/// Where one piece of work (a part of a task) is scheduled.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Loc {
    pub at: Position,
    pub slot: usize,
    pub task: Task,
}

/// Where every part of every stage's work on every microbatch is scheduled.
pub(crate) struct Index {
    stages: u32,
    microbatches: u32,
    locs: Locs,
}

/// The index's storage: a dense grid of stage × micro-batch × part, or, for a plan with fewer
/// tasks than the grid has stage-micro-batch pairs (which cannot be complete, e.g. a garbage
/// `num_microbatches` of `u32::MAX`), a map of the parts present, so that such a plan is refused
/// without allocating the grid. A built index is always dense.
enum Locs {
    Dense(Vec<Option<Loc>>),
    Sparse(HashMap<(StageId, u32, usize), Loc>),
}

impl Index {
    /// Indexes a plan, checking invariants 1–4 (all but deadlock freedom).
    pub(crate) fn build(plan: &Plan) -> Result<Index, ValidationError> {
        Index::build_for(plan, false)
    }

    /// Indexes a forward-only plan ([`crate::forward`]): every forward once, no backward.
    pub(crate) fn build_forward_only(plan: &Plan) -> Result<Index, ValidationError> {
        Index::build_for(plan, true)
    }

    fn build_for(plan: &Plan, forward_only: bool) -> Result<Index, ValidationError> {
        let actors = plan.placement.num_actors();
        if plan.actors.len() != actors as usize {
            return Err(ValidationError::ActorCount {
                lists: plan.actors.len(),
                actors,
            });
        }
        let (stages, microbatches) = (plan.placement.num_stages(), plan.num_microbatches);
        if plan.num_stages != stages {
            return Err(ValidationError::StageCount {
                plan: plan.num_stages,
                placement: stages,
            });
        }
        let tasks: u64 = plan
            .actors
            .iter()
            .flatten()
            .map(|a| a.tasks().len() as u64)
            .sum();
        let pairs = u64::from(stages) * u64::from(microbatches);
        let locs = match usize::try_from(pairs) {
            Ok(pairs) if pairs as u64 <= tasks => Locs::Dense(vec![None; pairs * Part::COUNT]),
            _ => Locs::Sparse(HashMap::new()),
        };
        let mut index = Index {
            stages,
            microbatches,
            locs,
        };
        for (a, list) in plan.actors.iter().enumerate() {
            for (i, action) in list.iter().enumerate() {
                let at = Position {
                    actor: a as ActorId,
                    index: i,
                };
                if let Some(&task) = action.tasks().iter().find(|t| t.kind != TaskKind::Fwd)
                    && forward_only
                {
                    return Err(ValidationError::BackwardInForwardOnly { at, task });
                }
                index.add_action(plan, at, action)?;
            }
        }
        index.check_complete(forward_only)?;
        for (a, list) in plan.actors.iter().enumerate() {
            for (i, action) in list.iter().enumerate() {
                index.check_fused_order(
                    Position {
                        actor: a as ActorId,
                        index: i,
                    },
                    action,
                )?;
            }
        }
        Ok(index)
    }

    pub(crate) fn slot(&self, stage: StageId, mb: u32, part: Part) -> usize {
        ((stage as usize) * (self.microbatches as usize) + mb as usize) * Part::COUNT + part.index()
    }

    /// Where `part` of `stage` on `mb` runs (the index is complete once built; a forward-only
    /// index holds the forwards, the only parts a forward depends on).
    pub(crate) fn loc(&self, stage: StageId, mb: u32, part: Part) -> Loc {
        self.get(stage, mb, part)
            .expect("a built index is complete")
    }

    /// The plan's stage count.
    pub(crate) fn stages(&self) -> u32 {
        self.stages
    }

    fn get(&self, stage: StageId, mb: u32, part: Part) -> Option<Loc> {
        match &self.locs {
            Locs::Dense(locs) => locs.get(self.slot(stage, mb, part)).copied().flatten(),
            Locs::Sparse(locs) => locs.get(&(stage, mb, part.index())).copied(),
        }
    }

    fn set(&mut self, stage: StageId, mb: u32, part: Part, loc: Loc) {
        if let Locs::Sparse(locs) = &mut self.locs {
            locs.insert((stage, mb, part.index()), loc);
            return;
        }
        let slot = self.slot(stage, mb, part);
        if let Locs::Dense(locs) = &mut self.locs
            && let Some(entry) = locs.get_mut(slot)
        {
            *entry = Some(loc);
        }
    }

    /// The number of dense slots (what [`Index::slot`] numbers).
    pub(crate) fn slots(&self) -> usize {
        match &self.locs {
            Locs::Dense(locs) => locs.len(),
            Locs::Sparse(_) => 0,
        }
    }

    fn add_action(
        &mut self,
        plan: &Plan,
        at: Position,
        action: &Action,
    ) -> Result<(), ValidationError> {
        if action.tasks().is_empty() {
            return Err(ValidationError::EmptyAction { at });
        }
        for (slot, &task) in action.tasks().iter().enumerate() {
            if task.stage >= self.stages || task.mb >= self.microbatches {
                let (stages, microbatches) = (self.stages, self.microbatches);
                return Err(ValidationError::OutOfRange {
                    at,
                    task,
                    stages,
                    microbatches,
                });
            }
            let expected = plan.placement.actor(task.stage).expect("stage is in range");
            if expected != at.actor {
                return Err(ValidationError::WrongActor { at, task, expected });
            }
            for &part in task.kind.parts() {
                if let Some(first) = self.get(task.stage, task.mb, part) {
                    return Err(ValidationError::Duplicate {
                        task,
                        at,
                        first: first.task,
                        first_at: first.at,
                    });
                }
                self.set(task.stage, task.mb, part, Loc { at, slot, task });
            }
        }
        Ok(())
    }

    fn check_complete(&self, forward_only: bool) -> Result<(), ValidationError> {
        for stage in 0..self.stages {
            for mb in 0..self.microbatches {
                for (part, what, hint) in [
                    (Part::F, "forward", format!("{}", Task::fwd(stage, mb))),
                    (
                        Part::I,
                        "input gradient",
                        format!("{} or {}", Task::bwd(stage, mb), Task::bwd_i(stage, mb)),
                    ),
                    (
                        Part::W,
                        "weight gradient",
                        format!("{} or {}", Task::bwd(stage, mb), Task::bwd_w(stage, mb)),
                    ),
                ] {
                    if forward_only && part != Part::F {
                        continue;
                    }
                    // The first missing part ends the scan, so a sparse index is scanned no
                    // further than the parts it holds.
                    if self.get(stage, mb, part).is_none() {
                        return Err(ValidationError::Missing {
                            what,
                            stage,
                            mb,
                            hint,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    fn check_fused_order(&self, at: Position, action: &Action) -> Result<(), ValidationError> {
        for (slot, task) in action.tasks().iter().enumerate() {
            for (stage, mb, part) in deps(task, self.stages) {
                let loc = self.loc(stage, mb, part);
                if loc.at == at && loc.slot >= slot {
                    let needs = loc.task.to_string();
                    return Err(ValidationError::FusedOrder {
                        at,
                        action: action.clone(),
                        task: *task,
                        needs,
                    });
                }
            }
        }
        Ok(())
    }
}

/// The parts of other tasks that `task` needs, as `(stage, microbatch, part)`.
pub(crate) fn deps(task: &Task, stages: u32) -> impl Iterator<Item = (StageId, u32, Part)> {
    let (s, mb) = (task.stage, task.mb);
    let (a, b) = match task.kind {
        TaskKind::Fwd => ((s > 0).then(|| (s - 1, mb, Part::F)), None),
        TaskKind::Bwd | TaskKind::BwdI => (
            Some((s, mb, Part::F)),
            (s + 1 < stages).then_some((s + 1, mb, Part::I)),
        ),
        TaskKind::BwdW => (Some((s, mb, Part::I)), None),
    };
    a.into_iter().chain(b)
}

/// Start and end time of one action.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Span {
    /// When the action starts.
    pub start: f64,
    /// When it ends.
    pub end: f64,
}

/// Runs every actor's list in order: an action starts when its actor is free and everything
/// it needs from other actions is done (plus `latency` when that comes from another actor).
/// Returns each action's span, or the deadlocked actors.
pub(crate) fn run(
    plan: &Plan,
    index: &Index,
    duration: impl Fn(&Action) -> f64,
    latency: f64,
) -> Result<Vec<Vec<Span>>, ValidationError> {
    let stages = index.stages;
    let mut done: Vec<Option<f64>> = vec![None; index.slots()];
    let mut spans: Vec<Vec<Span>> = plan
        .actors
        .iter()
        .map(|l| Vec::with_capacity(l.len()))
        .collect();
    let mut free = vec![0.0_f64; plan.actors.len()];
    let mut progressed = true;
    while progressed {
        progressed = false;
        for (a, list) in plan.actors.iter().enumerate() {
            while let Some(action) = list.get(spans[a].len()) {
                let at = Position {
                    actor: a as ActorId,
                    index: spans[a].len(),
                };
                if !action.tasks().iter().all(|t| ready(t, at, index, &done)) {
                    break;
                }
                let mut start = free[a];
                for (stage, mb, part) in action.tasks().iter().flat_map(|t| deps(t, stages)) {
                    let loc = index.loc(stage, mb, part);
                    if let (false, Some(end)) = (loc.at == at, done[index.slot(stage, mb, part)]) {
                        let hop = if loc.at.actor == at.actor {
                            0.0
                        } else {
                            latency
                        };
                        start = start.max(end + hop);
                    }
                }
                let end = start + duration(action);
                for task in action.tasks() {
                    for &part in task.kind.parts() {
                        done[index.slot(task.stage, task.mb, part)] = Some(end);
                    }
                }
                spans[a].push(Span { start, end });
                free[a] = end;
                progressed = true;
            }
        }
    }
    let blocked = blocked(plan, index, &spans, &done);
    if blocked.is_empty() {
        Ok(spans)
    } else {
        Err(ValidationError::Deadlock { blocked })
    }
}

fn ready(task: &Task, at: Position, index: &Index, done: &[Option<f64>]) -> bool {
    deps(task, index.stages)
        .all(|(s, mb, p)| index.loc(s, mb, p).at == at || done[index.slot(s, mb, p)].is_some())
}

fn blocked(plan: &Plan, index: &Index, spans: &[Vec<Span>], done: &[Option<f64>]) -> Vec<Blocked> {
    let mut out = Vec::new();
    for (a, list) in plan.actors.iter().enumerate() {
        let Some(action) = list.get(spans[a].len()) else {
            continue;
        };
        let at = Position {
            actor: a as ActorId,
            index: spans[a].len(),
        };
        let waits_for = action
            .tasks()
            .iter()
            .flat_map(|t| deps(t, index.stages))
            .find(|&(s, mb, p)| {
                index.loc(s, mb, p).at != at && done[index.slot(s, mb, p)].is_none()
            })
            .map(|(s, mb, p)| {
                let loc = index.loc(s, mb, p);
                format!("{} at {}", loc.task, loc.at)
            })
            .unwrap_or_default();
        out.push(Blocked {
            at,
            action: action.clone(),
            waits_for,
        });
    }
    out
}

/// What a transfer carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Payload {
    /// A stage's output activations, to the next stage's forward.
    Activation,
    /// A stage's input gradients, to the previous stage's backward.
    Gradient,
}

/// A value one actor sends another: produced by `producer`, needed by `consumer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Transfer {
    /// The sending actor.
    pub from: ActorId,
    /// The receiving actor.
    pub to: ActorId,
    /// What is sent.
    pub payload: Payload,
    /// The task that produces it.
    pub producer: Task,
    /// The task that needs it.
    pub consumer: Task,
    /// The index, in `from`'s list, of the action after which the value can be sent.
    pub sent_after: usize,
    /// The index, in `to`'s list, of the action that must receive it before it starts.
    pub received_before: usize,
}

/// The transfers between actors that a valid plan implies, in the receivers' execution order
/// (actor by actor).
pub fn transfers(plan: &Plan) -> Result<Vec<Transfer>, ValidationError> {
    validate(plan)?;
    let index = Index::build(plan)?;
    let mut out = Vec::new();
    for (a, list) in plan.actors.iter().enumerate() {
        for (i, action) in list.iter().enumerate() {
            for consumer in action.tasks() {
                for (s, mb, part) in deps(consumer, index.stages) {
                    let loc = index.loc(s, mb, part);
                    if loc.at.actor == a as ActorId {
                        continue;
                    }
                    out.push(Transfer {
                        from: loc.at.actor,
                        to: a as ActorId,
                        payload: if part == Part::F {
                            Payload::Activation
                        } else {
                            Payload::Gradient
                        },
                        producer: loc.task,
                        consumer: *consumer,
                        sent_after: loc.at.index,
                        received_before: i,
                    });
                }
            }
        }
    }
    Ok(out)
}
