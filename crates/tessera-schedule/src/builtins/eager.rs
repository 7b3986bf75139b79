//! Eager1F1B: 1F1B that issues forwards as early as memory allows.
//!
//! Actor `r` of `p` warms up with `2(p-1-r)` forwards (1F1B uses `p-1-r`), so the forward that
//! feeds the next actor is ready before that actor asks for it, even when transfers take time;
//! the price is up to `2p-1` live microbatches on the first actor. Steady-state pairs run the
//! forward first.
//!
//! As in JAXPP, no tasks are fused by default. [`Eager1F1B::fusing_last_stage`] (registered as
//! `eager-1f1b-fuse-last`) runs the last stage's steady-state pairs as one action each:
//! Tessera's option, not JAXPP's.

use super::common::{OneFOneB, check_one_per_actor};
use crate::error::ScheduleError;
use crate::placement::Placement;
use crate::schedule::Schedule;
use crate::task::Action;

/// The eager 1F1B schedule, one stage per actor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eager1F1B {
    stages: u32,
    fuse_last_stage: bool,
}

impl Eager1F1B {
    /// Eager 1F1B over `stages` stages, one per actor.
    pub fn new(stages: u32) -> Result<Eager1F1B, ScheduleError> {
        Eager1F1B::with_mpmd_dim(stages, stages)
    }

    /// As [`Eager1F1B::new`], checking that `mpmd_dim` equals `stages`.
    pub fn with_mpmd_dim(stages: u32, mpmd_dim: u32) -> Result<Eager1F1B, ScheduleError> {
        check_one_per_actor("eager-1f1b", stages, mpmd_dim)?;
        Ok(Eager1F1B {
            stages,
            fuse_last_stage: false,
        })
    }

    /// The same order with the last stage's forward and backward of each microbatch fused into
    /// one action (Tessera's option; JAXPP never fuses in Eager1F1B).
    pub fn fusing_last_stage(self) -> Eager1F1B {
        Eager1F1B {
            fuse_last_stage: true,
            ..self
        }
    }
}

impl Schedule for Eager1F1B {
    fn name(&self) -> String {
        if self.fuse_last_stage {
            "eager-1f1b-fuse-last".into()
        } else {
            "eager-1f1b".into()
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
            warmup: Box::new(move |r, _| 2 * (p - 1 - r)),
            backward_first: false,
            fuse_last_stage: self.fuse_last_stage,
            fuse_steady_state: false,
        };
        Ok(order.lists(m))
    }
}
