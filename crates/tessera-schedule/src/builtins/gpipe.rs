//! GPipe (Huang et al. 2019): every microbatch's forward, then every backward.
//!
//! Each actor runs all its forwards, then all its backwards. [`InterleavedGPipe`] puts several
//! stages on each actor (round-robin) and walks them round by round, as JAXPP does. The bubble
//! is `(p-1)(F+B)` per actor and the first actor holds all `m` microbatches' activations.

use super::common::{check_one_per_actor, check_stages, round_order, rounds};
use crate::error::ScheduleError;
use crate::placement::Placement;
use crate::schedule::Schedule;
use crate::task::{Action, Task};

/// GPipe with several stages per actor: stage `s` on actor `s mod mpmd_dim`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterleavedGPipe {
    stages: u32,
    mpmd_dim: u32,
}

impl InterleavedGPipe {
    /// `stages` stages on `mpmd_dim` actors; `stages` must be a multiple of `mpmd_dim`.
    pub fn new(stages: u32, mpmd_dim: u32) -> Result<InterleavedGPipe, ScheduleError> {
        check_stages("interleaved-gpipe", stages, mpmd_dim)?;
        Ok(InterleavedGPipe { stages, mpmd_dim })
    }
}

impl Schedule for InterleavedGPipe {
    fn name(&self) -> String {
        "interleaved-gpipe".into()
    }

    fn placement(&self) -> Placement {
        Placement::round_robin(self.stages, self.mpmd_dim).expect("checked by the constructor")
    }

    fn actions(&self, m: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        Ok(fill_drain(self.stages, self.mpmd_dim, m, self.mpmd_dim))
    }
}

/// GPipe with one stage per actor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GPipe {
    stages: u32,
}

impl GPipe {
    /// GPipe over `stages` stages, one per actor.
    pub fn new(stages: u32) -> Result<GPipe, ScheduleError> {
        GPipe::with_mpmd_dim(stages, stages)
    }

    /// As [`GPipe::new`], checking that `mpmd_dim` equals `stages`.
    pub fn with_mpmd_dim(stages: u32, mpmd_dim: u32) -> Result<GPipe, ScheduleError> {
        check_one_per_actor("gpipe", stages, mpmd_dim)?;
        Ok(GPipe { stages })
    }
}

impl Schedule for GPipe {
    fn name(&self) -> String {
        "gpipe".into()
    }

    fn placement(&self) -> Placement {
        Placement::plain(self.stages)
    }

    fn actions(&self, m: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        Ok(fill_drain(self.stages, self.stages, m, m))
    }
}

fn fill_drain(stages: u32, mpmd_dim: u32, m: u32, round_size: u32) -> Vec<Vec<Action>> {
    let v = stages / mpmd_dim;
    let rounds = rounds(m, round_size);
    (0..mpmd_dim)
        .map(|actor| {
            let stage = |local: u32| local * mpmd_dim + actor;
            let fwd = round_order(&rounds, v, false)
                .into_iter()
                .map(|(l, mb)| Task::fwd(stage(l), mb));
            let bwd = round_order(&rounds, v, true)
                .into_iter()
                .map(|(l, mb)| Task::bwd(stage(l), mb));
            fwd.chain(bwd).map(Action::from).collect()
        })
        .collect()
}
