//! Waiting for buffers without blocking inside PJRT: [`Readiness`] registers one
//! `PJRT_Event_OnReady` callback per buffer, each counting down a latch, so one thread waits for
//! all of them and can stop waiting (a deadline, a failed run elsewhere) while the device
//! finishes in the background. PJRT has no way to cancel a running computation; what can be
//! given up is the wait.

use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::buffer::Buffer;
use crate::client::args;
use crate::error::{PjrtError, Result};
use crate::plugin::{Plugin, api_call};
use crate::sys;

/// Events not yet ready, and the first error one of them reported.
#[derive(Default)]
struct Pending {
    count: usize,
    error: Option<String>,
}

#[derive(Default)]
struct Latch {
    pending: Mutex<Pending>,
    changed: Condvar,
}

impl Latch {
    fn count_down(&self, error: Option<String>) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.count = pending.count.saturating_sub(1);
        let failed = error.is_some();
        if pending.error.is_none() {
            pending.error = error;
        }
        // Wake the waiter only when its answer changes: waking it once per buffer would cost
        // a thread switch per buffer.
        if pending.count == 0 || failed {
            self.changed.notify_all();
        }
    }
}

/// What one callback needs: the latch to count down and the plugin to read the error with.
struct CallbackArg {
    latch: Arc<Latch>,
    plugin: &'static Plugin,
}

/// The `PJRT_Event_OnReady` callback: reads and destroys the event's error, counts down.
unsafe extern "C" fn on_ready(error: *mut sys::PJRT_Error, user_arg: *mut c_void) {
    // SAFETY: `user_arg` is the `Box<CallbackArg>` leaked by `Readiness::watch` for this one
    // registration; PJRT calls each registered callback exactly once.
    let arg = unsafe { Box::from_raw(user_arg.cast::<CallbackArg>()) };
    let failure = arg
        .plugin
        .check(error, "PJRT_Event_OnReady")
        .err()
        .map(|e| e.to_string());
    arg.latch.count_down(failure);
}

/// Whether a set of buffers is computed, learnt through `PJRT_Event_OnReady` callbacks.
pub struct Readiness {
    latch: Arc<Latch>,
}

impl Readiness {
    /// Starts watching `buffers`.
    pub fn watch(buffers: &[&Buffer]) -> Result<Readiness> {
        let latch = Arc::new(Latch::default());
        latch
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .count = buffers.len();
        for buffer in buffers {
            let plugin = buffer.client().plugin();
            let Some(event) = buffer.ready_event()? else {
                latch.count_down(None);
                continue;
            };
            let arg = Box::into_raw(Box::new(CallbackArg {
                latch: latch.clone(),
                plugin,
            }));
            let mut args = args!(PJRT_Event_OnReady_Args {
                event: event.raw(),
                callback: Some(on_ready),
                user_arg: arg.cast::<c_void>(),
            });
            let registered =
                (|| -> Result<()> { api_call!(plugin, PJRT_Event_OnReady, &mut args) })();
            if let Err(e) = registered {
                // SAFETY: the registration failed, so the callback will never take `arg` back.
                drop(unsafe { Box::from_raw(arg) });
                return Err(e);
            }
            // The event's wrapper may go: the callback is held by the computation's future.
            drop(event);
        }
        Ok(Readiness { latch })
    }

    /// Waits up to `timeout` for every buffer: `true` once all are computed, `false` if some
    /// are still computing; the error of a computation that failed.
    pub fn wait_for(&self, timeout: Duration) -> Result<bool> {
        let until = Instant::now() + timeout;
        let mut pending = self.latch.pending.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(message) = &pending.error {
                return Err(PjrtError::Call {
                    function: "PJRT_Event_OnReady",
                    code: crate::ErrorCode::Unknown,
                    message: message.clone(),
                });
            }
            if pending.count == 0 {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= until {
                return Ok(false);
            }
            pending = self
                .latch
                .changed
                .wait_timeout(pending, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Waits until every buffer is computed, or `stop()` says to give up (checked every
    /// `every`): `true` when all are computed, `false` when stopped.
    pub fn wait_unless(&self, stop: &dyn Fn() -> bool, every: Duration) -> Result<bool> {
        loop {
            if self.wait_for(every)? {
                return Ok(true);
            }
            if stop() {
                return Ok(false);
            }
        }
    }
}
