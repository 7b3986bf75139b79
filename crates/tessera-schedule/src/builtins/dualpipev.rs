//! DualPipeV in JAXPP's order: DeepSeek's V-shaped cut of DualPipe (DeepSeek-V3 report) as
//! JAXPP's `dualpipev_tasks` writes it.
//!
//! `2D` stages on `D` actors: actor `r` runs stage `s0 = r` (going down) and `s1 = 2D-1-r`
//! (coming back up), so the first and last stages share actor 0. Each actor runs eight phases
//! (see [`actor_list`]). How JAXPP's order differs from DeepSeek's reference (kept as
//! [`super::DualPipeVDeepSeek`], `dualpipev-deepseek`):
//! - a whole backward is one action of two tasks, `BwdI` then `BwdW` (never a `Bwd` task), and a
//!   main-phase step is one action of three: a forward, then another stage's `BwdI` and `BwdW`;
//! - in the cool-down, which backwards are split (their `BwdW` deferred) depends on the actor's
//!   parity: odd actors split the second half of their `s1` backwards, even actors (other than
//!   actor 0, whose `s0` is stage 0) the second half of their `s0` backwards;
//! - no deferred `BwdW` runs between the split backwards of phase 7; every remaining `BwdW` runs
//!   at the end, sorted by (microbatch, stage).
//!
//! `docs/schedules.md` compares the two orders with the simulator.

use super::common::{Counters, check_microbatches, check_stages};
use crate::error::ScheduleError;
use crate::placement::Placement;
use crate::schedule::Schedule;
use crate::task::{Action, ActorId, StageId, Task, TaskKind};

/// The DualPipeV schedule in JAXPP's order: `stages = 2 × mpmd_dim`, V-shaped placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DualPipeV {
    mpmd_dim: u32,
}

impl DualPipeV {
    /// DualPipeV over `stages` stages on `mpmd_dim` actors; `stages` must be `2 × mpmd_dim`.
    pub fn new(stages: u32, mpmd_dim: u32) -> Result<DualPipeV, ScheduleError> {
        check_v_stages(stages, mpmd_dim)?;
        Ok(DualPipeV { mpmd_dim })
    }
}

/// Rejects anything but two stages per actor.
pub(crate) fn check_v_stages(stages: u32, mpmd_dim: u32) -> Result<(), ScheduleError> {
    check_stages("dualpipev", stages, mpmd_dim.max(1))?;
    if mpmd_dim == 0 || stages != 2 * mpmd_dim {
        return Err(ScheduleError::DualPipeVStages { stages, mpmd_dim });
    }
    Ok(())
}

/// Rejects fewer microbatches than stages.
pub(crate) fn check_microbatches_v(name: &str, mpmd_dim: u32, m: u32) -> Result<(), ScheduleError> {
    check_microbatches(
        name,
        m,
        2 * mpmd_dim,
        "at least the number of stages, 2 × mpmd_dim",
    )
}

impl Schedule for DualPipeV {
    fn name(&self) -> String {
        "dualpipev".into()
    }

    fn placement(&self) -> Placement {
        Placement::v_shape(2 * self.mpmd_dim, self.mpmd_dim).expect("checked by the constructor")
    }

    fn actions(&self, m: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        let d = self.mpmd_dim;
        check_microbatches_v("dualpipev", d, m)?;
        Ok((0..d).map(|r| actor_list(d, r, m)).collect())
    }
}

/// One actor's list under construction.
#[derive(Default)]
struct Builder {
    it: Counters,
    out: Vec<Action>,
}

impl Builder {
    fn next(&mut self, kind: TaskKind, stage: StageId) -> Task {
        self.it.next(kind, stage)
    }

    fn single(&mut self, kind: TaskKind, stage: StageId) {
        let task = self.next(kind, stage);
        self.out.push(task.into());
    }

    /// A whole backward: `BwdI` and `BwdW` of `stage` as one action.
    fn whole(&mut self, stage: StageId) {
        let (i, w) = (
            self.next(TaskKind::BwdI, stage),
            self.next(TaskKind::BwdW, stage),
        );
        self.out.push(Action::Fused(vec![i, w]));
    }

    /// A forward of `f` and a whole backward of `b` as one action.
    fn fwd_bwd(&mut self, f: StageId, b: StageId) {
        let fwd = self.next(TaskKind::Fwd, f);
        let (i, w) = (self.next(TaskKind::BwdI, b), self.next(TaskKind::BwdW, b));
        self.out.push(Action::Fused(vec![fwd, i, w]));
    }
}

/// The eight phases of actor `r` of `d`, with `s0 = r` and `s1 = 2d-1-r`.
fn actor_list(d: u32, r: ActorId, m: u32) -> Vec<Action> {
    use TaskKind::{BwdI, BwdW, Fwd};
    let (s0, s1) = (r, 2 * d - 1 - r);
    let mut b = Builder::default();
    for _ in 0..2 * (d - r - 1) {
        b.single(Fwd, s0); // 1: forwards of the first leg
    }
    for _ in 0..=r {
        b.single(Fwd, s0); // 2: both legs
        b.single(Fwd, s1);
    }
    for _ in 0..d - r - 1 {
        b.single(BwdI, s1); // 3: zero-bubble backward, its weight, a forward
        b.single(BwdW, s1);
        b.single(Fwd, s1);
    }
    for i in 0..m - 2 * d + r + 1 {
        if i == 0 && r == d - 1 {
            b.single(Fwd, s0); // 4: main phase, F&B fused (not the last actor's first)
            b.whole(s1);
        } else {
            b.fwd_bwd(s0, s1);
        }
        b.fwd_bwd(s1, s0);
    }
    for _ in 0..d - r - 1 {
        b.whole(s1); // 5: drain the second leg's forwards
        b.fwd_bwd(s1, s0);
    }
    let half = r.div_ceil(2);
    for i in 0..=r {
        let late = i >= half; // 6: backwards; the second half split by the actor's parity
        if late && r % 2 == 1 {
            b.single(BwdI, s1);
        } else {
            b.whole(s1);
        }
        if late && r.is_multiple_of(2) && s0 != 0 {
            b.single(BwdI, s0);
        } else {
            b.whole(s0);
        }
    }
    for _ in 0..d - r - 1 {
        if s0 == 0 {
            b.whole(s0); // 7: split backwards (stage 0's stays whole)
        } else {
            b.single(BwdI, s0);
        }
    }
    let mut weights: Vec<Task> = [s0, s1]
        .into_iter()
        .flat_map(|s| (b.it.count(BwdW, s)..m).map(move |mb| Task::bwd_w(s, mb)))
        .collect();
    weights.sort_by_key(|t| (t.mb, t.stage)); // 8: the remaining weights
    b.out.extend(weights.into_iter().map(Action::from));
    b.out
}
