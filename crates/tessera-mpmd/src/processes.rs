//! A step spread over processes: each process runs some of the MPMD groups (one, under MPI) with
//! its own PJRT client, and the values between groups of different processes cross through a
//! transport the [`Processes`] makes for each run. The pipeline compiles and runs only the local
//! groups' tasks; a result held by another process's group stays there (an [`crate::MpmdArray`]
//! that is not addressable here); the micro-batch losses are broadcast from the group that
//! computes them so that every process gets the step's host results.
//!
//! Before the first step, [`Processes::agree`] compares a fingerprint of the step every process
//! built (the plan and the layout of every value), so that processes that traced different steps
//! refuse to start instead of exchanging mismatched buffers; before every call of an
//! `mpmd_jit` step, the processes compare the step they call and the shapes, element types and
//! placements of its arguments (one [`Processes::exchange`] of a hash, `mpmd_jit/agree.rs`), so
//! that a rank calling it differently gets [`ProcessError::CallsDiffer`] on every rank instead
//! of a hang.
//!
//! The collectives ([`Processes::exchange`], [`Processes::broadcast`], [`Processes::agree`])
//! wait for every process; a process that never reaches one (failed, stalled) must not leave the
//! others waiting forever: the MPI implementation bounds each by a deadline and fails with
//! [`ProcessError::Timeout`], after which the caller ends the job.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use tessera_pjrt::Array;

use crate::runtime::{BoxError, Executor, OutputLayout, Plan, Transport, ValueId};

/// Why a multi-process step could not go on.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The processes built different steps, or run on different devices or plugins.
    #[error("the processes of the job disagree: {0}")]
    Mismatch(String),
    /// A collective operation or the transport failed.
    #[error("{0}")]
    Comm(String),
    /// The processes called a step differently (checked before every call, so that no process
    /// waits forever for values another never sends): another step, another number of
    /// arguments, or argument `argument` of another shape, element type or placement.
    #[error(
        "the processes of the job called the step differently ({}): {detail}; every rank must \
         call the same step at the same point, passing each argument with the same shape and \
         element type, and alike from the host or as an array of the same groups and layout \
         (e.g. the step's own result of the last call): fix the call on the ranks named",
        ranks_text(ranks)
    )]
    CallsDiffer {
        /// The ranks whose call differs from rank 0's.
        ranks: Vec<usize>,
        /// The first argument that differs (`None`: the step or the number of arguments).
        argument: Option<usize>,
        /// What differs, as each side passes it.
        detail: String,
    },
    /// A collective of the job (an exchange, a broadcast, the agreement, a barrier) did not
    /// complete within the job's deadline: a rank failed, stalled or is still busy before it.
    /// This rank stopped waiting, no later collective can run, and the job must end (the caller
    /// aborts it, e.g. `MpiJob::abort`).
    #[error(
        "the MPI collective '{operation}' did not complete on rank {rank} within {timeout:?}: \
         {}; this rank stopped waiting and the job must end: look at the output of {} (it \
         failed, stalled or is still busy, e.g. compiling), or raise the deadline \
         (TESSERA_MPI_TIMEOUT_S=SECONDS, or MpiJob::set_timeout) if the job is only slow",
        missing_text(missing),
        look_at(missing)
    )]
    Timeout {
        /// The collective (e.g. `exchange`).
        operation: String,
        /// The rank that stopped waiting.
        rank: usize,
        /// The ranks that never reached the collective (empty: every rank reached it and one
        /// stopped inside it, e.g. it died).
        missing: Vec<usize>,
        /// The deadline that passed.
        timeout: std::time::Duration,
    },
}

/// Who did not reach a collective that timed out.
fn missing_text(missing: &[usize]) -> String {
    match missing {
        [] => "every rank reached it, so one stopped inside it (it may have died)".into(),
        some => format!("{} never reached it", ranks_text(some)),
    }
}

/// Whose output explains a collective that timed out.
fn look_at(missing: &[usize]) -> String {
    match missing {
        [] => "every rank".into(),
        some => ranks_text(some),
    }
}

/// `rank R`, or `ranks [R, S]`.
fn ranks_text(ranks: &[usize]) -> String {
    match ranks {
        [one] => format!("rank {one}"),
        many => format!("ranks {many:?}"),
    }
}

/// How the groups of a step are spread over processes (see the module docs).
pub trait Processes: Send + Sync {
    /// The groups this process runs.
    fn local_groups(&self) -> Vec<usize>;

    /// How many processes the job has, and this process's index among them.
    fn process_index(&self) -> (usize, usize);

    /// The process running `group`.
    fn process_of(&self, group: usize) -> usize;

    /// An all-to-all exchange of bytes: sends `outgoing[p]` to process `p` and returns what each
    /// process sent this one, by sender. Every process calls it at the same point.
    fn exchange(&self, outgoing: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, ProcessError>;

    /// A fresh transport for one run of the plan: `layouts` gives the global shape, element type
    /// and in-group spec of every value the plan moves between groups.
    fn transport(
        &self,
        layouts: &Arc<HashMap<ValueId, OutputLayout>>,
    ) -> Result<Arc<dyn Transport<Array>>, ProcessError>;

    /// `values` as the process running group `root` has them, in every process (each passes
    /// a vector of the same length; only the root's contents matter).
    fn broadcast(&self, root: usize, values: Vec<f64>) -> Result<Vec<f64>, ProcessError>;

    /// Checks that every process built the step whose fingerprint is `fingerprint`, compiles it
    /// for the same `partitioner` (its name) and runs on the same devices and plugin: an error
    /// naming a process that differs, and in what, otherwise.
    fn agree(&self, fingerprint: u64, partitioner: &str) -> Result<(), ProcessError>;

    /// The executor this process runs its tasks with (a hook for fault injection in tests; the
    /// executor itself by default).
    fn executor(
        &self,
        executor: Arc<dyn Executor<usize, Array>>,
    ) -> Arc<dyn Executor<usize, Array>> {
        executor
    }
}

/// Appends one frame to a message for [`Processes::exchange`]: a key, the payload's length, the
/// payload (each number 8 bytes, little-endian).
pub fn put_frame(message: &mut Vec<u8>, key: u64, payload: &[u8]) {
    message.extend(key.to_le_bytes());
    message.extend((payload.len() as u64).to_le_bytes());
    message.extend(payload);
}

/// The frames of a message made by [`put_frame`], as `(key, payload)`; `None` when it is cut
/// short.
pub fn frames(message: &[u8]) -> Option<Vec<(u64, &[u8])>> {
    let word = |at: usize| {
        let bytes: [u8; 8] = message.get(at..at + 8)?.try_into().ok()?;
        Some(u64::from_le_bytes(bytes))
    };
    let mut out = Vec::new();
    let mut at = 0;
    while at < message.len() {
        let (key, len) = (word(at)?, usize::try_from(word(at + 8)?).ok()?);
        let end = (at + 16).checked_add(len)?;
        out.push((key, message.get(at + 16..end)?));
        at = end;
    }
    Some(out)
}

/// A fingerprint of a plan and the layouts of its values: the same in every process that built
/// the same step with the same binary.
pub fn fingerprint(plan: &Plan<usize>, layouts: &HashMap<ValueId, OutputLayout>) -> u64 {
    let mut h = DefaultHasher::new();
    for task in &plan.tasks {
        (&task.name, task.group, &task.inputs, &task.outputs).hash(&mut h);
    }
    plan.order.hash(&mut h);
    plan.results.hash(&mut h);
    let mut ids: Vec<&ValueId> = layouts.keys().collect();
    ids.sort_unstable();
    for id in ids {
        let layout = &layouts[id];
        (
            id,
            &layout.shape,
            format!("{:?}", layout.ty),
            layout.spec.to_string(),
        )
            .hash(&mut h);
    }
    h.finish()
}

/// An executor that lets a test fail or stall one process's task: the wrapped executor for every
/// other task.
pub struct FaultyExecutor {
    inner: Arc<dyn Executor<usize, Array>>,
    fault: Fault,
    at_task: usize,
    seen: std::sync::atomic::AtomicUsize,
}

/// What [`FaultyExecutor`] does to its chosen task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The task fails with an error.
    Fail,
    /// The task never returns (it sleeps for an hour).
    Stall,
    /// The process kills itself with SIGKILL when the task starts.
    Kill,
    /// The task panics (the worker's catch turns it into a typed error).
    Panic,
    /// The process stops itself with SIGSTOP when the task starts (all its threads halt, as a
    /// process a debugger or the kernel stops).
    Stop,
}

impl FaultyExecutor {
    /// Wraps `inner`, applying `fault` to the `at_task`-th task this process runs (from 0).
    pub fn new(inner: Arc<dyn Executor<usize, Array>>, fault: Fault, at_task: usize) -> Self {
        FaultyExecutor {
            inner,
            fault,
            at_task,
            seen: Default::default(),
        }
    }
}

/// A stalled task: it sleeps for an hour, or until the run stops.
fn stall(stop: &dyn Fn() -> bool) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(3600);
    while std::time::Instant::now() < until && !stop() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

impl Executor<usize, Array> for FaultyExecutor {
    fn run(
        &self,
        task: &crate::runtime::TaskSpec<usize>,
        inputs: &[&Array],
    ) -> Result<Vec<Array>, BoxError> {
        self.run_stoppable(task, inputs, &|| false)
    }

    fn run_stoppable(
        &self,
        task: &crate::runtime::TaskSpec<usize>,
        inputs: &[&Array],
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<Array>, BoxError> {
        let n = self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n == self.at_task {
            match self.fault {
                Fault::Fail => {
                    return Err(
                        format!("injected failure (TESSERA_FAULT) in '{}'", task.name).into(),
                    );
                }
                Fault::Stall => stall(stop),
                Fault::Panic => panic!("injected panic (TESSERA_FAULT) in '{}'", task.name),
                Fault::Stop => {
                    let pid = std::process::id().to_string();
                    eprintln!(
                        "injected fault (TESSERA_FAULT): stopping process {pid} with SIGSTOP in '{}'",
                        task.name
                    );
                    let _ = std::process::Command::new("kill")
                        .args(["-STOP", &pid])
                        .status();
                }
                Fault::Kill => {
                    let pid = std::process::id().to_string();
                    eprintln!("injected fault (TESSERA_FAULT): killing process {pid} with SIGKILL");
                    let _ = std::process::Command::new("kill")
                        .args(["-9", &pid])
                        .status();
                    std::thread::sleep(std::time::Duration::from_secs(3600));
                }
            }
        }
        self.inner.run_stoppable(task, inputs, stop)
    }

    fn donated_inputs(&self, task: &crate::runtime::TaskSpec<usize>) -> Vec<usize> {
        self.inner.donated_inputs(task)
    }

    fn value_bytes(&self, value: &Array) -> u64 {
        self.inner.value_bytes(value)
    }
}

#[cfg(test)]
mod tests {
    use super::{frames, put_frame};

    #[test]
    fn frames_come_back_as_they_were_put_and_a_cut_message_is_refused() {
        let mut message = Vec::new();
        put_frame(&mut message, 7, b"abc");
        put_frame(&mut message, 2, b"");
        let got = frames(&message);
        assert_eq!(got, Some(vec![(7, &b"abc"[..]), (2, &b""[..])]));
        assert_eq!(frames(&message[..message.len() - 17]), None);
        assert_eq!(frames(&[]), Some(Vec::new()));
    }
}
