//! Forward-only plans: a pipeline that runs only the stages' forwards (an eval loss, inference),
//! as JAXPP pipelines inference.
//!
//! [`ForwardOnly`] turns any schedule into one: the same placement (so each stage runs on the
//! actor that holds its parameters in training), and on every actor the forwards of its stages
//! in micro-batch-major order (`Fwd(s, m)` before `Fwd(s', m')` when `m < m'`, or `m = m'` and
//! `s < s'`), GPipe's forward order. With no backward, no activation waits for a backward, so
//! this order is as fast as any: every actor starts micro-batch `m + 1` as soon as its input
//! arrives. Every actor's list follows one global order in which each forward comes after the
//! one it reads, so the plan never deadlocks, whatever the placement or micro-batch count.
//!
//! [`validate_forward_only`] checks such a plan: every forward exactly once, no backward task,
//! dependencies and deadlock freedom as [`crate::validate()`] checks them.

use crate::error::{ScheduleError, ValidationError};
use crate::placement::Placement;
use crate::schedule::{Plan, Schedule};
use crate::task::{Action, Task};

/// The forward-only schedule of another schedule: its placement, forwards only.
pub struct ForwardOnly<'a> {
    inner: &'a dyn Schedule,
}

impl<'a> ForwardOnly<'a> {
    /// The forward-only schedule of `inner` (its placement and name).
    pub fn new(inner: &'a dyn Schedule) -> ForwardOnly<'a> {
        ForwardOnly { inner }
    }
}

impl Schedule for ForwardOnly<'_> {
    fn name(&self) -> String {
        format!("{} (forward only)", self.inner.name())
    }

    fn placement(&self) -> Placement {
        self.inner.placement()
    }

    fn actions(&self, microbatches: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        Ok(forward_actions(&self.placement(), microbatches))
    }
}

/// Each actor's forwards under `placement`, micro-batch-major (see the module docs).
pub fn forward_actions(placement: &Placement, microbatches: u32) -> Vec<Vec<Action>> {
    let mut actors = vec![Vec::new(); placement.num_actors() as usize];
    for mb in 0..microbatches {
        for stage in 0..placement.num_stages() {
            if let Some(list) = placement
                .actor(stage)
                .and_then(|a| actors.get_mut(a as usize))
            {
                list.push(Action::Single(Task::fwd(stage, mb)));
            }
        }
    }
    actors
}

/// Checks a forward-only plan: like [`crate::validate()`], but every stage and micro-batch has
/// one `Fwd` and no task is a backward.
pub fn validate_forward_only(plan: &Plan) -> Result<(), ValidationError> {
    let index = crate::validate::Index::build_forward_only(plan)?;
    crate::validate::run(plan, &index, |_| 0.0, 0.0).map(|_| ())
}
