//! A plan: tasks with their inputs and outputs (value ids), each group's task order, the values
//! placed on groups before the run, and the values to return.

use std::collections::{BTreeSet, HashMap};

/// Identifies a value flowing between tasks (SSA: produced once).
pub type ValueId = usize;

/// One task of a plan.
#[derive(Debug, Clone)]
pub struct TaskSpec<T> {
    /// A name for timings and errors, e.g. `fwd s1 mb3`.
    pub name: String,
    /// The group that runs it.
    pub group: usize,
    /// The values it reads, in argument order.
    pub inputs: Vec<ValueId>,
    /// The values it produces, in result order.
    pub outputs: Vec<ValueId>,
    /// What the executor needs to run it (e.g. a compiled executable's index).
    pub payload: T,
}

/// Everything a run needs besides the executor, the transport and the initial values.
#[derive(Debug, Clone)]
pub struct Plan<T> {
    /// The tasks.
    pub tasks: Vec<TaskSpec<T>>,
    /// For each group, the indices of its tasks in the order it runs them.
    pub order: Vec<Vec<usize>>,
    /// The values to collect at the end, with the group to collect each from.
    pub results: Vec<(ValueId, usize)>,
}

/// A plan that does not hold together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A task index in `order` is out of range, listed twice, or on the wrong group.
    #[error("task {task} is listed in group {group}'s order but {reason}")]
    BadOrder {
        /// The task.
        task: usize,
        /// The group whose list names it.
        group: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A task is in no group's order.
    #[error("task {0} ('{1}') is in no group's order")]
    Unscheduled(usize, String),
    /// A value is placed on, or collected from, a group that does not exist.
    #[error("value {value} is {what} group {group}, but the plan has {groups} groups")]
    UnknownGroup {
        /// The value.
        value: ValueId,
        /// `placed on` or `collected from`.
        what: &'static str,
        /// The group named.
        group: usize,
        /// The number of groups.
        groups: usize,
    },
    /// A value is produced twice.
    #[error("value {value} is produced by both '{first}' and '{second}'")]
    ProducedTwice {
        /// The value.
        value: ValueId,
        /// The first producer.
        first: String,
        /// The second producer.
        second: String,
    },
}

impl<T> Plan<T> {
    /// Checks the plan's structure (dependencies and deadlocks are found at run time).
    pub fn check(&self) -> Result<(), PlanError> {
        let mut seen = vec![false; self.tasks.len()];
        for (group, list) in self.order.iter().enumerate() {
            for &task in list {
                let spec = self.tasks.get(task).ok_or(PlanError::BadOrder {
                    task,
                    group,
                    reason: "does not exist",
                })?;
                if spec.group != group {
                    return Err(PlanError::BadOrder {
                        task,
                        group,
                        reason: "belongs to another group",
                    });
                }
                if std::mem::replace(&mut seen[task], true) {
                    return Err(PlanError::BadOrder {
                        task,
                        group,
                        reason: "is listed twice",
                    });
                }
            }
        }
        if let Some(task) = seen.iter().position(|s| !s) {
            return Err(PlanError::Unscheduled(task, self.tasks[task].name.clone()));
        }
        let groups = self.order.len();
        if let Some(&(value, group)) = self.results.iter().find(|&&(_, g)| g >= groups) {
            return Err(PlanError::UnknownGroup {
                value,
                what: "collected from",
                group,
                groups,
            });
        }
        let mut producer: HashMap<ValueId, &str> = HashMap::new();
        for task in &self.tasks {
            for &value in &task.outputs {
                if let Some(first) = producer.insert(value, &task.name) {
                    return Err(PlanError::ProducedTwice {
                        value,
                        first: first.into(),
                        second: task.name.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// The group producing each value.
    pub(crate) fn producers(&self) -> HashMap<ValueId, usize> {
        self.tasks
            .iter()
            .flat_map(|t| t.outputs.iter().map(move |&v| (v, t.group)))
            .collect()
    }

    /// For each value, the groups other than its producer's that read it (or collect it).
    pub(crate) fn remote_consumers(&self) -> HashMap<ValueId, BTreeSet<usize>> {
        let producer = self.producers();
        let mut consumers: HashMap<ValueId, BTreeSet<usize>> = HashMap::new();
        let reads = self
            .tasks
            .iter()
            .flat_map(|t| t.inputs.iter().map(move |&v| (v, t.group)));
        for (value, group) in reads.chain(self.results.iter().copied()) {
            if producer.get(&value).is_some_and(|&p| p != group) {
                consumers.entry(value).or_default().insert(group);
            }
        }
        consumers
    }
}
