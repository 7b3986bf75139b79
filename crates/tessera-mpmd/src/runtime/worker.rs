//! One group's worker: runs the group's task list in order. Before a task it receives the inputs
//! other groups produce (each wait bounded by the run's deadline, and given up as soon as another
//! group fails); after it, it sends each output to the groups that read it, without waiting for
//! the copies. A value is dropped from the group's store (freeing its device buffers) right after
//! its last reader on the group has run and it has been handed to the transport for every other
//! group; values the run returns from the group are kept. The store's bytes are accounted: each
//! value's span on the group becomes a [`ValueSpan`] of the run's timings.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::error::{BoxError, RunError, Stuck};
use super::plan::{TaskSpec, ValueId};
use super::run::Shared;
use super::trace::{InputWait, TaskTiming, TransferTiming, ValueSpan};
use super::transport::PeerState;

/// Runs tasks: compiled programs on a group's devices, or anything else in tests.
pub trait Executor<T, V>: Send + Sync {
    /// Runs `task` on `inputs` (in the task's input order) and returns its outputs in order.
    /// A call that does not return within the run's deadline fails the run; its thread is left
    /// to finish in the background.
    fn run(&self, task: &TaskSpec<T>, inputs: &[&V]) -> Result<Vec<V>, BoxError>;

    /// Like [`Executor::run`], giving up once `stop()` is true (the run failed elsewhere or
    /// passed its deadline) so that the worker is not left behind: an executor whose tasks
    /// complete asynchronously waits for them in slices, checking `stop`, and returns an error
    /// when told to stop (the computation itself may finish in the background). By default it
    /// calls `run`.
    fn run_stoppable(
        &self,
        task: &TaskSpec<T>,
        inputs: &[&V],
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<V>, BoxError> {
        let _ = stop;
        self.run(task, inputs)
    }

    /// The positions of `task`'s inputs whose buffers running it consumes (donated to its
    /// outputs). The runtime hands over only a value's last use on its group (never a value the
    /// run returns or sends) and stops accounting for it when the task starts. None by default.
    fn donated_inputs(&self, task: &TaskSpec<T>) -> Vec<usize> {
        let _ = task;
        Vec::new()
    }

    /// The device bytes `value` occupies, for the run's memory accounting (0 by default).
    fn value_bytes(&self, value: &V) -> u64 {
        let _ = value;
        0
    }
}

/// How often a waiting worker looks at the abort flag and for a deadlock.
const POLL: Duration = Duration::from_millis(5);

/// A value held by a group, with its size and since when.
pub(super) struct Held<V> {
    value: V,
    bytes: u64,
    since_us: f64,
}

/// One group's worker.
pub(super) struct Worker<T, V> {
    pub(super) group: usize,
    pub(super) store: HashMap<ValueId, Held<V>>,
    pub(super) shared: std::sync::Arc<Shared<T, V>>,
    /// For each value read on this group, the position in the group's order of its last reader.
    last_read: HashMap<ValueId, usize>,
    /// The last task (its index in the plan) this worker finished.
    last_done: Option<usize>,
}

impl<T, V> Worker<T, V> {
    /// A worker for `group` holding `initial`.
    pub(super) fn new(
        group: usize,
        initial: Vec<(ValueId, V)>,
        shared: std::sync::Arc<Shared<T, V>>,
    ) -> Self {
        let plan = &shared.plan;
        let mut last_read = HashMap::new();
        for (position, &index) in plan.order[group].iter().enumerate() {
            for &value in &plan.tasks[index].inputs {
                last_read.insert(value, position);
            }
        }
        let mut worker = Worker {
            group,
            store: HashMap::new(),
            shared,
            last_read,
            last_done: None,
        };
        for (id, value) in initial {
            worker.hold(id, value);
        }
        worker
    }

    /// Runs the group's list; returns the values it keeps (the run's results from this group),
    /// or `None` after a failure anywhere.
    pub(super) fn run(mut self) -> Option<HashMap<ValueId, V>> {
        let shared = self.shared.clone();
        for (position, &index) in shared.plan.order[self.group].iter().enumerate() {
            if shared.abort.load(Ordering::SeqCst) {
                return None;
            }
            if let Err(error) = self.run_task(position, index) {
                shared.fail(error);
                return None;
            }
            self.release_after(position, index);
        }
        let end = shared.since_start(Instant::now());
        let kept = std::mem::take(&mut self.store);
        Some(
            kept.into_iter()
                .map(|(id, held)| {
                    self.account(id, &held, end);
                    (id, held.value)
                })
                .collect(),
        )
    }

    fn hold(&mut self, id: ValueId, value: V) {
        let bytes = self.shared.executor.value_bytes(&value);
        let since_us = self.shared.since_start(Instant::now());
        let held = Held {
            value,
            bytes,
            since_us,
        };
        if let Some(old) = self.store.insert(id, held) {
            self.account(id, &old, since_us);
        }
    }

    fn account(&self, id: ValueId, held: &Held<V>, end_us: f64) {
        self.shared.record_value(ValueSpan {
            value: id,
            group: self.group,
            bytes: held.bytes,
            start_us: held.since_us,
            end_us,
        });
    }

    /// Drops the values whose last reader on this group was the task at `position` (or which
    /// it produced for other groups only), unless the run returns them from this group.
    fn release_after(&mut self, position: usize, index: usize) {
        let shared = self.shared.clone();
        let task = &shared.plan.tasks[index];
        let done = |v: &ValueId| {
            self.last_read.get(v).is_none_or(|&last| last <= position)
                && !shared.kept.contains(&(*v, self.group))
        };
        let free: Vec<ValueId> = task
            .inputs
            .iter()
            .chain(&task.outputs)
            .copied()
            .filter(done)
            .collect();
        let now = shared.since_start(Instant::now());
        for id in free {
            if let Some(held) = self.store.remove(&id) {
                self.account(id, &held, now);
            }
        }
    }

    fn run_task(&mut self, position: usize, index: usize) -> Result<(), RunError> {
        let shared = self.shared.clone();
        let task = &shared.plan.tasks[index];
        for &value in &task.inputs {
            self.wait_for(value, task)?;
        }
        let donated = self.check_donated(position, task)?;
        let inputs: Vec<&V> = task
            .inputs
            .iter()
            .filter_map(|v| self.store.get(v).map(|h| &h.value))
            .collect();
        let began = Instant::now();
        shared.coord().running[self.group] = Some((index, began));
        let stop = || shared.abort.load(Ordering::SeqCst);
        let outputs = shared.executor.run_stoppable(task, &inputs, &stop);
        shared.coord().running[self.group] = None;
        let outputs = outputs.map_err(|source| RunError::Task {
            task: task.name.clone(),
            group: self.group,
            source,
        })?;
        let duration = began.elapsed();
        // The donated inputs' buffers now belong to the outputs.
        let began_us = shared.since_start(began);
        for value in donated {
            if let Some(held) = self.store.remove(&value) {
                self.account(value, &held, began_us);
            }
        }
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
        self.last_done = Some(index);
        shared.coord().done[self.group] = Some(index);
        self.report(None);
        for (&value, v) in task.outputs.iter().zip(outputs) {
            self.send(value, &v, task)?;
            self.hold(value, v);
        }
        Ok(())
    }

    /// The values `task` (at `position` in the group's list) donates, checked to be their last
    /// use: read by no later task here, not returned, not sent elsewhere.
    fn check_donated(&self, position: usize, task: &TaskSpec<T>) -> Result<Vec<ValueId>, RunError> {
        let shared = &self.shared;
        let mut values = Vec::new();
        for p in shared.executor.donated_inputs(task) {
            let Some(&value) = task.inputs.get(p) else {
                continue;
            };
            let why = if self.last_read.get(&value).is_some_and(|&l| l > position) {
                Some("a later task of the group reads it")
            } else if shared.kept.contains(&(value, self.group)) {
                Some("the run returns it")
            } else if shared.consumers.contains_key(&value)
                && shared.producer.get(&value) == Some(&self.group)
            {
                Some("it is sent to other groups")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(RunError::Donation {
                    group: self.group,
                    task: task.name.clone(),
                    value,
                    why,
                });
            }
            values.push(value);
        }
        Ok(values)
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

    /// Tells the other processes (through the transport) the last task this group finished and
    /// what it waits for now.
    fn report(&self, waiting: Option<(ValueId, usize)>) {
        let state = PeerState {
            done: self.last_done,
            waiting,
        };
        self.shared.transport.report(self.group, state);
    }

    /// Receives `value` (an input of `task` produced elsewhere) unless it is already here.
    fn wait_for(&mut self, value: ValueId, task: &TaskSpec<T>) -> Result<(), RunError> {
        if self.store.contains_key(&value) {
            return Ok(());
        }
        let shared = self.shared.clone();
        shared.coord().waiting[self.group] = Some(value);
        if let Some(&from) = shared.producer.get(&value) {
            self.report(Some((value, from)));
        }
        let began = Instant::now();
        let outcome = self.receive(value, task);
        shared.record_wait(InputWait {
            value,
            group: self.group,
            start_us: shared.since_start(began),
            end_us: shared.since_start(Instant::now()),
        });
        shared.coord().waiting[self.group] = None;
        let v = outcome?;
        // No longer waiting (so that what others hear of this group is not a wait now over).
        if shared.producer.contains_key(&value) {
            self.report(None);
        }
        self.hold(value, v);
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
            let from = shared.producer.get(&value).copied().unwrap_or(self.group);
            if let Some(by) = shared.transport.gave_up() {
                return Err(RunError::PeerGaveUp {
                    group: self.group,
                    task: task.name.clone(),
                    by,
                    holdup: super::stall::diagnose(shared, self.group, value, from),
                });
            }
            if Instant::now() >= deadline {
                // A producer stuck in a task since before this wait is the cause to report.
                let cause = shared.stuck_producer(value, deadline - shared.timeout);
                let holdup = super::stall::diagnose(shared, self.group, value, from);
                // The other processes stop too, each saying what it waits for.
                shared.transport.give_up();
                return Err(cause.unwrap_or_else(|| RunError::Timeout {
                    group: self.group,
                    task: task.name.clone(),
                    stuck: Stuck::Input(value),
                    timeout: shared.timeout,
                    holdup,
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
