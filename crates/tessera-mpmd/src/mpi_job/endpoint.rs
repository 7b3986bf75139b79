//! The MPI transport: values between groups of different processes (XLA has no collectives
//! across processes). On the CPU plugin, whose buffers are host memory, nothing is staged: MPI
//! sends straight from each shard's own buffer and receives into aligned memory that becomes the
//! receiving shard's buffer without a copy (`Buffer::host_memory`, `Buffer::from_aligned_bytes`).
//! On other plugins each block is copied to host memory first.
//!
//! Each process has one [`Endpoint`] for its life, with two threads. `send` queues each distinct
//! block of the array (one per shard, once for replicated shards), taken from the first shard
//! holding it. The sending thread takes values from the queue in the order the process produced
//! them, waits until each is computed, and sends it to its destination rank as a header (`[run,
//! value id, parts]`, each part's byte count and block) followed by each part's bytes in chunks
//! of at most [`CHUNK`] (so that no message exceeds MPI's `int` count), all under a tag derived
//! from the value id; the receiver puts each block on the devices that hold it in its group. The receiving thread probes for a message from any rank at all times — every receive
//! is posted ahead of the worker that needs it, and arrives in whatever order the senders send —
//! reassembles each source's value (MPI keeps one source's messages in order) and leaves it in an
//! inbox keyed by run and value id, where the run's [`MpiTransport`] takes it with the runtime's
//! deadline and puts it on the group's devices.
//!
//! The receiving thread also records the messages (tag [`ARRIVED`]) by which a peer says it
//! reached a collective (`collective.rs`).
//!
//! Both threads use `MPI_COMM_WORLD`'s point-to-point traffic only; the collectives of the
//! collective thread (rendezvous, losses, exchanges) never match point-to-point messages. The
//! process must have `MPI_THREAD_MULTIPLE`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mpi::datatype::Equivalence;
use mpi::point_to_point::MatchedReceiveVec;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::{Destination, Source};
use tessera_pjrt::{AlignedBytes, Array, Buffer, Client, HostArray};
use tessera_sharding::NamedSharding;

use super::collective::{ARRIVED, Arrivals};
use crate::mesh::MpmdMesh;
use crate::runtime::{BoxError, OutputLayout, PeerState, Transport, ValueId};

/// The largest message of a value's bytes.
pub const CHUNK: usize = 16 << 20;
/// The tag of the message that tells a peer this process sends nothing more.
const CLOSE: i32 = 0;
/// How long the receiving thread sleeps when no message is waiting.
const IDLE: Duration = Duration::from_micros(50);

/// The tag of the message by which a sender says it could not send a value (`[run, id]`).
const FAILED: i32 = 32766;
/// The tag of a process's report of what its group does (`[run, done, value, from]`, see
/// [`state_message`]).
const STATE: i32 = 32764;
/// The tag of the message by which a process says it gives up the run (`[run]`).
const GIVE_UP: i32 = 32765;

/// The tag of a value's messages (in `1..32764`: within the range every MPI allows, below
/// [`STATE`], [`GIVE_UP`], [`FAILED`] and [`ARRIVED`]).
fn tag_of(id: ValueId) -> i32 {
    1 + (id % 32763) as i32
}

/// A [`PeerState`] of `run` as a message: each optional field as its value plus one (0: none).
fn state_message(run: u64, state: PeerState) -> [u64; 4] {
    let plus_one = |x: Option<usize>| x.map_or(0, |v| v as u64 + 1);
    [
        run,
        plus_one(state.done),
        plus_one(state.waiting.map(|w| w.0)),
        plus_one(state.waiting.map(|w| w.1)),
    ]
}

/// [`state_message`]'s run and state, read back.
fn read_state(message: &[u64]) -> Option<(u64, PeerState)> {
    let &[run, done, value, from] = message else {
        return None;
    };
    let minus_one = |x: u64| x.checked_sub(1).map(|v| v as usize);
    let waiting = minus_one(value).zip(minus_one(from));
    Some((
        run,
        PeerState {
            done: minus_one(done),
            waiting,
        },
    ))
}

/// What this process heard from the others: each rank's last state report, and the run a
/// rank gave up (by rank).
#[derive(Default)]
struct Heard {
    states: Mutex<HashMap<i32, (u64, PeerState)>>,
    gave_up: Mutex<Option<(u64, i32)>>,
}

/// Received values, by run and value id; or the rank that could not send one.
#[derive(Default)]
struct Inbox {
    values: Mutex<HashMap<(u64, ValueId), Result<Incoming, i32>>>,
    arrived: Condvar,
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inbox {
    fn put(&self, run: u64, id: ValueId, bytes: Result<Incoming, i32>) {
        lock(&self.values).insert((run, id), bytes);
        self.arrived.notify_all();
    }

    fn take(&self, run: u64, id: ValueId, deadline: Instant) -> Option<Result<Incoming, i32>> {
        let mut values = lock(&self.values);
        loop {
            if let Some(bytes) = values.remove(&(run, id)) {
                return Some(bytes);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            values = self
                .arrived
                .wait_timeout(values, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// A block of the global array (`[start, stop)` per dimension).
type Block = Vec<(i64, i64)>;

/// A value as received: each distinct block of the array with its bytes.
type Incoming = Vec<(Block, AlignedBytes)>;

/// One block of a value being sent: the shard's own buffer, read in place by the sending thread
/// (CPU plugin), or its bytes copied to host memory.
enum Outgoing {
    InPlace(Arc<Buffer>, usize),
    Staged(Vec<u8>),
}

impl Outgoing {
    /// The bytes to send; `None` where a shard's memory cannot be read (or is not its length).
    fn bytes(&self) -> Option<&[u8]> {
        match self {
            Outgoing::Staged(bytes) => Some(bytes),
            Outgoing::InPlace(buffer, len) => buffer.host_memory().ok().filter(|b| b.len() == *len),
        }
    }

    fn len(&self) -> usize {
        match self {
            Outgoing::InPlace(_, len) => *len,
            Outgoing::Staged(bytes) => bytes.len(),
        }
    }
}

enum Job {
    Send {
        run: u64,
        id: ValueId,
        to: i32,
        parts: Vec<(Block, Outgoing)>,
    },
    /// A short message of `tag` to every other rank.
    Tell {
        tag: i32,
        message: Vec<u64>,
    },
    Close,
}

/// The header of a value: `[run, id, parts, rank]`, then per part its byte count and block.
fn header(run: u64, id: ValueId, parts: &[(Block, Outgoing)]) -> Vec<u64> {
    let rank = parts.first().map_or(0, |(b, _)| b.len());
    let mut h = vec![run, id as u64, parts.len() as u64, rank as u64];
    for (block, bytes) in parts {
        h.push(bytes.len() as u64);
        h.extend(block.iter().flat_map(|&(a, b)| [a as u64, b as u64]));
    }
    h
}

/// The parts a header announces, with room for their bytes (recycled memory where it can).
fn read_header(h: &[u64]) -> (u64, ValueId, Incoming) {
    let at = |i: usize| h.get(i).copied().unwrap_or(0);
    let (run, id, count, rank) = (at(0), at(1) as ValueId, at(2) as usize, at(3) as usize);
    let parts = (0..count)
        .map(|p| {
            let base = 4 + p * (1 + 2 * rank);
            let block = (0..rank)
                .map(|d| (at(base + 1 + 2 * d) as i64, at(base + 2 + 2 * d) as i64))
                .collect();
            (block, AlignedBytes::recycled(at(base) as usize))
        })
        .collect();
    (run, id, parts)
}

/// One process's sending and receiving threads (see the module docs).
pub(crate) struct Endpoint {
    jobs: Mutex<Sender<Job>>,
    /// State reports and give-ups, sent by a thread of their own: never queued behind a value
    /// whose send waits for a stalled receiver.
    tells: Mutex<Sender<Job>>,
    inbox: Arc<Inbox>,
    heard: Arc<Heard>,
    runs: AtomicU64,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Endpoint {
    /// Starts the threads of a process of `size` ranks.
    pub(crate) fn start(size: i32, arrivals: Arc<Arrivals>) -> std::io::Result<Endpoint> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let inbox = Arc::new(Inbox::default());
        let heard = Arc::new(Heard::default());
        let sender = std::thread::Builder::new()
            .name("tessera-mpi-send".into())
            .spawn(move || send_loop(queue, size))?;
        let (tells, told) = mpsc::channel::<Job>();
        let teller = std::thread::Builder::new()
            .name("tessera-mpi-tell".into())
            .spawn(move || tell_loop(told, size))?;
        let (into, hearing) = (inbox.clone(), heard.clone());
        let receiver = std::thread::Builder::new()
            .name("tessera-mpi-recv".into())
            .spawn(move || receive_loop(&into, &hearing, &arrivals, size))?;
        Ok(Endpoint {
            jobs: Mutex::new(jobs),
            tells: Mutex::new(tells),
            inbox,
            heard,
            runs: AtomicU64::new(0),
            threads: Mutex::new(vec![sender, teller, receiver]),
        })
    }

    /// A transport for the next run (every process counts its runs the same way).
    pub(crate) fn transport(
        self: &Arc<Self>,
        client: &Client,
        mesh: &MpmdMesh,
        layouts: Arc<HashMap<ValueId, OutputLayout>>,
    ) -> MpiTransport {
        MpiTransport {
            endpoint: self.clone(),
            run: self.runs.fetch_add(1, Ordering::SeqCst),
            client: client.clone(),
            mesh: mesh.clone(),
            layouts,
            in_place: client
                .platform_name()
                .is_ok_and(|p| p.eq_ignore_ascii_case("cpu")),
        }
    }

    /// Tells the peers this process sends nothing more, and waits until every queued value is
    /// sent and every peer has said the same.
    pub(crate) fn shutdown(&self) {
        let _ = lock(&self.tells).send(Job::Close);
        let _ = lock(&self.jobs).send(Job::Close);
        for thread in std::mem::take(&mut *lock(&self.threads)) {
            let _ = thread.join();
        }
    }
}

/// Sends the short messages of [`Job::Tell`] to every other rank until [`Job::Close`].
fn tell_loop(queue: mpsc::Receiver<Job>, size: i32) {
    let world = SimpleCommunicator::world();
    for job in queue {
        match job {
            Job::Tell { tag, message } => {
                for peer in (0..size).filter(|&r| r != world.rank()) {
                    world.process_at_rank(peer).send_with_tag(&message[..], tag);
                }
            }
            Job::Send { .. } | Job::Close => break,
        }
    }
}

fn send_loop(queue: mpsc::Receiver<Job>, size: i32) {
    let world = SimpleCommunicator::world();
    let unreadable = usize::try_from(world.rank()).is_ok_and(super::unreadable_sends_injected);
    for job in queue {
        match job {
            Job::Send { run, id, to, parts } => {
                let peer = world.process_at_rank(to);
                // Every part's memory is read before anything is sent: a part that cannot be
                // read is told to the receiver at once (its wait fails naming this rank and the
                // value), never a header followed by missing bytes.
                let Some(slices) = parts
                    .iter()
                    .map(|(_, part)| part.bytes().filter(|_| !unreadable))
                    .collect::<Option<Vec<&[u8]>>>()
                else {
                    peer.send_with_tag(&[run, id as u64][..], FAILED);
                    continue;
                };
                let tag = tag_of(id);
                peer.send_with_tag(&header(run, id, &parts)[..], tag);
                for bytes in slices {
                    for chunk in bytes.chunks(CHUNK) {
                        peer.send_with_tag(chunk, tag);
                    }
                }
            }
            // Tells go through the telling thread.
            Job::Tell { .. } => {}
            Job::Close => break,
        }
    }
    let me = world.rank();
    for peer in (0..size).filter(|&r| r != me) {
        world
            .process_at_rank(peer)
            .send_with_tag(&[0u8; 0][..], CLOSE);
    }
}

/// A value being reassembled from one source: the part being filled, and how far.
struct Partial {
    run: u64,
    id: ValueId,
    parts: Incoming,
    part: usize,
    filled: usize,
}

impl Partial {
    /// Skips empty parts; whether every part is filled.
    fn complete(&mut self) -> bool {
        while self.part < self.parts.len() && self.filled == self.parts[self.part].1.len() {
            self.part += 1;
            self.filled = 0;
        }
        self.part == self.parts.len()
    }
}

fn receive_loop(inbox: &Inbox, heard: &Heard, arrivals: &Arrivals, size: i32) {
    let world = SimpleCommunicator::world();
    let mut open = size - 1;
    let mut partial: HashMap<i32, Partial> = HashMap::new();
    while open > 0 {
        let Some(probed) = world.any_process().immediate_matched_probe() else {
            std::thread::sleep(IDLE);
            continue;
        };
        let (source, tag) = (probed.1.source_rank(), probed.1.tag());
        if tag == CLOSE {
            let _ = probed.matched_receive_vec::<u8>();
            open -= 1;
            continue;
        }
        if tag == STATE || tag == GIVE_UP {
            let (message, _) = probed.matched_receive_vec::<u64>();
            if tag == GIVE_UP
                && let Some(&run) = message.first()
            {
                *lock(&heard.gave_up) = Some((run, source));
            } else if let Some(state) = read_state(&message) {
                lock(&heard.states).insert(source, state);
            }
            continue;
        }
        if tag == FAILED {
            let (failed, _) = probed.matched_receive_vec::<u64>();
            if let [run, id] = failed[..] {
                inbox.put(run, id as ValueId, Err(source));
            }
            continue;
        }
        if tag == ARRIVED {
            let (collective, _) = probed.matched_receive_vec::<u64>();
            if let Some(&n) = collective.first() {
                arrivals.record(n, source as usize);
            }
            continue;
        }
        let mut value = match partial.remove(&source) {
            None => {
                let (header, _) = probed.matched_receive_vec::<u64>();
                let (run, id, parts) = read_header(&header);
                Partial {
                    run,
                    id,
                    parts,
                    part: 0,
                    filled: 0,
                }
            }
            Some(mut value) => {
                let (message, status) = probed;
                let count = status.count(u8::equivalent_datatype()) as usize;
                let bytes = &mut value.parts[value.part].1;
                let end = (value.filled + count).min(bytes.len());
                message.matched_receive_into(&mut bytes[value.filled..end]);
                value.filled = end;
                value
            }
        };
        if value.complete() {
            inbox.put(value.run, value.id, Ok(value.parts));
        } else {
            partial.insert(source, value);
        }
    }
}

/// Moves one run's values to and from the other processes (see the module docs). `send` stages
/// the value in host memory on the caller's thread and queues it; `recv` waits for it in the
/// inbox and puts it on the destination group's devices with its layout.
pub struct MpiTransport {
    endpoint: Arc<Endpoint>,
    run: u64,
    client: Client,
    mesh: MpmdMesh,
    layouts: Arc<HashMap<ValueId, OutputLayout>>,
    /// Whether buffers are host memory (the CPU plugin): values move without staging copies.
    in_place: bool,
}

impl Transport<Array> for MpiTransport {
    fn send(&self, id: ValueId, value: &Array, _from: usize, to: usize) -> Result<(), BoxError> {
        // Each distinct block once, straight from the first shard that holds it.
        let mut parts: Vec<(Block, Outgoing)> = Vec::new();
        let bytes_per_element = value.element_type().size_in_bytes();
        for shard in value.addressable_shards()? {
            if parts.iter().any(|(block, _)| block == &shard.block) {
                continue;
            }
            let part = if self.in_place {
                let elements: i64 = shard.block.iter().map(|&(a, b)| b - a).product();
                let len = usize::try_from(elements)? * bytes_per_element;
                Outgoing::InPlace(shard.buffer.clone(), len)
            } else {
                Outgoing::Staged(shard.buffer.to_host()?.into_bytes())
            };
            parts.push((shard.block.clone(), part));
        }
        let job = Job::Send {
            run: self.run,
            id,
            to: i32::try_from(to)?,
            parts,
        };
        lock(&self.endpoint.jobs)
            .send(job)
            .map_err(|_| "the MPI sending thread has stopped".into())
    }

    fn report(&self, _group: usize, state: PeerState) {
        let message = state_message(self.run, state).to_vec();
        let _ = lock(&self.endpoint.tells).send(Job::Tell {
            tag: STATE,
            message,
        });
    }

    /// One group per rank: group `g`'s process is rank `g`.
    fn heard(&self, group: usize) -> Option<PeerState> {
        let rank = i32::try_from(group).ok()?;
        let states = lock(&self.endpoint.heard.states);
        match states.get(&rank) {
            Some(&(run, state)) if run == self.run => Some(state),
            // Nothing heard yet in this run: it finished no task of it.
            _ if self.mesh.my_mpmd_axis_index() != Some(group) => Some(PeerState::default()),
            _ => None,
        }
    }

    fn give_up(&self) {
        let message = vec![self.run];
        let _ = lock(&self.endpoint.tells).send(Job::Tell {
            tag: GIVE_UP,
            message,
        });
    }

    fn gave_up(&self) -> Option<usize> {
        match *lock(&self.endpoint.heard.gave_up) {
            Some((run, rank)) if run == self.run => usize::try_from(rank).ok(),
            _ => None,
        }
    }

    fn recv(&self, id: ValueId, to: usize, deadline: Instant) -> Result<Option<Array>, BoxError> {
        let mut parts = match self.endpoint.inbox.take(self.run, id, deadline) {
            None => return Ok(None),
            Some(Ok(parts)) => parts,
            Some(Err(rank)) => {
                return Err(format!(
                    "value {id} was not sent: rank {rank} could not read a shard's memory of it \
                     (see rank {rank}'s own error)"
                )
                .into());
            }
        };
        let layout = self
            .layouts
            .get(&id)
            .ok_or_else(|| format!("value {id} arrived but the plan gives no layout for it"))?;
        let sharding = NamedSharding::new(self.mesh.group(to)?, layout.spec.clone())?;
        let places = sharding.devices_indices_map(&layout.shape)?;
        let mut buffers = Vec::with_capacity(places.len());
        for (k, (device, block)) in places.iter().enumerate() {
            let at = parts
                .iter()
                .position(|(b, _)| b == block)
                .ok_or_else(|| format!("value {id} arrived without its block {block:?}"))?;
            // The bytes move into the last shard that holds the block, and are copied before.
            let reused = places[k + 1..].iter().any(|(_, b)| b == block);
            let bytes = if reused {
                parts[at].1.clone()
            } else {
                std::mem::replace(&mut parts[at].1, AlignedBytes::zeroed(0))
            };
            let dims: Vec<i64> = block.iter().map(|&(a, b)| b - a).collect();
            let device = i32::try_from(*device)?;
            buffers.push(if self.in_place {
                Buffer::from_aligned_bytes(&self.client, layout.ty, &dims, bytes, device)?
            } else {
                let host = HostArray::from_bytes(layout.ty.dtype(), &dims, bytes.to_vec())
                    .map_err(tessera_pjrt::PjrtError::from)?;
                Buffer::from_host_to(&self.client, &host, device)?
            });
        }
        Ok(Some(Array::from_shards(
            &layout.shape,
            layout.ty,
            &sharding,
            buffers,
        )?))
    }
}
