//! The `tessera` command-line program.

mod cli;

use std::io::Write;
use std::process::ExitCode;

// jemalloc as the process's `malloc`, freed pages kept for reuse: XLA's CPU temporaries are not
// page-faulted in again every step (`tessera::alloc`, docs/profiling.md).
tessera::use_jemalloc!();

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
