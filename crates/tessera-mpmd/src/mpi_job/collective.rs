//! Collectives with a deadline. Every collective of an MPI job (the step's
//! [`crate::processes::Processes::exchange`], `broadcast` and `agree`, the job's `all` and
//! `gather_to_root`) runs on one thread of its own, `tessera-mpi-coll`, in the order the callers
//! ask for them (MPI needs the same order on every rank, and one collective at a time keeps
//! it), while the caller waits at most the job's deadline ([`DEFAULT_TIMEOUT`],
//! [`TIMEOUT_ENV`], [`super::MpiJob::set_timeout`]).
//!
//! A blocking MPI collective cannot be cancelled, and an immediate one (`MPI_Ialltoall`, ...)
//! cannot be abandoned without leaving MPI buffers it may still write into, which safe Rust
//! cannot do; so the thread owns each collective's buffers, and a collective past its deadline
//! is left to it: the caller gets [`ProcessError::Timeout`], every later collective is refused
//! (it could not match the other ranks' any more), and the job must end with
//! [`super::MpiJob::abort`]. Dropping the job aborts it too: `MPI_Finalize` would wait for the
//! stuck collective forever.
//!
//! Before each collective the thread tells every peer that it has reached it (one small message
//! with tag [`ARRIVED`] and the collective's number, which the peer's receiving thread records,
//! `endpoint.rs`), so that a collective past its deadline names the ranks that never reached it.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::Destination;

use crate::processes::ProcessError;

/// The deadline of a collective when neither `TESSERA_MPI_TIMEOUT_S` nor the caller sets one. A
/// collective waits for the slowest rank's work since the last one (compiling a step, rank 0's
/// unpipelined reference), so it is as generous as a step's deadline.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The environment variable that sets the deadline of every collective, in seconds (separate
/// from `TESSERA_TIMEOUT_S`, a step's waits, since ranks reach a collective as far apart as
/// their compiles).
pub const TIMEOUT_ENV: &str = "TESSERA_MPI_TIMEOUT_S";

/// The tag of the message that says a rank reached a collective (above every value's tag, in
/// the range every MPI allows).
pub(crate) const ARRIVED: i32 = 32767;

/// How many earlier collectives' arrivals are kept (a broadcast's root may finish before the
/// others arrive).
const KEPT: u64 = 16;

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Seconds as a deadline; refuses what is not a positive, finite number.
pub fn parse_timeout(text: &str) -> Result<Duration, ProcessError> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| {
            ProcessError::Comm(format!(
                "{TIMEOUT_ENV} is '{text}'; set it to a positive number of seconds, e.g. 600"
            ))
        })
}

/// The deadline from [`TIMEOUT_ENV`], or [`DEFAULT_TIMEOUT`] when it is not set.
pub(crate) fn timeout_from_env() -> Result<Duration, ProcessError> {
    match std::env::var(TIMEOUT_ENV) {
        Ok(text) => parse_timeout(&text),
        Err(_) => Ok(DEFAULT_TIMEOUT),
    }
}

/// The ranks that reached each collective, by its number (recorded by the receiving thread).
#[derive(Default)]
pub(crate) struct Arrivals(Mutex<HashMap<u64, BTreeSet<usize>>>);

impl Arrivals {
    pub(crate) fn record(&self, collective: u64, rank: usize) {
        lock(&self.0).entry(collective).or_default().insert(rank);
    }

    fn of(&self, collective: u64) -> BTreeSet<usize> {
        lock(&self.0).get(&collective).cloned().unwrap_or_default()
    }

    fn forget_before(&self, collective: u64) {
        let keep = collective.saturating_sub(KEPT);
        lock(&self.0).retain(|&n, _| n >= keep);
    }
}

type Work = Box<dyn FnOnce() + Send>;

/// The collective thread of a process (see the module docs).
pub(crate) struct Collectives {
    work: Mutex<Option<Sender<Work>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    timeout: Mutex<Duration>,
    started: AtomicU64,
    /// The error of the collective that passed its deadline, if one did.
    stuck: Mutex<Option<String>>,
    arrivals: Arc<Arrivals>,
    rank: usize,
    size: usize,
}

impl Collectives {
    /// Starts the thread of rank `rank` of `size`.
    pub(crate) fn start(
        rank: usize,
        size: usize,
        timeout: Duration,
        arrivals: Arc<Arrivals>,
    ) -> std::io::Result<Collectives> {
        let (work, queue) = mpsc::channel::<Work>();
        let thread = std::thread::Builder::new()
            .name("tessera-mpi-coll".into())
            .spawn(move || {
                for job in queue {
                    job();
                }
            })?;
        Ok(Collectives {
            work: Mutex::new(Some(work)),
            thread: Mutex::new(Some(thread)),
            timeout: Mutex::new(timeout),
            started: AtomicU64::new(0),
            stuck: Mutex::new(None),
            arrivals,
            rank,
            size,
        })
    }

    pub(crate) fn timeout(&self) -> Duration {
        *lock(&self.timeout)
    }

    pub(crate) fn set_timeout(&self, timeout: Duration) {
        *lock(&self.timeout) = timeout;
    }

    /// Runs `collective` (which every rank calls at the same point) on the collective thread
    /// and waits for it until the deadline; `operation` names it in errors.
    pub(crate) fn run<R: Send + 'static>(
        &self,
        operation: &str,
        collective: impl FnOnce(&SimpleCommunicator) -> R + Send + 'static,
    ) -> Result<R, ProcessError> {
        if let Some(stuck) = lock(&self.stuck).clone() {
            return Err(ProcessError::Comm(format!(
                "{operation}: an earlier collective of the job passed its deadline and may still \
                 be waiting, so no other collective can run; end the job (MpiJob::abort). It \
                 was: {stuck}"
            )));
        }
        let n = self.started.fetch_add(1, Ordering::SeqCst);
        let (done, result) = mpsc::sync_channel(1);
        let (rank, size) = (self.rank, self.size);
        let work: Work = Box::new(move || {
            let world = SimpleCommunicator::world();
            for peer in (0..size).filter(|&p| p != rank) {
                world
                    .process_at_rank(peer as i32)
                    .send_with_tag(&[n][..], ARRIVED);
            }
            let _ = done.send(collective(&world));
        });
        let queued = lock(&self.work).as_ref().map(|w| w.send(work).is_ok());
        if queued != Some(true) {
            return Err(ProcessError::Comm(format!(
                "{operation}: the job's collective thread has ended (the job was dropped)"
            )));
        }
        let timeout = self.timeout();
        match result.recv_timeout(timeout) {
            Ok(value) => {
                self.arrivals.forget_before(n);
                Ok(value)
            }
            Err(RecvTimeoutError::Timeout) => {
                let arrived = self.arrivals.of(n);
                let missing = (0..self.size)
                    .filter(|r| *r != self.rank && !arrived.contains(r))
                    .collect();
                let err = ProcessError::Timeout {
                    operation: operation.to_owned(),
                    rank: self.rank,
                    missing,
                    timeout,
                };
                *lock(&self.stuck) = Some(err.to_string());
                Err(err)
            }
            Err(RecvTimeoutError::Disconnected) => Err(ProcessError::Comm(format!(
                "{operation}: the job's collective thread ended inside it"
            ))),
        }
    }

    /// Ends the thread once its work is done; the error of the collective that passed its
    /// deadline instead, if one did (the thread is then left inside MPI and the job must be aborted).
    pub(crate) fn shutdown(&self) -> Option<String> {
        drop(lock(&self.work).take());
        if let Some(stuck) = lock(&self.stuck).clone() {
            return Some(stuck);
        }
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
        None
    }
}

/// An all-to-all of byte messages on a communicator of its own (so that the transport's probes
/// never see them): the sizes by `MPI_Alltoall`, then one `MPI_Sendrecv` per step `k`, to rank
/// `me + k` and from rank `me - k`. Runs on the collective thread.
pub(crate) fn all_to_all(
    world: &SimpleCommunicator,
    size: usize,
    mut outgoing: Vec<Vec<u8>>,
) -> Result<Vec<Vec<u8>>, ProcessError> {
    use mpi::collective::CommunicatorCollectives;
    if outgoing.len() != size {
        return Err(ProcessError::Comm(format!(
            "an exchange needs one message per rank ({size}), got {}",
            outgoing.len()
        )));
    }
    let count = |n: usize| {
        i32::try_from(n).map_err(|_| {
            ProcessError::Comm(format!(
                "a message of {n} bytes is over MPI's 2 GiB count limit"
            ))
        })
    };
    let send_counts = outgoing
        .iter()
        .map(|m| count(m.len()))
        .collect::<Result<Vec<_>, _>>()?;
    let comm = world.duplicate();
    let mut recv_counts = vec![0i32; size];
    comm.all_to_all_into(&send_counts[..], &mut recv_counts[..]);
    let me = comm.rank() as usize;
    let mut incoming: Vec<Vec<u8>> = vec![Vec::new(); size];
    incoming[me] = std::mem::take(&mut outgoing[me]);
    for k in 1..size {
        let (to, from) = ((me + k) % size, (me + size - k) % size);
        let mut buffer = vec![0u8; recv_counts[from].max(0) as usize];
        mpi::point_to_point::send_receive_into(
            &outgoing[to][..],
            &comm.process_at_rank(to as i32),
            &mut buffer[..],
            &comm.process_at_rank(from as i32),
        );
        incoming[from] = buffer;
    }
    Ok(incoming)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Arrivals, KEPT, TIMEOUT_ENV, parse_timeout};
    use crate::processes::ProcessError;

    #[test]
    fn a_deadline_is_a_positive_number_of_seconds() {
        assert_eq!(
            parse_timeout(" 2.5 ").ok(),
            Some(Duration::from_millis(2500))
        );
        for bad in ["0", "-1", "nan", "inf", "soon", ""] {
            let err = parse_timeout(bad).err().map(|e| e.to_string());
            assert!(
                err.as_deref().is_some_and(|e| e.contains(TIMEOUT_ENV)),
                "{bad}: {err:?}"
            );
        }
    }

    #[test]
    fn a_timeout_names_the_collective_the_missing_ranks_and_the_fix() {
        let timeout = |missing: Vec<usize>| ProcessError::Timeout {
            operation: "exchange".into(),
            rank: 0,
            missing,
            timeout: Duration::from_secs(3),
        };
        let one = timeout(vec![2]).to_string();
        for part in [
            "the MPI collective 'exchange' did not complete on rank 0 within 3s",
            "rank 2 never reached it",
            "look at the output of rank 2",
            "TESSERA_MPI_TIMEOUT_S",
        ] {
            assert!(one.contains(part), "missing '{part}': {one}");
        }
        let none = timeout(vec![]).to_string();
        assert!(none.contains("every rank reached it"), "{none}");
        assert!(
            timeout(vec![1, 3])
                .to_string()
                .contains("ranks [1, 3] never")
        );
    }

    #[test]
    fn arrivals_are_kept_for_the_recent_collectives_only() {
        let arrivals = Arrivals::default();
        arrivals.record(1, 2);
        arrivals.record(1, 3);
        arrivals.record(KEPT + 5, 1);
        assert_eq!(arrivals.of(1).into_iter().collect::<Vec<_>>(), [2, 3]);
        arrivals.forget_before(KEPT + 5);
        assert!(arrivals.of(1).is_empty());
        assert_eq!(arrivals.of(KEPT + 5).len(), 1);
    }
}
