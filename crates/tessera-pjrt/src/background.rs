//! Host work that must not slow the devices down: on a CPU plugin the "devices" are this
//! machine's cores, and XLA's threads keep them busy during a step, so a helper thread (a
//! checkpoint writer) that competes with them for the cores slows the step by more than its own
//! work. [`yield_cores_to_devices`] moves the calling thread to Linux's `SCHED_IDLE` class: it
//! runs only on cores nothing else wants. Elsewhere it does nothing.

/// Runs the calling thread only when a core is otherwise idle (`SCHED_IDLE` on Linux); returns
/// whether the scheduler took the request.
pub fn yield_cores_to_devices() -> bool {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `sched_setscheduler` with pid 0 changes the calling thread's policy; `param`
        // is a valid, initialised `sched_param` that outlives the call.
        let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
        rc == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_os = "linux")]
    fn a_thread_moves_to_the_idle_class() {
        let on_idle = std::thread::spawn(|| {
            let moved = super::yield_cores_to_devices();
            // SAFETY: `sched_getscheduler(0)` reads the calling thread's policy.
            let policy = unsafe { libc::sched_getscheduler(0) };
            (moved, policy)
        })
        .join()
        .unwrap_or((false, -1));
        assert_eq!(on_idle, (true, libc::SCHED_IDLE));
        // The test's own thread is untouched.
        // SAFETY: as above.
        assert_ne!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_IDLE);
    }
}
