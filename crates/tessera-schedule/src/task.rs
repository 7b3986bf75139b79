//! Tasks and actions: the vocabulary of a schedule.
//!
//! A [`Task`] is one piece of work of one stage on one microbatch: its forward ([`TaskKind::Fwd`]),
//! its whole backward ([`TaskKind::Bwd`]), or, for zero-bubble schedules, the two halves of the
//! backward: input gradients ([`TaskKind::BwdI`]) and weight gradients ([`TaskKind::BwdW`]).
//!
//! An [`Action`] is what an actor runs as one program: a single task, or several tasks fused
//! into one (JAXPP fuses the last stage's forward and backward in Interleaved1F1B and KimiK2, and
//! DualPipeV fuses a forward with another stage's `BwdI` and `BwdW`; Tessera can also fuse the
//! last stage in 1F1B and the first stage's `BwdI` and `BwdW` in ZeroBubble, as options). The
//! tasks of a fused action run in the order listed, and their results become visible to other
//! actors when the whole action ends.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The index of a pipeline stage, `0..num_stages`, in the order the forward pass visits them.
pub type StageId = u32;
/// The index of a microbatch, `0..num_microbatches`.
pub type Microbatch = u32;
/// The index of an actor (an MPMD group of devices), `0..num_actors`.
pub type ActorId = u32;

/// What a task computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    /// The forward of a stage.
    Fwd,
    /// The whole backward of a stage: input and weight gradients together.
    Bwd,
    /// The input-gradient half of a split backward (zero-bubble schedules).
    BwdI,
    /// The weight-gradient half of a split backward; runs after the matching `BwdI`.
    BwdW,
}

impl TaskKind {
    /// All kinds, in the order used by legends.
    pub const ALL: [TaskKind; 4] = [TaskKind::Fwd, TaskKind::Bwd, TaskKind::BwdI, TaskKind::BwdW];

    /// The one-letter name used by the text renderings: `F`, `B`, `I`, `W`.
    pub fn letter(self) -> char {
        match self {
            TaskKind::Fwd => 'F',
            TaskKind::Bwd => 'B',
            TaskKind::BwdI => 'I',
            TaskKind::BwdW => 'W',
        }
    }

    /// A human-readable name for legends.
    pub fn description(self) -> &'static str {
        match self {
            TaskKind::Fwd => "forward",
            TaskKind::Bwd => "backward",
            TaskKind::BwdI => "backward, input grads",
            TaskKind::BwdW => "backward, weight grads",
        }
    }

    /// The elementary parts of the work this kind covers.
    pub(crate) fn parts(self) -> &'static [Part] {
        match self {
            TaskKind::Fwd => &[Part::F],
            TaskKind::Bwd => &[Part::I, Part::W],
            TaskKind::BwdI => &[Part::I],
            TaskKind::BwdW => &[Part::W],
        }
    }
}

/// The elementary parts of a stage's work on one microbatch; a `Bwd` covers `I` and `W`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Part {
    F,
    I,
    W,
}

impl Part {
    pub(crate) const COUNT: usize = 3;

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// One piece of work: `kind` of stage `stage` on microbatch `mb`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Task {
    /// What is computed.
    pub kind: TaskKind,
    /// The stage.
    pub stage: StageId,
    /// The microbatch.
    #[serde(rename = "microbatch")]
    pub mb: Microbatch,
}

impl Task {
    /// The forward of `stage` on microbatch `mb`.
    pub fn fwd(stage: StageId, mb: Microbatch) -> Task {
        Task {
            kind: TaskKind::Fwd,
            stage,
            mb,
        }
    }

    /// The whole backward of `stage` on microbatch `mb`.
    pub fn bwd(stage: StageId, mb: Microbatch) -> Task {
        Task {
            kind: TaskKind::Bwd,
            stage,
            mb,
        }
    }

    /// The input-gradient backward of `stage` on microbatch `mb`.
    pub fn bwd_i(stage: StageId, mb: Microbatch) -> Task {
        Task {
            kind: TaskKind::BwdI,
            stage,
            mb,
        }
    }

    /// The weight-gradient backward of `stage` on microbatch `mb`.
    pub fn bwd_w(stage: StageId, mb: Microbatch) -> Task {
        Task {
            kind: TaskKind::BwdW,
            stage,
            mb,
        }
    }
}

impl fmt::Display for Task {
    /// `Fwd(stage, mb)`, `Bwd(…)`, `BwdI(…)`, `BwdW(…)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}({}, {})", self.kind, self.stage, self.mb)
    }
}

/// What an actor runs as one program: one task, or several fused tasks run in the given order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// A single task.
    Single(Task),
    /// Tasks compiled and run as one program, in this order.
    Fused(Vec<Task>),
}

impl Action {
    /// The tasks of this action, in execution order.
    pub fn tasks(&self) -> &[Task] {
        match self {
            Action::Single(task) => std::slice::from_ref(task),
            Action::Fused(tasks) => tasks,
        }
    }

    /// Whether this action fuses several tasks.
    pub fn is_fused(&self) -> bool {
        matches!(self, Action::Fused(_))
    }

    /// Fuses two tasks into one action.
    pub fn fuse(first: Task, second: Task) -> Action {
        Action::Fused(vec![first, second])
    }
}

impl From<Task> for Action {
    fn from(task: Task) -> Action {
        Action::Single(task)
    }
}

impl fmt::Display for Action {
    /// A single task prints as the task; a fused action as `Fused[Fwd(3, 1) + Bwd(3, 1)]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Single(task) => write!(f, "{task}"),
            Action::Fused(tasks) => {
                write!(f, "Fused[")?;
                for (i, task) in tasks.iter().enumerate() {
                    if i > 0 {
                        write!(f, " + ")?;
                    }
                    write!(f, "{task}")?;
                }
                write!(f, "]")
            }
        }
    }
}
