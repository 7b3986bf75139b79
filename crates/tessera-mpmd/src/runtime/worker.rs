//! One group's worker: runs the group's task list in order. Before a task it receives the inputs
//! other groups produce (each wait bounded by the run's deadline, and given up as soon as another
//! group fails); after it, it sends each output to the groups that read it, without waiting for
//! the copies.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::error::{BoxError, RunError, Stuck};
use super::plan::{TaskSpec, ValueId};
use super::run::Shared;
use super::trace::{TaskTiming, TransferTiming};

/// Runs tasks: compiled programs on a group's devices, or anything else in tests.
pub trait Executor<T, V>: Send + Sync {
    /// Runs `task` on `inputs` (in the task's input order) and returns its outputs in order.
    /// A call that does not return within the run's deadline fails the run; its thread is left
    /// to finish in the background.
    fn run(&self, task: &TaskSpec<T>, inputs: &[&V]) -> Result<Vec<V>, BoxError>;
}

/// How often a waiting worker looks at the abort flag and for a deadlock.
const POLL: Duration = Duration::from_millis(5);

/// One group's worker.
pub(super) struct Worker<T, V> {
    pub(super) group: usize,
    pub(super) store: HashMap<ValueId, V>,
    pub(super) shared: std::sync::Arc<Shared<T, V>>,
}

impl<T, V> Worker<T, V> {
    /// Runs the group's list; returns its store, or `None` after a failure anywhere.
    pub(super) fn run(mut self) -> Option<HashMap<ValueId, V>> {
        let shared = self.shared.clone();
        for &index in &shared.plan.order[self.group] {
            if shared.abort.load(Ordering::SeqCst) {
                return None;
            }
            if let Err(error) = self.run_task(index) {
                shared.fail(error);
                return None;
            }
        }
        Some(self.store)
    }

    fn run_task(&mut self, index: usize) -> Result<(), RunError> {
        let shared = self.shared.clone();
        let task = &shared.plan.tasks[index];
        for &value in &task.inputs {
            self.wait_for(value, task)?;
        }
        let inputs: Vec<&V> = task
            .inputs
            .iter()
            .filter_map(|v| self.store.get(v))
            .collect();
        let began = Instant::now();
        shared.coord().running[self.group] = Some((index, began));
        let outputs = shared.executor.run(task, &inputs);
        shared.coord().running[self.group] = None;
        let outputs = outputs.map_err(|source| RunError::Task {
            task: task.name.clone(),
            group: self.group,
            source,
        })?;
        let duration = began.elapsed();
        if outputs.len() != task.outputs.len() {
            return Err(RunError::OutputArity {
                task: task.name.clone(),
                expected: task.outputs.len(),
                actual: outputs.len(),
            });
        }
        shared.record(TaskTiming {
            name: task.name.clone(),
            group: self.group,
            start_us: shared.since_start(began),
            duration_us: duration.as_secs_f64() * 1e6,
        });
        for (&value, v) in task.outputs.iter().zip(outputs) {
            self.send(value, &v, task)?;
            self.store.insert(value, v);
        }
        Ok(())
    }

    /// Hands `v` to the transport for every other group that reads it.
    fn send(&self, value: ValueId, v: &V, task: &TaskSpec<T>) -> Result<(), RunError> {
        let shared = &self.shared;
        let Some(groups) = shared.consumers.get(&value) else {
            return Ok(());
        };
        for &to in groups {
            shared.coord().sent.insert((to, value));
            let began = Instant::now();
            shared
                .transport
                .send(value, v, self.group, to)
                .map_err(|source| RunError::Transfer {
                    value,
                    from: self.group,
                    to,
                    group: self.group,
                    task: task.name.clone(),
                    source,
                })?;
            shared.record_transfer(TransferTiming {
                from: self.group,
                to,
                start_us: shared.since_start(began),
                duration_us: began.elapsed().as_secs_f64() * 1e6,
            });
        }
        Ok(())
    }

    /// Receives `value` (an input of `task` produced elsewhere) unless it is already here.
    fn wait_for(&mut self, value: ValueId, task: &TaskSpec<T>) -> Result<(), RunError> {
        if self.store.contains_key(&value) {
            return Ok(());
        }
        let shared = self.shared.clone();
        shared.coord().waiting[self.group] = Some(value);
        let outcome = self.receive(value, task);
        shared.coord().waiting[self.group] = None;
        let v = outcome?;
        self.store.insert(value, v);
        Ok(())
    }

    fn receive(&self, value: ValueId, task: &TaskSpec<T>) -> Result<V, RunError> {
        let shared = &self.shared;
        let deadline = Instant::now() + shared.timeout;
        loop {
            let slice = (Instant::now() + POLL).min(deadline);
            match shared.transport.recv(value, self.group, slice) {
                Ok(Some(v)) => return Ok(v),
                Ok(None) => {}
                Err(source) => {
                    return Err(RunError::Transfer {
                        value,
                        from: shared.producer.get(&value).copied().unwrap_or(self.group),
                        to: self.group,
                        group: self.group,
                        task: task.name.clone(),
                        source,
                    });
                }
            }
            if shared.abort.load(Ordering::SeqCst) {
                return Err(RunError::Stopped(self.group));
            }
            if Instant::now() >= deadline {
                // A producer stuck in a task since before this wait is the cause to report.
                let cause = shared.stuck_producer(value, deadline - shared.timeout);
                return Err(cause.unwrap_or_else(|| RunError::Timeout {
                    group: self.group,
                    task: task.name.clone(),
                    stuck: Stuck::Input(value),
                    timeout: shared.timeout,
                }));
            }
            if shared.deadlocked() {
                return Err(RunError::Deadlock {
                    group: self.group,
                    task: task.name.clone(),
                    value,
                });
            }
        }
    }
}
