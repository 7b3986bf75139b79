//! Host work that must not slow the devices down: on a CPU plugin the "devices" are this
//! machine's cores, and XLA's threads keep them busy during a step, so a helper thread (a
//! checkpoint writer) that competes with them for the cores slows the step by more than its own
//! work. [`yield_cores_to_devices`] moves the calling thread to Linux's `SCHED_IDLE` class: it
//! runs only on cores nothing else wants. Elsewhere it does nothing.
//!
//! The opposite case is a thread that uses little CPU but sits on the step's critical path (a
//! pipeline group's worker, woken when an input arrives): [`wake_promptly`] asks Linux for a
//! short time slice, so that on waking it preempts a compute thread instead of queueing
//! behind that thread's slice.

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

/// The time slice [`wake_promptly`] asks for, in nanoseconds (the shortest Linux accepts).
pub const PROMPT_SLICE_NS: u64 = 100_000;

/// Asks Linux for a short time slice ([`PROMPT_SLICE_NS`]) for the calling thread, keeping its
/// policy and priority: since Linux 6.12 the fair scheduler (EEVDF) lets a woken thread with a
/// shorter slice preempt the running one, so a thread that mostly waits runs within about its
/// slice of being woken rather than after the running thread's (about 1.4 ms on 2 cores). The
/// thread's share of the CPU is unchanged. Returns whether the kernel took the request (older
/// kernels refuse it; elsewhere it does nothing).
pub fn wake_promptly() -> bool {
    #[cfg(target_os = "linux")]
    {
        // `sched_setattr` also sets the nice value: keep the thread's own (raising it back to
        // 0 from a `nice`d start would be refused).
        // SAFETY: `getpriority` on the calling thread (who 0) reads its nice value.
        let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let attr = libc::sched_attr {
            size: std::mem::size_of::<libc::sched_attr>() as u32,
            sched_policy: libc::SCHED_OTHER as u32,
            sched_flags: 0,
            sched_nice: nice,
            sched_priority: 0,
            sched_runtime: PROMPT_SLICE_NS,
            sched_deadline: 0,
            sched_period: 0,
        };
        // SAFETY: `sched_setattr` with pid 0 changes the calling thread's attributes; `attr`
        // is a valid, initialised `sched_attr` whose `size` field is its own size, and it
        // outlives the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_sched_setattr,
                0,
                &attr as *const libc::sched_attr,
                0,
            )
        };
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

    /// The kernel's release as (major, minor), from `/proc/sys/kernel/osrelease`.
    #[cfg(target_os = "linux")]
    fn kernel_release() -> (u32, u32) {
        let text = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = text
            .trim()
            .split(['.', '-'])
            .map(|p| p.parse().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_thread_gets_the_short_slice_it_asks_for_and_keeps_its_nice_value() {
        let (moved, slice, nice) = std::thread::spawn(|| {
            // SAFETY: `setpriority` on the calling thread (who 0) to a lower priority.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 3) };
            let moved = super::wake_promptly();
            let mut attr = libc::sched_attr {
                size: 0,
                sched_policy: 0,
                sched_flags: 0,
                sched_nice: 0,
                sched_priority: 0,
                sched_runtime: 0,
                sched_deadline: 0,
                sched_period: 0,
            };
            let size = std::mem::size_of::<libc::sched_attr>() as u32;
            // SAFETY: `sched_getattr` on the calling thread writes at most `size` bytes into
            // `attr`, a valid `sched_attr` of that size.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_sched_getattr,
                    0,
                    &mut attr as *mut libc::sched_attr,
                    size,
                    0,
                )
            };
            assert_eq!(rc, 0);
            (moved, attr.sched_runtime, attr.sched_nice)
        })
        .join()
        .unwrap_or((false, 0, 0));
        // Custom slices of normal threads exist since Linux 6.12; older kernels may refuse.
        if kernel_release() >= (6, 12) {
            assert!(moved);
            assert_eq!(slice, super::PROMPT_SLICE_NS);
        }
        assert_eq!(nice, 3, "the thread's nice value is kept");
    }
}
