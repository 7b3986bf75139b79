//! Running a step as an MPI job, one process per MPMD group, as JAXPP runs on clusters: `mpirun
//! -n G` (or Slurm's `srun`) starts G processes; rank `r` runs group `r` with its own PJRT client
//! over its own devices, every rank traces and compiles the same step (its own group's programs
//! only), and values between groups cross over MPI (`endpoint.rs`).
//!
//! Failures never unwind into `MPI_Finalize` (which would hang): [`MpiJob::init`] installs a panic
//! hook that calls `MPI_Abort`, and a caller that gives up on an error calls [`MpiJob::abort`],
//! which ends every rank of the job.
//!
//! No collective waits forever (`collective.rs`): each (an exchange, a broadcast, the
//! agreement, [`MpiJob::all`], [`MpiJob::gather_to_root`]) waits at most the job's deadline
//! ([`DEFAULT_TIMEOUT`], 600 s; `TESSERA_MPI_TIMEOUT_S=SECONDS` or [`MpiJob::set_timeout`]), then
//! fails with [`ProcessError::Timeout`] naming the collective, the ranks that never reached it
//! and the fix; the caller then aborts the job (dropping it aborts it too).
//!
//! `TESSERA_FAULT=KIND@RANK` (KIND `fail`, `stall`, `kill`, `panic` or `sigstop`) makes rank
//! RANK's second task fail, never return, SIGKILL its process, panic, or SIGSTOP its process; KIND `stall-exchange` makes rank RANK never start its
//! second exchange (`Processes::exchange`); KIND `unreadable-send` makes its sending thread find
//! every shard unreadable (its receivers fail at once, naming it): the fault tests use them.

mod collective;
mod endpoint;

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mpi::collective::CommunicatorCollectives;
use mpi::collective::Root;
use mpi::environment::{Threading, Universe};
use mpi::topology::{Communicator, SimpleCommunicator};
use tessera_pjrt::{Array, Client};

pub use collective::{DEFAULT_TIMEOUT, TIMEOUT_ENV, parse_timeout};
pub use endpoint::{CHUNK, MpiTransport};

use crate::mesh::MpmdMesh;
use crate::processes::{Fault, FaultyExecutor, ProcessError, Processes};
use crate::runtime::{Executor, OutputLayout, Transport, ValueId};
use collective::{Arrivals, Collectives, all_to_all};
use endpoint::Endpoint;

/// The environment variable that injects a fault (see the module docs).
pub const FAULT_ENV: &str = "TESSERA_FAULT";

/// This process's place in a job, read from the launcher's environment: Open MPI's `mpirun`
/// (`OMPI_COMM_WORLD_RANK`/`SIZE`), a PMI launcher such as Slurm's `srun` (`PMI_RANK`/`SIZE`,
/// `SLURM_PROCID`/`SLURM_NTASKS`). `None` outside a job.
pub fn launched() -> Option<(usize, usize)> {
    let pairs = [
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMI_RANK", "PMI_SIZE"),
        ("PMIX_RANK", "SLURM_NTASKS"),
        ("SLURM_PROCID", "SLURM_NTASKS"),
    ];
    pairs.iter().find_map(|(rank, size)| {
        let rank = std::env::var(rank).ok()?.parse().ok()?;
        let size = std::env::var(size).ok()?.parse().ok()?;
        Some((rank, size))
    })
}

/// An initialized MPI job (finalized when dropped, after the transport's threads have ended).
pub struct MpiJob {
    endpoint: Arc<Endpoint>,
    collectives: Arc<Collectives>,
    rank: usize,
    size: usize,
    _universe: Universe,
}

impl MpiJob {
    /// Initializes MPI (with `MPI_THREAD_MULTIPLE`) when this process was launched as part of a
    /// job, and starts its transport threads; `None` outside a job.
    pub fn init() -> Result<Option<MpiJob>, ProcessError> {
        if launched().is_none() {
            return Ok(None);
        }
        let (universe, threading) = mpi::initialize_with_threading(Threading::Multiple)
            .ok_or_else(|| ProcessError::Comm("MPI was already initialized".into()))?;
        if threading != Threading::Multiple {
            return Err(ProcessError::Comm(format!(
                "the MPI library grants {threading:?} threading; Tessera needs MPI_THREAD_MULTIPLE (Open MPI grants it)"
            )));
        }
        install_abort_hook();
        let timeout = collective::timeout_from_env()?;
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        let threads =
            |e: std::io::Error| ProcessError::Comm(format!("could not start the MPI threads: {e}"));
        let arrivals = Arc::new(Arrivals::default());
        let endpoint = Endpoint::start(world.size(), arrivals.clone()).map_err(threads)?;
        let collectives = Collectives::start(rank, size, timeout, arrivals).map_err(threads)?;
        Ok(Some(MpiJob {
            endpoint: Arc::new(endpoint),
            collectives: Arc::new(collectives),
            rank,
            size,
            _universe: universe,
        }))
    }

    /// How long each collective of the job (and of its [`MpiJob::processes`]) waits before it
    /// fails with [`ProcessError::Timeout`].
    pub fn timeout(&self) -> Duration {
        self.collectives.timeout()
    }

    /// Sets the deadline of every later collective of the job and of its processes (by
    /// default `TESSERA_MPI_TIMEOUT_S`, or [`DEFAULT_TIMEOUT`]); every rank should set the same
    /// one.
    pub fn set_timeout(&self, timeout: Duration) {
        self.collectives.set_timeout(timeout);
    }

    /// This process's rank (the group it runs).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether `ok` holds on every rank (a collective: every rank calls it; bounded by the
    /// job's deadline).
    pub fn all(&self, ok: bool) -> Result<bool, ProcessError> {
        self.collectives.run("all", move |world| {
            let mut all = 0u8;
            world.all_reduce_into(
                &u8::from(ok),
                &mut all,
                mpi::collective::SystemOperation::logical_and(),
            );
            all != 0
        })
    }

    /// Every rank's `mine`, in rank order, on rank 0 (`None` on the others); a collective: every
    /// rank calls it (bounded by the job's deadline). Any length: MPI counts bytes in 32 bits,
    /// so the bytes move in rounds of pieces that fit them (see
    /// [`MpiJob::gather_to_root_in_pieces`]).
    pub fn gather_to_root(&self, mine: &[u8]) -> Result<Option<Vec<Vec<u8>>>, ProcessError> {
        self.gather_to_root_in_pieces(mine, largest_piece(self.size))
    }

    /// [`MpiJob::gather_to_root`] moving at most `piece` bytes of each rank per round (at
    /// least 1; capped so that a round's bytes on the root fit MPI's 32-bit counts): every
    /// rank learns every length first, then all take part in as many rounds as the longest
    /// needs. Every rank must pass the same `piece`.
    pub fn gather_to_root_in_pieces(
        &self,
        mine: &[u8],
        piece: usize,
    ) -> Result<Option<Vec<Vec<u8>>>, ProcessError> {
        let (rank, size, mine) = (self.rank, self.size, mine.to_vec());
        let piece = piece.clamp(1, largest_piece(size));
        self.collectives.run("gather_to_root", move |world| {
            gather_to_root(world, rank, size, &mine, piece)
        })
    }

    /// Ends every rank of the job with `code` (`MPI_Abort`).
    pub fn abort(&self, code: i32) -> ! {
        SimpleCommunicator::world().abort(code)
    }

    /// The processes of the job as a step's [`Processes`]: this rank runs group `rank` on
    /// `client`'s devices of `mesh` (see [`MpmdMesh::for_process`]).
    pub fn processes(
        &self,
        client: &Client,
        mesh: &MpmdMesh,
    ) -> Result<Arc<dyn Processes>, ProcessError> {
        let comm = |e: tessera_pjrt::PjrtError| ProcessError::Comm(e.to_string());
        let fault = std::env::var(FAULT_ENV)
            .ok()
            .map(|text| parse_fault(&text))
            .transpose()?
            .filter(|&(_, rank)| rank == self.rank)
            .map(|(fault, _)| fault);
        Ok(Arc::new(MpiProcesses {
            endpoint: self.endpoint.clone(),
            collectives: self.collectives.clone(),
            rank: self.rank,
            size: self.size,
            client: client.clone(),
            mesh: mesh.clone(),
            devices: client.addressable_devices().map_err(comm)?.len(),
            plugin: client.platform_version().map_err(comm)?,
            fault,
            exchanges: AtomicUsize::new(0),
        }))
    }
}

impl Drop for MpiJob {
    fn drop(&mut self) {
        if let Some(stuck) = self.collectives.shutdown() {
            // A collective passed its deadline and is still inside MPI: MPI_Finalize (and the
            // transport's goodbyes) would wait for it forever.
            eprintln!(
                "tessera: rank {} ends the MPI job (MPI_Abort) as it is dropped: {stuck}",
                self.rank
            );
            self.abort(1)
        }
        self.endpoint.shutdown();
    }
}

/// The most bytes of one rank a gather round moves: the round's bytes on the root (one piece
/// per rank) and their offsets are 32-bit MPI counts.
fn largest_piece(size: usize) -> usize {
    (i32::MAX as usize / size.max(1)).max(1)
}

/// The body of [`MpiJob::gather_to_root_in_pieces`], on the collective thread: every rank's
/// length to every rank, then rounds of at most `piece` bytes per rank, which the root appends
/// to each rank's bytes.
fn gather_to_root(
    world: &SimpleCommunicator,
    rank: usize,
    size: usize,
    mine: &[u8],
    piece: usize,
) -> Option<Vec<Vec<u8>>> {
    let mut lengths = vec![0u64; size];
    world.all_gather_into(&(mine.len() as u64), &mut lengths[..]);
    let rounds = lengths
        .iter()
        .map(|&l| (l as usize).div_ceil(piece))
        .max()
        .unwrap_or(0);
    let root = world.process_at_rank(0);
    let slice = |bytes: &[u8], round: usize| -> std::ops::Range<usize> {
        let start = (round * piece).min(bytes.len());
        start..(start + piece).min(bytes.len())
    };
    if rank != 0 {
        for round in 0..rounds {
            root.gather_varcount_into(&mine[slice(mine, round)]);
        }
        return None;
    }
    let mut all: Vec<Vec<u8>> = lengths
        .iter()
        .map(|&l| Vec::with_capacity(l as usize))
        .collect();
    for round in 0..rounds {
        // Each rank's piece this round: what is left of its length, at most `piece`.
        let counts: Vec<i32> = lengths
            .iter()
            .map(|&l| {
                let left = (l as usize).saturating_sub(round * piece).min(piece);
                i32::try_from(left).unwrap_or(i32::MAX)
            })
            .collect();
        let starts: Vec<i32> = counts
            .iter()
            .scan(0i32, |at, &c| {
                let start = *at;
                *at = at.saturating_add(c);
                Some(start)
            })
            .collect();
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let mut buffer = vec![0u8; total];
        {
            let mut parts =
                mpi::datatype::PartitionMut::new(&mut buffer[..], &counts[..], &starts[..]);
            root.gather_varcount_into_root(&mine[slice(mine, round)], &mut parts);
        }
        for ((into, &start), &count) in all.iter_mut().zip(&starts).zip(&counts) {
            into.extend_from_slice(&buffer[start as usize..(start + count) as usize]);
        }
    }
    Some(all)
}

/// A fault `TESSERA_FAULT` injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Injected {
    /// Into the rank's second task.
    Task(Fault),
    /// The rank never starts its second exchange.
    StallExchange,
    /// The rank's sending thread finds every shard it sends unreadable (its receivers must fail
    /// at once, naming it, not wait for their deadline).
    UnreadableSend,
}

/// Whether [`FAULT_ENV`] makes rank `rank`'s sends find their shards unreadable.
pub(crate) fn unreadable_sends_injected(rank: usize) -> bool {
    std::env::var(FAULT_ENV)
        .ok()
        .and_then(|text| parse_fault(&text).ok())
        .is_some_and(|(fault, r)| fault == Injected::UnreadableSend && r == rank)
}

/// `KIND@RANK` as a fault and the rank it strikes.
fn parse_fault(text: &str) -> Result<(Injected, usize), ProcessError> {
    let bad = || {
        ProcessError::Comm(format!(
            "{FAULT_ENV} is '{text}'; give KIND@RANK with KIND fail, stall, kill, panic, sigstop, \
             stall-exchange or unreadable-send, e.g. fail@2"
        ))
    };
    let (kind, rank) = text.split_once('@').ok_or_else(bad)?;
    let fault = match kind {
        "fail" => Injected::Task(Fault::Fail),
        "stall" => Injected::Task(Fault::Stall),
        "kill" => Injected::Task(Fault::Kill),
        "panic" => Injected::Task(Fault::Panic),
        "sigstop" => Injected::Task(Fault::Stop),
        "stall-exchange" => Injected::StallExchange,
        "unreadable-send" => Injected::UnreadableSend,
        _ => return Err(bad()),
    };
    Ok((fault, rank.parse().map_err(|_| bad())?))
}

/// A panic that nothing catches ends the whole job at once instead of unwinding into
/// `MPI_Finalize`; one that Tessera turns into a typed error (a worker's, a host callback's:
/// [`tessera_ir::panics::catch_unwind`]) unwinds to it, and the error ends the job as errors do.
fn install_abort_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        if !tessera_ir::panics::will_be_caught() {
            SimpleCommunicator::world().abort(101);
        }
    }));
}

struct MpiProcesses {
    endpoint: Arc<Endpoint>,
    collectives: Arc<Collectives>,
    rank: usize,
    size: usize,
    client: Client,
    mesh: MpmdMesh,
    devices: usize,
    plugin: String,
    fault: Option<Injected>,
    /// How many exchanges this process started (for `stall-exchange`).
    exchanges: AtomicUsize,
}

/// A stalled exchange (`stall-exchange`): this rank sleeps for an hour, until the others' deadline
/// passes and they abort the job.
fn stall_exchange(rank: usize) {
    eprintln!("injected fault ({FAULT_ENV}): rank {rank} never starts its second exchange");
    std::thread::sleep(Duration::from_secs(3600));
}

impl Processes for MpiProcesses {
    fn local_groups(&self) -> Vec<usize> {
        vec![self.rank]
    }

    fn process_index(&self) -> (usize, usize) {
        (self.size, self.rank)
    }

    fn process_of(&self, group: usize) -> usize {
        group
    }

    fn exchange(&self, outgoing: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, ProcessError> {
        let n = self.exchanges.fetch_add(1, Ordering::SeqCst);
        if self.fault == Some(Injected::StallExchange) && n == 1 {
            stall_exchange(self.rank);
        }
        let size = self.size;
        self.collectives
            .run("exchange", move |world| all_to_all(world, size, outgoing))?
    }

    fn transport(
        &self,
        layouts: &Arc<HashMap<ValueId, OutputLayout>>,
    ) -> Result<Arc<dyn Transport<Array>>, ProcessError> {
        Ok(Arc::new(self.endpoint.transport(
            &self.client,
            &self.mesh,
            layouts.clone(),
        )))
    }

    fn broadcast(&self, root: usize, mut values: Vec<f64>) -> Result<Vec<f64>, ProcessError> {
        let root = i32::try_from(root)
            .ok()
            .filter(|&r| (r as usize) < self.size)
            .ok_or_else(|| ProcessError::Comm(format!("no rank runs group {root}")))?;
        self.collectives.run("broadcast", move |world| {
            world.process_at_rank(root).broadcast_into(&mut values[..]);
            values
        })
    }

    fn agree(&self, fingerprint: u64, partitioner: &str) -> Result<(), ProcessError> {
        let hash = |x: &dyn Fn(&mut DefaultHasher)| {
            let mut h = DefaultHasher::new();
            x(&mut h);
            h.finish()
        };
        // The step last: a different device count, plugin or partitioner changes it too, and
        // the first difference found is the one reported.
        let mine = [
            self.devices as u64,
            hash(&|h| self.plugin.hash(h)),
            hash(&|h| partitioner.hash(h)),
            fingerprint,
        ];
        let n = mine.len();
        let size = self.size;
        let all = self.collectives.run("agree", move |world| {
            let mut all = vec![0u64; n * size];
            world.all_gather_into(&mine[..], &mut all[..]);
            all
        })?;
        let what = [
            "the device count",
            "the PJRT plugin version",
            "the partitioner (TESSERA_PARTITIONER, Shardy or GSPMD)",
            "the step (plan and value layouts)",
        ];
        for (rank, theirs) in all.chunks(n).enumerate().skip(1) {
            if let Some(k) = (0..n).find(|&k| theirs[k] != all[k]) {
                let detail = match k {
                    0 => format!(" ({} devices, rank 0 has {})", theirs[0], all[0]),
                    _ => String::new(),
                };
                return Err(ProcessError::Mismatch(format!(
                    "rank {rank} differs from rank 0 in {}{detail}; launch every rank with the same binary, arguments, environment and plugin",
                    what[k]
                )));
            }
        }
        Ok(())
    }

    fn executor(
        &self,
        executor: Arc<dyn Executor<usize, Array>>,
    ) -> Arc<dyn Executor<usize, Array>> {
        match self.fault {
            Some(Injected::Task(fault)) => Arc::new(FaultyExecutor::new(executor, fault, 1)),
            Some(Injected::StallExchange | Injected::UnreadableSend) | None => executor,
        }
    }
}
