//! Interleaved1F1B: Megatron-LM's interleaved schedule (Narayanan et al. 2021), and KimiK2, its
//! variant with one more warm-up forward per actor (as in JAXPP).
//!
//! `S = v·p` stages on `p` actors, stage `s` on actor `s mod p`. Microbatches go in rounds of
//! `p`: a round runs through an actor's first local stage, then its second, and so on. Actor
//! `r` warms up with `(v-1)·round + 2(p-1-r)` forwards (KimiK2: one more), then runs
//! forward/backward pairs, then drains. With each stage costing `F`, `B` the bubble is
//! `(p-1)(F+B)`, a `v`-th of the bubble of the same work on `p` stages. As in JAXPP, pairs whose
//! forward is of the last stage are fused; with `fuse_steady_state` every steady-state pair is
//! one action.
//!
//! Any microbatch count is accepted (rounds are balanced when they cannot be equal); JAXPP
//! accepts only counts that split into rounds of equal size, and for those the orders agree.

use super::common::{OneFOneB, check_stages};
use crate::error::ScheduleError;
use crate::placement::Placement;
use crate::schedule::Schedule;
use crate::task::Action;

/// The interleaved 1F1B schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interleaved1F1B {
    stages: u32,
    mpmd_dim: u32,
    fuse_steady_state: bool,
    /// Extra warm-up forwards of every actor (0; 1 for KimiK2).
    extra_warmup: u32,
}

impl Interleaved1F1B {
    /// `stages` stages on `mpmd_dim` actors (a multiple of it); `fuse_steady_state` fuses each
    /// steady-state forward/backward pair into one action.
    pub fn new(
        stages: u32,
        mpmd_dim: u32,
        fuse_steady_state: bool,
    ) -> Result<Interleaved1F1B, ScheduleError> {
        check_stages("interleaved-1f1b", stages, mpmd_dim)?;
        Ok(Interleaved1F1B {
            stages,
            mpmd_dim,
            fuse_steady_state,
            extra_warmup: 0,
        })
    }

    fn lists(&self, m: u32) -> Vec<Vec<Action>> {
        let (p, v, extra) = (
            self.mpmd_dim,
            self.stages / self.mpmd_dim,
            self.extra_warmup,
        );
        let order = OneFOneB {
            stages: self.stages,
            mpmd_dim: p,
            round_size: p,
            warmup: Box::new(move |r, rounds| (v - 1) * rounds[0].1 + 2 * (p - 1 - r) + extra),
            backward_first: false,
            fuse_last_stage: true,
            fuse_steady_state: self.fuse_steady_state,
        };
        order.lists(m)
    }
}

impl Schedule for Interleaved1F1B {
    fn name(&self) -> String {
        if self.fuse_steady_state {
            "interleaved-1f1b-fused".into()
        } else {
            "interleaved-1f1b".into()
        }
    }

    fn placement(&self) -> Placement {
        Placement::round_robin(self.stages, self.mpmd_dim).expect("checked by the constructor")
    }

    fn actions(&self, m: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        Ok(self.lists(m))
    }
}

/// KimiK2's schedule: [`Interleaved1F1B`] with one more warm-up forward on every actor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KimiK2(Interleaved1F1B);

impl KimiK2 {
    /// `stages` stages on `mpmd_dim` actors (a multiple of it); `fuse_steady_state` fuses each
    /// steady-state forward/backward pair into one action.
    pub fn new(
        stages: u32,
        mpmd_dim: u32,
        fuse_steady_state: bool,
    ) -> Result<KimiK2, ScheduleError> {
        check_stages("kimi-k2", stages, mpmd_dim)?;
        Ok(KimiK2(Interleaved1F1B {
            stages,
            mpmd_dim,
            fuse_steady_state,
            extra_warmup: 1,
        }))
    }
}

impl Schedule for KimiK2 {
    fn name(&self) -> String {
        if self.0.fuse_steady_state {
            "kimi-k2-fused".into()
        } else {
            "kimi-k2".into()
        }
    }

    fn placement(&self) -> Placement {
        self.0.placement()
    }

    fn actions(&self, m: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        Ok(self.0.lists(m))
    }
}
