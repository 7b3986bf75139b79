//! DualPipeVDeepSeek: DeepSeek's V-shaped cut of DualPipe in the order of DeepSeek's reference
//! (DeepSeek-V3 report; the DualPipe repository's `dualpipev.py`, after Sea AI Lab's
//! "cut-in-half"). [`super::DualPipeV`] is JAXPP's port of the same schedule, which orders some
//! backwards differently; `docs/schedules.md` compares the two.
//!
//! `2D` stages on `D` actors: actor `r` runs stage `r` (going down) and stage `2D-1-r` (coming
//! back up), so the first and last stages share actor 0. Each actor runs eight phases (see
//! [`actor_list`]); in the main phase a forward of one stage runs fused with a backward of the
//! other, so their compute and communication overlap. Some backwards are split (zero-bubble
//! style) and their `BwdW` deferred, FIFO, to fill bubbles. Bubble `(D-1)(F&B + B - 3W)` and
//! `2D+1` live stage-microbatches per actor, where `F&B` is the time of a fused forward and
//! backward (`F + B` when they do not overlap, as this crate's simulator assumes). As in JAXPP,
//! stage 0's backward is never split.

use std::collections::VecDeque;

use super::common::Counters;
use super::dualpipev::{check_microbatches_v, check_v_stages};
use crate::error::ScheduleError;
use crate::placement::Placement;
use crate::schedule::Schedule;
use crate::task::{Action, ActorId, StageId, Task, TaskKind};

/// DualPipeV in DeepSeek's reference order: `stages = 2 × mpmd_dim`, V-shaped placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DualPipeVDeepSeek {
    mpmd_dim: u32,
}

impl DualPipeVDeepSeek {
    /// DualPipeV over `stages` stages on `mpmd_dim` actors; `stages` must be `2 × mpmd_dim`.
    pub fn new(stages: u32, mpmd_dim: u32) -> Result<DualPipeVDeepSeek, ScheduleError> {
        check_v_stages(stages, mpmd_dim)?;
        Ok(DualPipeVDeepSeek { mpmd_dim })
    }
}

impl Schedule for DualPipeVDeepSeek {
    fn name(&self) -> String {
        "dualpipev-deepseek".into()
    }

    fn placement(&self) -> Placement {
        Placement::v_shape(2 * self.mpmd_dim, self.mpmd_dim).expect("checked by the constructor")
    }

    fn actions(&self, m: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        let d = self.mpmd_dim;
        check_microbatches_v("dualpipev-deepseek", d, m)?;
        Ok((0..d).map(|r| actor_list(d, r, m)).collect())
    }
}

/// One actor's list, tracking its deferred weight gradients.
struct Builder {
    it: Counters,
    deferred: VecDeque<Task>,
    out: Vec<Action>,
}

impl Builder {
    fn fwd(&mut self, stage: StageId) -> Task {
        self.it.next(TaskKind::Fwd, stage)
    }

    /// A backward of `stage`; with `split` (and not stage 0) only its `BwdI`, deferring `BwdW`.
    fn bwd(&mut self, stage: StageId, split: bool) -> Task {
        if split && stage != 0 {
            let task = self.it.next(TaskKind::BwdI, stage);
            self.deferred.push_back(Task::bwd_w(stage, task.mb));
            return task;
        }
        let task = self.it.next(TaskKind::BwdI, stage);
        Task::bwd(stage, task.mb)
    }

    fn push(&mut self, task: Task) {
        self.out.push(task.into());
    }

    fn fused(&mut self, f: Task, b: Task) {
        self.out.push(Action::fuse(f, b));
    }

    /// Runs the oldest deferred weight gradient, if any.
    fn weight(&mut self) {
        if let Some(w) = self.deferred.pop_front() {
            self.push(w);
        }
    }
}

/// The eight phases of actor `r` of `d`, with `s0 = r` and `s1 = 2d-1-r`.
fn actor_list(d: u32, r: ActorId, m: u32) -> Vec<Action> {
    let (s0, s1) = (r, 2 * d - 1 - r);
    let mut b = Builder {
        it: Counters::default(),
        deferred: VecDeque::new(),
        out: Vec::new(),
    };
    for _ in 0..2 * (d - r - 1) {
        let f = b.fwd(s0); // 1: forwards of the first leg
        b.push(f);
    }
    for _ in 0..r + 1 {
        let (f0, f1) = (b.fwd(s0), b.fwd(s1)); // 2: both legs
        b.push(f0);
        b.push(f1);
    }
    for _ in 0..d - r - 1 {
        let i1 = b.bwd(s1, true); // 3: zero-bubble backward, its weight, a forward
        b.push(i1);
        b.weight();
        let f1 = b.fwd(s1);
        b.push(f1);
    }
    for i in 0..m - 2 * d + r + 1 {
        let (f0, b1) = (b.fwd(s0), b.bwd(s1, false)); // 4: main phase, F&B fused
        if i == 0 && r == d - 1 {
            b.push(f0);
            b.push(b1);
        } else {
            b.fused(f0, b1);
        }
        let (f1, b0) = (b.fwd(s1), b.bwd(s0, false));
        b.fused(f1, b0);
    }
    for _ in 0..d - r - 1 {
        let b1 = b.bwd(s1, false); // 5: drain the second leg's forwards
        b.push(b1);
        let (f1, b0) = (b.fwd(s1), b.bwd(s0, false));
        b.fused(f1, b0);
    }
    let half = r.div_ceil(2);
    for i in 0..r + 1 {
        let split1 = i > half || (i == half && r % 2 == 1); // 6: backwards, second half split
        let b1 = b.bwd(s1, split1);
        b.push(b1);
        let b0 = b.bwd(s0, i >= half);
        b.push(b0);
    }
    for _ in 0..d - r - 1 {
        b.weight(); // 7: a deferred weight, a split backward
        let b0 = b.bwd(s0, true);
        b.push(b0);
    }
    while !b.deferred.is_empty() {
        b.weight(); // 8: the remaining weights
    }
    b.out
}
