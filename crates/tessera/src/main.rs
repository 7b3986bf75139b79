//! The `tessera` command-line program.

mod cli;

use std::io::Write;
use std::process::ExitCode;

/// jemalloc for every allocation of the process: Rust's, and (its symbols unprefixed) the C
/// `malloc` the PJRT plugin calls. XLA's CPU runtime allocates each execution's temporaries as
/// one block (248 MB for `cargo xtask bench --checkpoints`' model); glibc maps such a block
/// afresh and unmaps it on free, so every step page-faulted it in again (about 70,000 faults a step).
/// jemalloc keeps freed pages for reuse (docs/profiling.md, "Page faults of XLA's temporaries").
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read when it starts (its documented `malloc_conf` symbol, which the
/// `MALLOC_CONF` environment variable overrides). `oversize_threshold:0`: blocks of 8 MiB and
/// more stay in the arenas that keep freed pages, not in the one that returns them to the
/// kernel at once (which would page-fault XLA's temporaries again each step).
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[allow(unsafe_code, non_upper_case_globals)]
#[unsafe(no_mangle)]
pub static malloc_conf: Option<&'static std::ffi::c_char> =
    // SAFETY: a pointer to the first byte of a static NUL-terminated string is a valid reference.
    Some(unsafe { &*c"oversize_threshold:0".as_ptr() });

fn main() -> ExitCode {
    let args = cli::Cli::parse_noting_given();
    let result = cli::run(args).and_then(|code| {
        cli::out::flush()?;
        Ok(code)
    });
    match result {
        Ok(code) => code,
        Err(err) => cli::out::closed_pipe_exit(&err).unwrap_or_else(|| {
            // A closed standard error has nowhere to say more: exit with the failure alone.
            let _ = writeln!(std::io::stderr(), "error: {err:#}");
            ExitCode::FAILURE
        }),
    }
}
