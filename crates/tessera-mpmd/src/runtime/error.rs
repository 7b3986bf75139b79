//! Why a run failed. The first failure is the run's error; every other group stops.

use std::time::Duration;

use super::plan::{PlanError, ValueId};

/// An error from an executor or a transport.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What passed its deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stuck {
    /// The group waited for this input of the task and it never arrived.
    Input(ValueId),
    /// The task ran and did not return; these are the values it was to produce.
    Running(Vec<ValueId>),
}

impl std::fmt::Display for Stuck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stuck::Input(value) => write!(f, "waited for its input value {value}"),
            Stuck::Running(values) => {
                write!(f, "ran without returning its outputs (values {values:?})")
            }
        }
    }
}

/// Why a run failed. The first failure stops every worker.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The plan is malformed.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A task failed.
    #[error("task '{task}' on group {group} failed: {source}")]
    Task {
        /// The task.
        task: String,
        /// Its group.
        group: usize,
        /// The executor's error.
        source: BoxError,
    },
    /// A task returned the wrong number of outputs.
    #[error("task '{task}' returned {actual} outputs but the plan expects {expected}")]
    OutputArity {
        /// The task.
        task: String,
        /// Outputs the plan lists.
        expected: usize,
        /// Outputs returned.
        actual: usize,
    },
    /// Sending or receiving a value failed.
    #[error(
        "moving value {value} from group {from} to group {to} failed (task '{task}' on group {group}): {source}"
    )]
    Transfer {
        /// The value.
        value: ValueId,
        /// Source group.
        from: usize,
        /// Destination group.
        to: usize,
        /// The group that saw the failure (the sender's or the receiver's).
        group: usize,
        /// The task that produced (when sending) or reads (when receiving) the value.
        task: String,
        /// The transport's error.
        source: BoxError,
    },
    /// A wait passed its deadline.
    #[error(
        "deadline passed: group {group}, task '{task}' {stuck} for longer than {timeout:?}{holdup}; every group was stopped (raise `tessera train --timeout`, TESSERA_TIMEOUT_S or the run's timeout if the step is only slow)"
    )]
    Timeout {
        /// The group.
        group: usize,
        /// The task.
        task: String,
        /// The value waited for, or the values of a task that did not return.
        stuck: Stuck,
        /// The deadline.
        timeout: Duration,
        /// The chain of waits to the group holding the run up (empty when not known).
        holdup: String,
    },
    /// Another process gave up at its deadline while this group waited.
    #[error(
        "group {group}, task '{task}' stopped waiting as the process of group {by} gave up at its deadline{holdup}"
    )]
    PeerGaveUp {
        /// The group.
        group: usize,
        /// The task.
        task: String,
        /// The group of the process that gave up.
        by: usize,
        /// The chain of waits to the group holding the run up.
        holdup: String,
    },
    /// A task would consume (donate) a value that is still needed.
    #[error(
        "task '{task}' on group {group} donates value {value}, but {why}; donate only a value's last use"
    )]
    Donation {
        /// The group.
        group: usize,
        /// The task.
        task: String,
        /// The value.
        value: ValueId,
        /// Why the value is still needed.
        why: &'static str,
    },
    /// Every worker is waiting and nothing is in flight.
    #[error(
        "deadlock: group {group} waits for value {value} before task '{task}', and no group can still produce it (check the schedule's order)"
    )]
    Deadlock {
        /// The waiting group.
        group: usize,
        /// The task it wants to run.
        task: String,
        /// The value it waits for.
        value: ValueId,
    },
    /// A result value was never produced on the group it is collected from.
    #[error("result value {value} is not on group {group} at the end of the run")]
    MissingResult {
        /// The value.
        value: ValueId,
        /// The group.
        group: usize,
    },
    /// The group stopped because another group failed (never the error a run returns: the
    /// first failure is).
    #[error("group {0} stopped because another group failed")]
    Stopped(usize),
    /// A worker thread panicked (a bug in an executor).
    #[error("the worker of group {0} panicked")]
    Panicked(usize),
    /// A worker thread could not be started.
    #[error("could not start the worker of group {group}: {source}")]
    Spawn {
        /// The group.
        group: usize,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The run's options are unusable.
    #[error("{0}")]
    Options(String),
}
