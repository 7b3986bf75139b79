//! Running a plan: one worker thread per group, a watchdog on the caller's thread that enforces
//! the deadline of running tasks, error propagation and deadlock detection.
//!
//! Workers are plain threads sharing the plan, the executor and the transport through `Arc`s, so
//! a run can return while a worker is stuck inside an executor that never returns: after a
//! failure the caller waits a short grace for the workers to stop, then returns the error and
//! leaves a stuck worker to finish (it runs no further task).
//!
//! Each worker asks Linux for a short time slice
//! ([`tessera_pjrt::background::wake_promptly`]): a worker woken by an arrived input then
//! preempts a compute thread instead of waiting out its slice. On the demo's 4 groups of 2 CPU
//! devices sharing 2 cores, the busiest group's exposed transfer wait fell from a median 5.5%
//! of the step to 2.8% (10 alternating runs each, the same step times).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::error::{RunError, Stuck};
use super::options::RunOptions;
use super::plan::{Plan, PlanError, ValueId};
use super::trace::{InputWait, TaskTiming, Timings, TransferTiming, ValueSpan};
use super::transport::Transport;
use super::worker::{Executor, Worker};

/// What a run returns: the result values in `plan.results` order, and the task timings.
#[derive(Debug)]
pub struct RunOutput<V> {
    /// The results.
    pub results: Vec<V>,
    /// When each task ran.
    pub timings: Timings,
}

/// Who waits for what and who runs what, under one lock so that a deadlock is seen exactly.
pub(super) struct Coord {
    /// Workers still running their lists.
    active: usize,
    /// Per group, the value its worker waits to receive.
    pub(super) waiting: Vec<Option<ValueId>>,
    /// Per group, the task its worker runs and since when.
    pub(super) running: Vec<Option<(usize, Instant)>>,
    /// Per group, the last task (its index in the plan) its worker finished.
    pub(super) done: Vec<Option<usize>>,
    /// `(destination, value)` pairs handed to the transport.
    pub(super) sent: HashSet<(usize, ValueId)>,
    /// Per group, whether this process runs it (all of them in a one-process run).
    local: Vec<bool>,
}

/// State shared by the workers of one run.
pub(super) struct Shared<T, V> {
    pub(super) plan: Arc<Plan<T>>,
    pub(super) executor: Arc<dyn Executor<T, V>>,
    pub(super) transport: Arc<dyn Transport<V>>,
    pub(super) consumers: HashMap<ValueId, BTreeSet<usize>>,
    pub(super) producer: HashMap<ValueId, usize>,
    /// `(value, group)` pairs the run returns: never dropped.
    pub(super) kept: HashSet<(ValueId, usize)>,
    pub(super) timeout: Duration,
    pub(super) abort: AtomicBool,
    error: Mutex<Option<RunError>>,
    coord: Mutex<Coord>,
    timings: Mutex<Vec<TaskTiming>>,
    transfers: Mutex<Vec<TransferTiming>>,
    waits: Mutex<Vec<InputWait>>,
    values: Mutex<Vec<ValueSpan>>,
    start: Instant,
    /// When the run began, in microseconds since the Unix epoch.
    epoch_unix_us: f64,
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<T, V> Shared<T, V> {
    /// Records `error` unless an earlier one is recorded, and stops every worker.
    pub(super) fn fail(&self, error: RunError) {
        let mut slot = lock(&self.error);
        if slot.is_none() {
            *slot = Some(error);
        }
        self.abort.store(true, Ordering::SeqCst);
    }

    pub(super) fn coord(&self) -> MutexGuard<'_, Coord> {
        lock(&self.coord)
    }

    pub(super) fn since_start(&self, t: Instant) -> f64 {
        t.duration_since(self.start).as_secs_f64() * 1e6
    }

    pub(super) fn record(&self, timing: TaskTiming) {
        lock(&self.timings).push(timing);
    }

    pub(super) fn record_transfer(&self, timing: TransferTiming) {
        lock(&self.transfers).push(timing);
    }

    pub(super) fn record_wait(&self, wait: InputWait) {
        lock(&self.waits).push(wait);
    }

    pub(super) fn record_value(&self, span: ValueSpan) {
        lock(&self.values).push(span);
    }

    /// Every running worker waits for a value nobody has sent: nothing can ever arrive. A value
    /// produced in another process may still come, so a wait for one is never a deadlock here
    /// (the deadline bounds it).
    pub(super) fn deadlocked(&self) -> bool {
        let coord = self.coord();
        let waiting: Vec<(usize, ValueId)> = coord
            .waiting
            .iter()
            .enumerate()
            .filter_map(|(g, v)| v.map(|v| (g, v)))
            .collect();
        let produced_here = |v: &ValueId| {
            self.producer
                .get(v)
                .is_some_and(|&g| coord.local.get(g).copied().unwrap_or(false))
        };
        waiting.len() == coord.active
            && waiting
                .iter()
                .all(|key| !coord.sent.contains(key) && produced_here(&key.1))
    }

    /// A task that has run past the deadline, as the error naming it.
    fn overdue(&self) -> Option<RunError> {
        let coord = self.coord();
        coord
            .running
            .iter()
            .enumerate()
            .find_map(|(group, r)| match r {
                Some((task, since)) if since.elapsed() > self.timeout => {
                    Some(self.running_too_long(group, *task))
                }
                _ => None,
            })
    }

    /// The task producing `value`, if it has been running since before `since`, as the error
    /// naming it.
    pub(super) fn stuck_producer(&self, value: ValueId, since: Instant) -> Option<RunError> {
        let group = *self.producer.get(&value)?;
        let (task, began) = self.coord().running.get(group).copied().flatten()?;
        (began <= since).then(|| self.running_too_long(group, task))
    }

    fn running_too_long(&self, group: usize, task: usize) -> RunError {
        let task = &self.plan.tasks[task];
        RunError::Timeout {
            group,
            task: task.name.clone(),
            stuck: Stuck::Running(task.outputs.clone()),
            timeout: self.timeout,
            holdup: String::new(),
        }
    }
}

/// How often the watchdog looks at running tasks.
const WATCH: Duration = Duration::from_millis(5);
/// After a failure, how long the run waits for workers to stop before it returns without them
/// (a worker inside a task is not waited for: it runs no further task once that one returns).
const GRACE: Duration = Duration::from_secs(2);

/// Runs `plan`: `initial` places values on groups before any task starts. Every wait is bounded
/// by `options.timeout`; the first failure stops every group and is the run's error.
pub fn run<T, V>(
    plan: Arc<Plan<T>>,
    initial: Vec<(ValueId, usize, V)>,
    executor: Arc<dyn Executor<T, V>>,
    transport: Arc<dyn Transport<V>>,
    options: &RunOptions,
) -> Result<RunOutput<V>, RunError>
where
    T: Send + Sync + 'static,
    V: Send + 'static,
{
    let all: Vec<usize> = (0..plan.order.len()).collect();
    let out = run_local(plan.clone(), initial, executor, transport, options, &all)?;
    let results = out
        .results
        .into_iter()
        .zip(&plan.results)
        .map(|(v, &(value, group))| v.ok_or(RunError::MissingResult { value, group }))
        .collect::<Result<_, _>>()?;
    Ok(RunOutput {
        results,
        timings: out.timings,
    })
}

/// Runs this process's share of `plan`, the groups in `local`, as [`run`] runs all of them: the
/// other groups run in other processes and their values cross through `transport`. A result
/// collected from another process's group is `None`; the timings are this process's tasks.
pub fn run_local<T, V>(
    plan: Arc<Plan<T>>,
    initial: Vec<(ValueId, usize, V)>,
    executor: Arc<dyn Executor<T, V>>,
    transport: Arc<dyn Transport<V>>,
    options: &RunOptions,
    local: &[usize],
) -> Result<RunOutput<Option<V>>, RunError>
where
    T: Send + Sync + 'static,
    V: Send + 'static,
{
    plan.check()?;
    let groups = plan.order.len();
    let is_local: Vec<bool> = (0..groups).map(|g| local.contains(&g)).collect();
    let mut stores: Vec<Vec<(ValueId, V)>> = (0..groups).map(|_| Vec::new()).collect();
    for (value, group, v) in initial {
        let store = stores.get_mut(group).ok_or(PlanError::UnknownGroup {
            value,
            what: "placed on",
            group,
            groups,
        })?;
        store.push((value, v));
    }
    let shared = Arc::new(Shared {
        consumers: plan.remote_consumers(),
        producer: plan.producers(),
        kept: plan.results.iter().copied().collect(),
        plan,
        executor,
        transport,
        timeout: options.timeout,
        abort: AtomicBool::new(false),
        error: Mutex::new(None),
        coord: Mutex::new(Coord {
            active: is_local.iter().filter(|&&l| l).count(),
            waiting: vec![None; groups],
            running: vec![None; groups],
            done: vec![None; groups],
            sent: HashSet::new(),
            local: is_local.clone(),
        }),
        timings: Mutex::new(Vec::new()),
        transfers: Mutex::new(Vec::new()),
        waits: Mutex::new(Vec::new()),
        values: Mutex::new(Vec::new()),
        start: Instant::now(),
        epoch_unix_us: super::trace::unix_now_us(),
    });
    let (done, finished) = mpsc::channel();
    for (group, store) in stores.into_iter().enumerate() {
        if !is_local[group] {
            continue;
        }
        let worker = Worker::new(group, store, shared.clone());
        let (done, shared_here) = (done.clone(), shared.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("tessera-group-{group}"))
            .spawn(move || {
                // A worker mostly waits, and its wake-up on an arrived input is the transfer's
                // exposed time: run it promptly when woken (a short slice).
                tessera_pjrt::background::wake_promptly();
                let result = tessera_ir::panics::catch_unwind(|| worker.run());
                let store = result.unwrap_or_else(|_| {
                    shared_here.fail(RunError::Panicked(group));
                    None
                });
                shared_here.coord().active -= 1;
                let _ = done.send((group, store));
            });
        if let Err(source) = spawned {
            shared.fail(RunError::Spawn { group, source });
            shared.coord().active -= 1;
        }
    }
    drop(done);
    let stores = watch(&shared, &finished, &is_local);
    let failure = lock(&shared.error).take();
    if let Some(error) = failure {
        return Err(error);
    }
    let mut stores: Vec<HashMap<ValueId, V>> =
        stores.into_iter().map(Option::unwrap_or_default).collect();
    let results = shared
        .plan
        .results
        .iter()
        .map(|&(value, group)| {
            if !is_local[group] {
                return Ok(None);
            }
            stores
                .get_mut(group)
                .and_then(|s| s.remove(&value))
                .map(Some)
                .ok_or(RunError::MissingResult { value, group })
        })
        .collect::<Result<_, _>>()?;
    let mut tasks = std::mem::take(&mut *lock(&shared.timings));
    tasks.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
    let mut transfers = std::mem::take(&mut *lock(&shared.transfers));
    transfers.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
    let mut values = std::mem::take(&mut *lock(&shared.values));
    values.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
    let mut waits = std::mem::take(&mut *lock(&shared.waits));
    waits.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
    Ok(RunOutput {
        results,
        timings: Timings {
            tasks,
            transfers,
            values,
            waits,
            epoch_unix_us: shared.epoch_unix_us,
        },
    })
}

type Finished<V> = mpsc::Receiver<(usize, Option<HashMap<ValueId, V>>)>;

/// Collects the workers' stores, failing a task that runs past the deadline; after a failure
/// waits at most [`GRACE`] for the workers still running.
fn watch<T, V>(
    shared: &Shared<T, V>,
    finished: &Finished<V>,
    local: &[bool],
) -> Vec<Option<HashMap<ValueId, V>>> {
    let mut stores: Vec<Option<HashMap<ValueId, V>>> = local.iter().map(|_| None).collect();
    let mut pending = local.iter().filter(|&&l| l).count();
    // Another process's group is never waited for here.
    let mut done: Vec<bool> = local.iter().map(|&l| !l).collect();
    let mut failed_at: Option<Instant> = None;
    while pending > 0 {
        match finished.recv_timeout(WATCH) {
            Ok((group, store)) => {
                stores[group] = store;
                done[group] = true;
                pending -= 1;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if let Some(error) = shared.overdue() {
            shared.fail(error);
        }
        if shared.abort.load(Ordering::SeqCst) {
            let waited = failed_at.get_or_insert_with(Instant::now).elapsed();
            if waited > GRACE || only_tasks_left(shared, &done) {
                break;
            }
        }
    }
    stores
}

/// Whether every worker still going is inside a task (and will stop once it returns).
fn only_tasks_left<T, V>(shared: &Shared<T, V>, done: &[bool]) -> bool {
    let coord = shared.coord();
    done.iter()
        .zip(&coord.running)
        .all(|(&done, running)| done || running.is_some())
}
