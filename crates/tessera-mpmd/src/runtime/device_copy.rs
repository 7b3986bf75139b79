//! The PJRT transport: arrays move between groups by device-to-device copies (shard `i` of the
//! source group goes to the device at the same mesh position in the destination group). `send`
//! only queues the value for the transport's copy thread and returns, so the sending group's
//! next task never waits for the copies to be issued; the thread issues them (PJRT runs them
//! asynchronously, after the source is ready) and leaves the new array, or the copy's error, in
//! a mailbox that `recv` takes it from. A task reading the copy waits for it inside PJRT.

use std::sync::Mutex;
use std::sync::mpsc::{self, Sender};
use std::time::Instant;

use tessera_pjrt::Array;
use tessera_sharding::NamedSharding;

use super::error::BoxError;
use super::plan::ValueId;
use super::transport::{Mailbox, Transport};
use crate::mesh::MpmdMesh;

/// A value queued for the copy thread: its id, the array, and its destination group.
type Job = (ValueId, Array, usize);

/// Moves arrays between groups with device-to-device copies issued on a thread of its own.
/// Serves one run (see [`Transport`]).
pub struct DeviceCopyTransport {
    queue: Mutex<Option<Sender<Job>>>,
    mailbox: std::sync::Arc<Mailbox<Result<Array, String>>>,
}

impl DeviceCopyTransport {
    /// A transport for `mesh`'s groups.
    pub fn new(mesh: &MpmdMesh) -> Self {
        let (queue, jobs) = mpsc::channel::<Job>();
        let mailbox = std::sync::Arc::new(Mailbox::new());
        let (mesh, out) = (mesh.clone(), mailbox.clone());
        let thread = std::thread::Builder::new()
            .name("tessera-copies".into())
            .spawn(move || {
                for (id, value, to) in jobs {
                    let copy = copy(&mesh, &value, to).map_err(|e| e.to_string());
                    out.put(to, id, copy, Instant::now());
                }
            })
            .ok();
        DeviceCopyTransport {
            queue: Mutex::new(thread.map(|_| queue)),
            mailbox,
        }
    }
}

/// A copy of `value` on group `to`'s devices, issued (not finished).
fn copy(mesh: &MpmdMesh, value: &Array, to: usize) -> Result<Array, BoxError> {
    let target = mesh.group(to)?;
    let sharding = NamedSharding::new(target, value.sharding().spec().clone())?;
    let buffers = value
        .addressable_shards()?
        .iter()
        .zip(target.device_ids())
        .map(|(shard, &device)| shard.buffer.copy_to(device as i32))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Array::from_shards(
        value.shape(),
        value.element_type(),
        &sharding,
        buffers,
    )?)
}

impl Transport<Array> for DeviceCopyTransport {
    fn send(&self, id: ValueId, value: &Array, _from: usize, to: usize) -> Result<(), BoxError> {
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let queue = queue
            .as_ref()
            .ok_or("the transport's copy thread could not be started")?;
        queue
            .send((id, value.clone(), to))
            .map_err(|_| "the transport's copy thread has stopped".into())
    }

    fn recv(&self, id: ValueId, to: usize, deadline: Instant) -> Result<Option<Array>, BoxError> {
        match self.mailbox.take(to, id, deadline) {
            Some(Ok(array)) => Ok(Some(array)),
            Some(Err(message)) => Err(message.into()),
            None => Ok(None),
        }
    }
}

impl Drop for DeviceCopyTransport {
    fn drop(&mut self) {
        // Closing the queue ends the copy thread once it has issued what was queued; it is not
        // waited for, so dropping the transport never blocks.
        drop(self.queue.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}
