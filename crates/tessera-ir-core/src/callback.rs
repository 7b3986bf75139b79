//! The registry of host callbacks: the Rust closures that `pure_callback`, `io_callback` and
//! `debug_callback` equations call (JAX's `jax.pure_callback`, `jax.experimental.io_callback`,
//! `jax.debug.callback`). An equation holds only the closure's id (its `callback` parameter);
//! the closure lives here, shared (`Arc`), so the interpreter and a compiled program's host
//! callback handler (`tessera-pjrt`'s typed XLA FFI handler) reach the same one.
//!
//! Closures are never removed: an id stays valid for the life of the process (a program traced
//! once may be compiled and run many times). A printed program names its callbacks by id, but
//! text cannot carry a closure, so the parser refuses callback equations.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::array::Array;

/// The custom-call target a compiled program calls its host callbacks through (the typed XLA
/// FFI handler `tessera-pjrt` registers; the lowering emits it).
pub const HOST_CALLBACK_TARGET: &str = "tessera_host_callback";

/// The `backend_config` attribute holding a custom call's callback id.
pub const CALLBACK_ID_ATTR: &str = "callback_id";

/// The `backend_config` attribute (`1`) of an ordered `io_callback`'s custom call: its last
/// operand and last result are the order token (an `i32[]` that chains the program's ordered
/// callbacks, so XLA runs them in program order).
pub const ORDER_TOKEN_ATTR: &str = "order_token";

/// A host callback: called with the operands as host arrays, returns the results (their shapes
/// and dtypes must be the declared result types) or a message saying what went wrong.
pub type HostCallback = dyn Fn(&[Array]) -> Result<Vec<Array>, String> + Send + Sync;

/// The id of a registered host callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallbackId(pub u64);

fn registry() -> &'static Mutex<HashMap<u64, Arc<HostCallback>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<u64, Arc<HostCallback>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Registers `f` and returns its id (ids start at 1 and are never reused).
pub fn register(f: Arc<HostCallback>) -> CallbackId {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id, f);
    CallbackId(id)
}

/// The callback registered under `id`, if any.
pub fn lookup(id: CallbackId) -> Option<Arc<HostCallback>> {
    registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&id.0)
        .cloned()
}
