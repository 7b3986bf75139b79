//! Std1F1B: PipeDream-Flush 1F1B (Narayanan et al. 2021; Megatron-LM's default).
//!
//! Actor `r` of `p` runs `p - r` forwards, then alternates one backward and one forward, then
//! drains the backwards. Bubble `(p-1)(F+B)`, as GPipe, but at most `p` microbatches are live on
//! the first actor instead of `m`.
//!
//! As in JAXPP, no tasks are fused by default. [`Std1F1B::fusing_last_stage`] (registered as
//! `1f1b-fuse-last`) runs the last stage's forward and backward of a microbatch, which are
//! adjacent there, as one action: Tessera's option, not JAXPP's.

use super::common::{OneFOneB, check_one_per_actor, fuse_last_stage};
use crate::error::ScheduleError;
use crate::placement::Placement;
use crate::schedule::Schedule;
use crate::task::Action;

/// The standard 1F1B schedule, one stage per actor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Std1F1B {
    stages: u32,
    fuse_last_stage: bool,
}

impl Std1F1B {
    /// 1F1B over `stages` stages, one per actor.
    pub fn new(stages: u32) -> Result<Std1F1B, ScheduleError> {
        Std1F1B::with_mpmd_dim(stages, stages)
    }

    /// As [`Std1F1B::new`], checking that `mpmd_dim` equals `stages`.
    pub fn with_mpmd_dim(stages: u32, mpmd_dim: u32) -> Result<Std1F1B, ScheduleError> {
        check_one_per_actor("1f1b", stages, mpmd_dim)?;
        Ok(Std1F1B {
            stages,
            fuse_last_stage: false,
        })
    }

    /// The same order with the last stage's forward and backward of each microbatch fused into
    /// one action (Tessera's option; JAXPP never fuses in 1F1B).
    pub fn fusing_last_stage(self) -> Std1F1B {
        Std1F1B {
            fuse_last_stage: true,
            ..self
        }
    }
}

impl Schedule for Std1F1B {
    fn name(&self) -> String {
        if self.fuse_last_stage {
            "1f1b-fuse-last".into()
        } else {
            "1f1b".into()
        }
    }

    fn placement(&self) -> Placement {
        Placement::plain(self.stages)
    }

    fn actions(&self, m: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        let p = self.stages;
        let order = OneFOneB {
            stages: p,
            mpmd_dim: p,
            round_size: m,
            warmup: Box::new(move |r, _| p - r),
            backward_first: true,
            fuse_last_stage: false,
            fuse_steady_state: false,
        };
        let mut lists = order.lists(m);
        if self.fuse_last_stage {
            fuse_last_stage(&mut lists, p - 1);
        }
        Ok(lists)
    }
}
