//! Running a plan: the workers, their inboxes, error propagation and deadlock detection.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use super::plan::{Plan, PlanError, TaskSpec, ValueId};
use super::trace::{TaskTiming, Timings, TransferTiming};

/// An error from an executor or a transport.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs tasks: compiled programs on a group's devices, or anything else in tests.
pub trait Executor<T, V>: Sync {
    /// Runs `task` on `inputs` (in the task's input order) and returns its outputs in order.
    fn run(&self, task: &TaskSpec<T>, inputs: &[&V]) -> Result<Vec<V>, BoxError>;
}

/// Moves a value from one group's devices to another's.
pub trait Transport<V>: Sync {
    /// A copy of `value` (held by group `from`) on group `to`.
    fn transfer(&self, value: &V, from: usize, to: usize) -> Result<V, BoxError>;
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
    /// A transfer failed.
    #[error("moving value {value} from group {from} to group {to} failed: {source}")]
    Transfer {
        /// The value.
        value: ValueId,
        /// Source group.
        from: usize,
        /// Destination group.
        to: usize,
        /// The transport's error.
        source: BoxError,
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
}

/// What a run returns: the result values in `plan.results` order, and the task timings.
#[derive(Debug)]
pub struct RunOutput<V> {
    /// The results.
    pub results: Vec<V>,
    /// When each task ran.
    pub timings: Timings,
}

/// State shared by the workers of one run.
struct Shared<'p, T, V> {
    plan: &'p Plan<T>,
    consumers: HashMap<ValueId, std::collections::BTreeSet<usize>>,
    inboxes: Vec<Sender<(ValueId, V)>>,
    abort: AtomicBool,
    error: Mutex<Option<RunError>>,
    active: AtomicUsize,
    waiting: AtomicUsize,
    in_flight: AtomicUsize,
    timings: Mutex<Vec<TaskTiming>>,
    transfers: Mutex<Vec<TransferTiming>>,
    start: Instant,
}

impl<T, V> Shared<'_, T, V> {
    fn fail(&self, error: RunError) {
        let mut slot = self.error.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(error);
        }
        self.abort.store(true, Ordering::SeqCst);
    }
}

/// Runs `plan`: `initial` places values on groups before any task starts.
pub fn run<T: Sync, V: Send>(
    plan: &Plan<T>,
    initial: Vec<(ValueId, usize, V)>,
    executor: &dyn Executor<T, V>,
    transport: &dyn Transport<V>,
) -> Result<RunOutput<V>, RunError> {
    plan.check()?;
    let groups = plan.order.len();
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..groups).map(|_| mpsc::channel()).unzip();
    let mut stores: Vec<HashMap<ValueId, V>> = (0..groups).map(|_| HashMap::new()).collect();
    for (value, group, v) in initial {
        let store = stores.get_mut(group).ok_or(PlanError::UnknownGroup {
            value,
            what: "placed on",
            group,
            groups,
        })?;
        store.insert(value, v);
    }
    let shared = Shared {
        plan,
        consumers: plan.remote_consumers(),
        inboxes: senders,
        abort: AtomicBool::new(false),
        error: Mutex::new(None),
        active: AtomicUsize::new(groups),
        waiting: AtomicUsize::new(0),
        in_flight: AtomicUsize::new(0),
        timings: Mutex::new(Vec::new()),
        transfers: Mutex::new(Vec::new()),
        start: Instant::now(),
    };
    let finished: Vec<Option<HashMap<ValueId, V>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = stores
            .into_iter()
            .zip(receivers)
            .enumerate()
            .map(|(group, (store, inbox))| {
                let shared = &shared;
                scope.spawn(move || {
                    let result = Worker {
                        group,
                        store,
                        inbox,
                        shared,
                        executor,
                        transport,
                    }
                    .run();
                    shared.active.fetch_sub(1, Ordering::SeqCst);
                    result
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(group, h)| match h.join() {
                Ok(store) => store,
                Err(_) => {
                    shared.fail(RunError::Panicked(group));
                    None
                }
            })
            .collect()
    });
    if let Some(error) = shared.error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(error);
    }
    let mut stores: Vec<HashMap<ValueId, V>> = finished
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect();
    let results = plan
        .results
        .iter()
        .map(|&(value, group)| {
            stores
                .get_mut(group)
                .and_then(|s| s.remove(&value))
                .ok_or(RunError::MissingResult { value, group })
        })
        .collect::<Result<_, _>>()?;
    let mut tasks = shared
        .timings
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    tasks.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
    let mut transfers = shared
        .transfers
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    transfers.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
    Ok(RunOutput {
        results,
        timings: Timings { tasks, transfers },
    })
}

/// One group's worker.
struct Worker<'s, 'p, T, V> {
    group: usize,
    store: HashMap<ValueId, V>,
    inbox: Receiver<(ValueId, V)>,
    shared: &'s Shared<'p, T, V>,
    executor: &'s dyn Executor<T, V>,
    transport: &'s dyn Transport<V>,
}

impl<T, V> Worker<'_, '_, T, V> {
    /// Runs the group's list; returns its store, or `None` after a failure anywhere.
    fn run(mut self) -> Option<HashMap<ValueId, V>> {
        let plan = self.shared.plan;
        for &index in &plan.order[self.group] {
            let task = &plan.tasks[index];
            if let Err(error) = self.run_task(task) {
                self.shared.fail(error);
                return None;
            }
            if self.shared.abort.load(Ordering::SeqCst) {
                return None;
            }
        }
        Some(self.store)
    }

    fn run_task(&mut self, task: &TaskSpec<T>) -> Result<(), RunError> {
        for &value in &task.inputs {
            self.wait_for(value, task)?;
        }
        let inputs: Vec<&V> = task
            .inputs
            .iter()
            .filter_map(|v| self.store.get(v))
            .collect();
        let began = Instant::now();
        let outputs = self
            .executor
            .run(task, &inputs)
            .map_err(|source| RunError::Task {
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
        self.record(task, began, duration);
        for (&value, v) in task.outputs.iter().zip(outputs) {
            self.send(value, &v)?;
            self.store.insert(value, v);
        }
        Ok(())
    }

    fn record(&self, task: &TaskSpec<T>, began: Instant, duration: Duration) {
        let timing = TaskTiming {
            name: task.name.clone(),
            group: self.group,
            start_us: began.duration_since(self.shared.start).as_secs_f64() * 1e6,
            duration_us: duration.as_secs_f64() * 1e6,
        };
        self.shared
            .timings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(timing);
    }

    fn send(&self, value: ValueId, v: &V) -> Result<(), RunError> {
        let Some(groups) = self.shared.consumers.get(&value) else {
            return Ok(());
        };
        for &to in groups {
            let began = Instant::now();
            let copy = self
                .transport
                .transfer(v, self.group, to)
                .map_err(|source| RunError::Transfer {
                    value,
                    from: self.group,
                    to,
                    source,
                })?;
            let timing = TransferTiming {
                from: self.group,
                to,
                start_us: began.duration_since(self.shared.start).as_secs_f64() * 1e6,
                duration_us: began.elapsed().as_secs_f64() * 1e6,
            };
            self.shared
                .transfers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(timing);
            self.shared.in_flight.fetch_add(1, Ordering::SeqCst);
            // A closed inbox means that worker has stopped; the abort flag tells everyone why.
            if self.shared.inboxes[to].send((value, copy)).is_err() {
                self.shared.in_flight.fetch_sub(1, Ordering::SeqCst);
            }
        }
        Ok(())
    }

    /// Blocks until `value` is in the store, receiving whatever arrives meanwhile.
    fn wait_for(&mut self, value: ValueId, task: &TaskSpec<T>) -> Result<(), RunError> {
        if self.store.contains_key(&value) {
            return Ok(());
        }
        let shared = self.shared;
        shared.waiting.fetch_add(1, Ordering::SeqCst);
        let mut stalled_polls = 0;
        let outcome = loop {
            match self.inbox.recv_timeout(Duration::from_millis(5)) {
                Ok((id, v)) => {
                    self.store.insert(id, v);
                    let found = id == value;
                    if found {
                        shared.waiting.fetch_sub(1, Ordering::SeqCst);
                    }
                    shared.in_flight.fetch_sub(1, Ordering::SeqCst);
                    stalled_polls = 0;
                    if found {
                        return Ok(());
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    if shared.abort.load(Ordering::SeqCst) {
                        break Err(None);
                    }
                    let stuck = shared.waiting.load(Ordering::SeqCst)
                        == shared.active.load(Ordering::SeqCst)
                        && shared.in_flight.load(Ordering::SeqCst) == 0;
                    stalled_polls = if stuck { stalled_polls + 1 } else { 0 };
                    if stalled_polls >= 3 {
                        break Err(Some(RunError::Deadlock {
                            group: self.group,
                            task: task.name.clone(),
                            value,
                        }));
                    }
                }
            }
        };
        shared.waiting.fetch_sub(1, Ordering::SeqCst);
        match outcome {
            Ok(()) => Ok(()),
            Err(Some(error)) => Err(error),
            // Another worker failed first; its error is the one reported.
            Err(None) => Err(RunError::Stopped(self.group)),
        }
    }
}
