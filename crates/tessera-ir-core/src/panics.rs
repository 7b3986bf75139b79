//! Panics caught on purpose: [`catch_unwind`] marks the calling thread while it runs its
//! closure, so that a process-wide panic hook (the MPI job's, which ends the whole job) can tell
//! a panic that will be turned into a typed error ([`will_be_caught`]) from one that nothing
//! catches. Every place of Tessera that turns a panic into an error (a host callback, a pipeline
//! group's worker) goes through it.

use std::cell::Cell;
use std::panic::AssertUnwindSafe;

thread_local! {
    /// How many [`catch_unwind`]s the thread is inside.
    static CATCHING: Cell<u32> = const { Cell::new(0) };
}

/// Runs `f`, catching a panic (as `std::panic::catch_unwind`), with the thread marked as
/// catching while it runs.
pub fn catch_unwind<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    CATCHING.with(|c| c.set(c.get() + 1));
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(c.get().saturating_sub(1)));
    result
}

/// Whether a panic on this thread now would be caught by a [`catch_unwind`] (for a panic hook,
/// which runs before the unwinding).
pub fn will_be_caught() -> bool {
    CATCHING.with(|c| c.get() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_is_marked_only_inside() {
        assert!(!will_be_caught());
        let inside = catch_unwind(will_be_caught);
        assert!(matches!(inside, Ok(true)));
        let nested =
            catch_unwind(|| catch_unwind(|| panic!("caught")).is_err() && will_be_caught());
        assert!(matches!(nested, Ok(true)));
        assert!(catch_unwind(|| panic!("caught")).is_err());
        assert!(!will_be_caught());
    }
}
