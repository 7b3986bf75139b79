//! Writing to standard output without panicking: `println!` panics when stdout is a closed pipe
//! (`tessera ... | head`) or a full disk. [`outln!`] and [`out!`] return an error instead, and
//! [`exit_code`] turns a closed pipe into a quiet exit, as `cat` ends on one, while any other
//! write error (a full disk) is reported naming standard output.

use std::io::Write;
use std::process::ExitCode;

/// A failed write to standard output.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to standard output")]
pub struct StdoutError(#[from] pub std::io::Error);

/// Writes formatted text to standard output; a failed write is a [`StdoutError`].
pub fn write_fmt(args: std::fmt::Arguments<'_>) -> Result<(), StdoutError> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_fmt(args)?;
    Ok(())
}

/// Flushes standard output (a full disk shows here for text without a final newline).
pub fn flush() -> Result<(), StdoutError> {
    Ok(std::io::stdout().lock().flush()?)
}

/// `println!` that returns `Result<(), StdoutError>` instead of panicking.
macro_rules! outln {
    () => { $crate::cli::out::write_fmt(format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::cli::out::write_fmt(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that returns `Result<(), StdoutError>` instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::out::write_fmt(format_args!($($arg)*)) };
}

pub(crate) use {out, outln};

/// The exit status of a failed run: a closed standard output (a reader such as `head` that
/// stopped reading) ends the program quietly with 141, the status of a process ended by
/// SIGPIPE; `None` for every other error, which the caller reports.
pub fn closed_pipe_exit(err: &anyhow::Error) -> Option<ExitCode> {
    let closed = err.chain().any(|cause| {
        cause
            .downcast_ref::<StdoutError>()
            .is_some_and(|e| e.0.kind() == std::io::ErrorKind::BrokenPipe)
    });
    closed.then(|| ExitCode::from(141))
}
