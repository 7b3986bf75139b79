//! ZeroBubble: the ZB-H1 schedule of Qi et al. 2023, "Zero Bubble Pipeline Parallelism".
//!
//! The backward is split into `BwdI` (input gradients, on the critical path) and `BwdW` (weight
//! gradients, deferrable). Actor `r` of `p` runs `p - r` forwards, then `r` pairs of `BwdI`,
//! forward, then cycles `BwdI`, `BwdW`, forward until everything ran. Deferring `BwdW` fills
//! the cool-down bubble: the bubble falls to `(p-1)(F+B-2W)` (DualPipe's notation, `B` the
//! whole backward) with 1F1B's peak of `p` live microbatches.
//!
//! As in JAXPP's `tasks()`, no tasks are fused by default. [`ZeroBubble::fusing_ends`]
//! (registered as `zero-bubble-fuse-ends`) runs the last stage's forward and `BwdI` as one
//! action, and the first stage's `BwdI` and `BwdW` as one (the first stage hands no input
//! gradient on, so splitting gains nothing): Tessera's option. JAXPP merges the first stage's
//! pair only later, when it compiles the schedule.

use super::common::{
    Counters, check_microbatches, check_one_per_actor, fuse_first_stage_backward, fuse_last_stage,
};
use crate::error::ScheduleError;
use crate::placement::Placement;
use crate::schedule::Schedule;
use crate::task::{Action, ActorId, StageId, TaskKind};

/// The ZB-H1 zero-bubble schedule, one stage per actor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZeroBubble {
    stages: u32,
    fuse_ends: bool,
}

impl ZeroBubble {
    /// ZB-H1 over `stages` stages, one per actor.
    pub fn new(stages: u32) -> Result<ZeroBubble, ScheduleError> {
        ZeroBubble::with_mpmd_dim(stages, stages)
    }

    /// As [`ZeroBubble::new`], checking that `mpmd_dim` equals `stages`.
    pub fn with_mpmd_dim(stages: u32, mpmd_dim: u32) -> Result<ZeroBubble, ScheduleError> {
        check_one_per_actor("zero-bubble", stages, mpmd_dim)?;
        Ok(ZeroBubble {
            stages,
            fuse_ends: false,
        })
    }

    /// The same order with the last stage's forward and `BwdI`, and the first stage's `BwdI`
    /// and `BwdW`, of each microbatch fused into one action where adjacent (Tessera's option).
    pub fn fusing_ends(self) -> ZeroBubble {
        ZeroBubble {
            fuse_ends: true,
            ..self
        }
    }
}

impl Schedule for ZeroBubble {
    fn name(&self) -> String {
        if self.fuse_ends {
            "zero-bubble-fuse-ends".into()
        } else {
            "zero-bubble".into()
        }
    }

    fn placement(&self) -> Placement {
        Placement::plain(self.stages)
    }

    fn actions(&self, m: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        check_microbatches(
            "zero-bubble",
            m,
            self.stages,
            "one per stage, to fill the warm-up",
        )?;
        let mut lists: Vec<Vec<Action>> = (0..self.stages)
            .map(|r| actor_list(self.stages, r, m))
            .collect();
        if self.fuse_ends {
            fuse_last_stage(&mut lists, self.stages - 1);
            fuse_first_stage_backward(&mut lists);
        }
        Ok(lists)
    }
}

fn actor_list(p: u32, r: ActorId, m: u32) -> Vec<Action> {
    let stage: StageId = r;
    let mut it = Counters::default();
    let mut out: Vec<Action> = Vec::new();
    for _ in 0..p - r {
        out.push(it.next(TaskKind::Fwd, stage).into());
    }
    for _ in 0..r {
        out.push(it.next(TaskKind::BwdI, stage).into());
        out.push(it.next(TaskKind::Fwd, stage).into());
    }
    let cycle = [TaskKind::BwdI, TaskKind::BwdW, TaskKind::Fwd];
    let mut at = 0;
    while let Some(step) = (0..3).find(|k| it.count(cycle[(at + k) % 3], stage) < m) {
        out.push(it.next(cycle[(at + step) % 3], stage).into());
        at = (at + step + 1) % 3;
    }
    out
}
