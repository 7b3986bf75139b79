//! PJRT events: completion of asynchronous transfers and executions.

use crate::client::args;
use crate::error::Result;
use crate::plugin::{Plugin, api_call};
use crate::sys;

/// An owned `PJRT_Event`, destroyed on drop.
pub(crate) struct Event {
    plugin: &'static Plugin,
    raw: *mut sys::PJRT_Event,
}

impl Event {
    /// Wraps an event, or `None` for a null pointer (nothing to wait for).
    pub(crate) fn new(plugin: &'static Plugin, raw: *mut sys::PJRT_Event) -> Option<Event> {
        (!raw.is_null()).then_some(Event { plugin, raw })
    }

    /// The raw event, for registering callbacks on it.
    pub(crate) fn raw(&self) -> *mut sys::PJRT_Event {
        self.raw
    }

    /// Blocks until the event is ready and returns its error, if any.
    pub(crate) fn wait(self) -> Result<()> {
        let mut args = args!(PJRT_Event_Await_Args { event: self.raw });
        api_call!(self.plugin, PJRT_Event_Await, &mut args)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let mut args = args!(PJRT_Event_Destroy_Args { event: self.raw });
        let _ = (|| -> Result<()> { api_call!(self.plugin, PJRT_Event_Destroy, &mut args) })();
    }
}

/// Waits for an optional event.
pub(crate) fn wait(plugin: &'static Plugin, raw: *mut sys::PJRT_Event) -> Result<()> {
    match Event::new(plugin, raw) {
        Some(event) => event.wait(),
        None => Ok(()),
    }
}
