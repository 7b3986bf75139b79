//! Moving values between groups, in two halves keyed by the value's id: the producing group's
//! worker calls [`Transport::send`] as soon as the value exists, and it returns without waiting
//! for the copy; the consuming group's worker calls [`Transport::recv`] when a task needs the
//! value, with a deadline. Nothing else passes between the halves, so a transport may carry
//! values to another process (the sender and the receiver then call it on different machines).
//!
//! A transport serves one run: values are keyed by `(destination group, value id)`, and ids
//! repeat from run to run of the same plan, so make a fresh transport per run.
//!
//! [`Mailbox`] is the in-process meeting point: a sent value waits there (with the time it
//! becomes available) until its receiver takes it. [`LocalTransport`] is a transport over a
//! mailbox with a copy function and an optional latency, for tests and synthetic runs.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::error::BoxError;
use super::plan::ValueId;

/// Moves values between groups (see the module docs for the contract).
pub trait Transport<V>: Send + Sync {
    /// Starts moving value `id`, held by group `from`, to group `to`, and returns without
    /// waiting for the copy to finish: the sender's next task does not wait for it. An error
    /// here (the copy could not even be issued) fails the run.
    fn send(&self, id: ValueId, value: &V, from: usize, to: usize) -> Result<(), BoxError>;

    /// Waits until value `id` has arrived on group `to`, at most until `deadline`: `Some` when
    /// it has (each sent value is received once), `None` when the deadline passed first. The
    /// runtime calls it with short deadlines in a loop, checking its own deadline and whether
    /// another group failed in between, so an implementation should honour `deadline`.
    fn recv(&self, id: ValueId, to: usize, deadline: Instant) -> Result<Option<V>, BoxError>;

    /// Tells the other processes, where the transport reaches any, what `group` is doing:
    /// what each process hears of the others names a stalled one when a wait passes its
    /// deadline ([`Transport::heard`]). Default: nothing (one process sees all its groups).
    fn report(&self, group: usize, state: PeerState) {
        let _ = (group, state);
    }

    /// What this process last heard in this run from the process running `group`; `None` for
    /// a group of this process, or where the transport keeps no such record.
    fn heard(&self, group: usize) -> Option<PeerState> {
        let _ = group;
        None
    }

    /// Tells the other processes that this one gives up (one of its waits passed its deadline),
    /// so that each stops and says what it waits for before the job ends. Default: nothing.
    fn give_up(&self) {}

    /// The group of another process that gave up in this run, if one has.
    fn gave_up(&self) -> Option<usize> {
        None
    }
}

/// What a group of another process last said it was doing in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerState {
    /// The last task (its index in the plan) it finished.
    pub done: Option<usize>,
    /// The value it waits for, and the group that produces it.
    pub waiting: Option<(ValueId, usize)>,
}

/// Values in transit within one process, keyed by destination group and value id. A value put
/// for a group wakes only that group's receiver.
pub struct Mailbox<V> {
    slots: Mutex<HashMap<(usize, ValueId), (Instant, V)>>,
    arrived: Mutex<HashMap<usize, Arc<Condvar>>>,
}

impl<V> Default for Mailbox<V> {
    fn default() -> Self {
        Mailbox {
            slots: Mutex::new(HashMap::new()),
            arrived: Mutex::new(HashMap::new()),
        }
    }
}

impl<V> Mailbox<V> {
    /// An empty mailbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// The condition variable group `to`'s receiver waits on.
    fn arrived(&self, to: usize) -> Arc<Condvar> {
        let mut map = self.arrived.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(to).or_default().clone()
    }

    /// Leaves `value` for group `to` under `id`, available from `ready_at` on.
    pub fn put(&self, to: usize, id: ValueId, value: V, ready_at: Instant) {
        let arrived = self.arrived(to);
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.insert((to, id), (ready_at, value));
        arrived.notify_all();
    }

    /// Takes value `id` for group `to` once it is there and available, waiting at most until
    /// `deadline`.
    pub fn take(&self, to: usize, id: ValueId, deadline: Instant) -> Option<V> {
        let arrived = self.arrived(to);
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = Instant::now();
            let wake = match slots.get(&(to, id)) {
                Some((ready_at, _)) if *ready_at <= now => {
                    return slots.remove(&(to, id)).map(|(_, v)| v);
                }
                Some((ready_at, _)) => (*ready_at).min(deadline),
                None => deadline,
            };
            if now >= deadline {
                return None;
            }
            slots = arrived
                .wait_timeout(slots, wake.saturating_duration_since(now))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The number of values waiting to be taken.
    pub fn len(&self) -> usize {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no value waits to be taken.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The copy a [`LocalTransport`] makes of a value for another group.
pub type CopyFn<V> = Box<dyn Fn(&V, usize, usize) -> Result<V, BoxError> + Send + Sync>;

/// A transport within one process: `send` makes the copy at once with a copy function and
/// leaves it in a [`Mailbox`], available after `latency`; `recv` takes it from there.
pub struct LocalTransport<V> {
    copy: CopyFn<V>,
    latency: Duration,
    mailbox: Mailbox<V>,
}

impl<V> LocalTransport<V> {
    /// A transport copying values with `copy(value, from, to)`.
    pub fn new(
        copy: impl Fn(&V, usize, usize) -> Result<V, BoxError> + Send + Sync + 'static,
    ) -> Self {
        LocalTransport {
            copy: Box::new(copy),
            latency: Duration::ZERO,
            mailbox: Mailbox::new(),
        }
    }

    /// The same, each value available `latency` after it was sent.
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }
}

impl<V: Clone> LocalTransport<V> {
    /// A transport handing over clones of the values.
    pub fn cloning() -> Self {
        Self::new(|v: &V, _, _| Ok(v.clone()))
    }
}

impl<V: Send> Transport<V> for LocalTransport<V> {
    fn send(&self, id: ValueId, value: &V, from: usize, to: usize) -> Result<(), BoxError> {
        let copy = (self.copy)(value, from, to)?;
        self.mailbox
            .put(to, id, copy, Instant::now() + self.latency);
        Ok(())
    }

    fn recv(&self, id: ValueId, to: usize, deadline: Instant) -> Result<Option<V>, BoxError> {
        Ok(self.mailbox.take(to, id, deadline))
    }
}
