//! Helpers shared by the built-ins: parameter checks, microbatch rounds, the 1F1B family's
//! generator, and the fusion passes.

use crate::error::ScheduleError;
use crate::task::{Action, ActorId, Microbatch, StageId, Task, TaskKind};

/// Rejects zero stages or actors, and stage counts that are not a multiple of the actors.
pub(crate) fn check_stages(name: &str, stages: u32, mpmd_dim: u32) -> Result<(), ScheduleError> {
    if stages == 0 {
        return Err(ScheduleError::NoStages {
            schedule: name.into(),
        });
    }
    if mpmd_dim == 0 {
        return Err(ScheduleError::NoActors {
            schedule: name.into(),
        });
    }
    if !stages.is_multiple_of(mpmd_dim) {
        return Err(ScheduleError::StagesNotMultiple { stages, mpmd_dim });
    }
    Ok(())
}

/// Rejects an MPMD size other than the stage count (one stage per actor).
pub(crate) fn check_one_per_actor(
    name: &str,
    stages: u32,
    mpmd_dim: u32,
) -> Result<(), ScheduleError> {
    check_stages(name, stages, mpmd_dim.max(1))?;
    if mpmd_dim != stages {
        return Err(ScheduleError::OneStagePerActor {
            schedule: name.into(),
            stages,
            mpmd_dim,
        });
    }
    Ok(())
}

/// Rejects fewer than `needed` microbatches.
pub(crate) fn check_microbatches(
    name: &str,
    got: u32,
    needed: u32,
    why: &str,
) -> Result<(), ScheduleError> {
    if got < needed.max(1) {
        return Err(ScheduleError::TooFewMicrobatches {
            schedule: name.into(),
            needed: needed.max(1),
            got,
            why: why.into(),
        });
    }
    Ok(())
}

/// Splits `m` microbatches into rounds of about `size` each (at least one round; the first
/// rounds take the remainder), as `(first microbatch, count)`.
pub(crate) fn rounds(m: u32, size: u32) -> Vec<(Microbatch, u32)> {
    let n = (m / size.max(1)).max(1);
    let (base, extra) = (m / n, m % n);
    let mut start = 0;
    (0..n)
        .map(|i| {
            let len = base + u32::from(i < extra);
            let round = (start, len);
            start += len;
            round
        })
        .collect()
}

/// `(local stage, microbatch)` in round order: each round visits the local stages in increasing
/// (or, for `reverse`, decreasing) order and runs the round's microbatches on each.
pub(crate) fn round_order(
    rounds: &[(Microbatch, u32)],
    local_stages: u32,
    reverse: bool,
) -> Vec<(u32, Microbatch)> {
    let mut out = Vec::new();
    for &(start, len) in rounds {
        for i in 0..local_stages {
            let local = if reverse { local_stages - 1 - i } else { i };
            out.extend((start..start + len).map(|mb| (local, mb)));
        }
    }
    out
}

/// Warm-up forwards of an actor, given the microbatch rounds.
pub(crate) type Warmup = Box<dyn Fn(ActorId, &[(Microbatch, u32)]) -> u32>;

/// The 1F1B family on a round-robin placement: a warm-up of forwards, a steady state of
/// forward/backward pairs, a cool-down of backwards.
pub(crate) struct OneFOneB {
    /// Total stages.
    pub stages: u32,
    /// Actors; stage `s` runs on actor `s % mpmd_dim`.
    pub mpmd_dim: u32,
    /// Microbatches per round (interleaving granularity).
    pub round_size: u32,
    /// Warm-up forwards of each actor, before capping at the actor's forward count.
    pub warmup: Warmup,
    /// Steady-state pairs run the backward first (`B F`, Std1F1B) or the forward first (`F B`).
    pub backward_first: bool,
    /// Fuse forward-first steady-state pairs whose forward is of the last stage into one
    /// action (JAXPP does in Interleaved1F1B and KimiK2, not in Eager1F1B).
    pub fuse_last_stage: bool,
    /// Fuse every forward-first steady-state pair into one action.
    pub fuse_steady_state: bool,
}

impl OneFOneB {
    /// Every actor's list for `m` microbatches.
    pub(crate) fn lists(&self, m: u32) -> Vec<Vec<Action>> {
        (0..self.mpmd_dim).map(|a| self.actor_list(a, m)).collect()
    }

    fn actor_list(&self, actor: ActorId, m: u32) -> Vec<Action> {
        let v = self.stages / self.mpmd_dim;
        let rounds = rounds(m, self.round_size);
        let stage = |local: u32| local * self.mpmd_dim + actor;
        let fwd: Vec<Task> = round_order(&rounds, v, false)
            .into_iter()
            .map(|(l, mb)| Task::fwd(stage(l), mb))
            .collect();
        let bwd: Vec<Task> = round_order(&rounds, v, true)
            .into_iter()
            .map(|(l, mb)| Task::bwd(stage(l), mb))
            .collect();
        let warmup = ((self.warmup)(actor, &rounds) as usize).min(fwd.len());
        let mut out: Vec<Action> = fwd[..warmup].iter().map(|&t| t.into()).collect();
        for (f, b) in fwd[warmup..].iter().zip(&bwd) {
            if self.backward_first {
                out.extend([Action::from(*b), Action::from(*f)]);
            } else if self.fuse_steady_state || (self.fuse_last_stage && f.stage == self.stages - 1)
            {
                out.push(Action::fuse(*f, *b));
            } else {
                out.extend([Action::from(*f), Action::from(*b)]);
            }
        }
        out.extend(bwd[fwd.len() - warmup..].iter().map(|&t| Action::from(t)));
        out
    }
}

/// Fuses the last stage's forward with the backward (or input-gradient backward) of the same
/// microbatch when they are adjacent in an actor's list (Tessera's opt-in fusion for Std1F1B and
/// ZeroBubble; JAXPP does not fuse there).
pub(crate) fn fuse_last_stage(lists: &mut [Vec<Action>], last: StageId) {
    fuse_adjacent(lists, |a, b| {
        a.kind == TaskKind::Fwd
            && a.stage == last
            && matches!(b.kind, TaskKind::Bwd | TaskKind::BwdI)
            && (b.stage, b.mb) == (last, a.mb)
    });
}

/// Fuses the first stage's `BwdI` with the adjacent `BwdW` of the same microbatch: the first
/// stage has no input gradient to hand on, so its backward is never worth splitting (Tessera's
/// opt-in fusion for ZeroBubble; JAXPP's `tasks()` keeps them apart).
pub(crate) fn fuse_first_stage_backward(lists: &mut [Vec<Action>]) {
    fuse_adjacent(lists, |a, b| {
        a.kind == TaskKind::BwdI
            && a.stage == 0
            && b.kind == TaskKind::BwdW
            && (b.stage, b.mb) == (0, a.mb)
    });
}

fn fuse_adjacent(lists: &mut [Vec<Action>], pair: impl Fn(&Task, &Task) -> bool) {
    for list in lists {
        let mut out = Vec::with_capacity(list.len());
        let mut iter = std::mem::take(list).into_iter().peekable();
        while let Some(action) = iter.next() {
            if let (Action::Single(a), Some(Action::Single(b))) = (&action, iter.peek())
                && pair(a, b)
            {
                out.push(Action::fuse(*a, *b));
                iter.next();
                continue;
            }
            out.push(action);
        }
        *list = out;
    }
}

/// Hands out microbatches in order, per stage and task kind.
#[derive(Default)]
pub(crate) struct Counters {
    next: std::collections::HashMap<(StageId, TaskKind), Microbatch>,
}

impl Counters {
    /// The next task of `kind` for `stage`.
    pub(crate) fn next(&mut self, kind: TaskKind, stage: StageId) -> Task {
        let mb = self.next.entry((stage, kind)).or_insert(0);
        let task = Task {
            kind,
            stage,
            mb: *mb,
        };
        *mb += 1;
        task
    }

    /// How many tasks of `kind` for `stage` were handed out.
    pub(crate) fn count(&self, kind: TaskKind, stage: StageId) -> u32 {
        self.next.get(&(stage, kind)).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_balance() {
        assert_eq!(rounds(8, 4), vec![(0, 4), (4, 4)]);
        assert_eq!(rounds(9, 4), vec![(0, 5), (5, 4)]);
        assert_eq!(rounds(3, 4), vec![(0, 3)]);
        assert_eq!(
            round_order(&[(0, 2)], 2, true),
            vec![(1, 0), (1, 1), (0, 0), (0, 1)]
        );
    }
}
