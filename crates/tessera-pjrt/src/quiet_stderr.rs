//! Hiding known noise of the plugins: a false alarm of the CPU plugin while it loads a cached
//! executable, and the lines its client's creation logs before anything asked for a log.
//!
//! zml-cpu logs two long `cpu_aot_loader` error lines for every executable it deserializes,
//! saying the compile machine had features the host lacks (`+prefer-no-gather`,
//! `+prefer-no-scatter`). Those are XLA's code-generation preferences, not instruction sets,
//! and the persistent cache's key holds the host CPU's model and flags, so a loaded entry was
//! compiled on this kind of machine. While a load runs, the process's standard error goes to a
//! temporary file; afterwards every line but those is written to the real standard error, so
//! nothing else the plugin says is lost (a line another thread wrote in that moment comes out
//! after the load).
//!
//! Creating a client, the CPU plugins log (through absl, before any program of the process
//! initialised absl's logging) absl's one-time `WARNING: All log messages before
//! absl::InitializeLog() is called are written to STDERR` and an info line about the device
//! count it was given: each MPI rank printed both. They are dropped the same way
//! ([`without_client_chatter`]); everything else the plugin says at creation is kept.

use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::sync::Mutex;

/// One redirection at a time: standard error is process-wide.
static REDIRECT: Mutex<()> = Mutex::new(());

/// Whether `line` is the loader's warning about code-generation preferences.
fn is_false_alarm(line: &str) -> bool {
    line.contains("cpu_aot_loader")
        && line.contains("Target machine feature +prefer-no-")
        && line.contains("not  supported on the host machine")
}

/// Whether `line` is a client creation's chatter (see the module docs).
fn is_client_chatter(line: &str) -> bool {
    is_absl_preamble(line)
        || (line.contains("pjrt_c_api_cpu_internal.cc")
            && line.contains("cpu_device_count set via create_options"))
}

/// Runs `create` (a client's creation) with its chatter dropped from standard error.
pub(crate) fn without_client_chatter<T>(create: impl FnOnce() -> T) -> T {
    without_lines(is_client_chatter, create)
}

/// Runs `load` with the loader's false alarms dropped from standard error (and absl's
/// preamble, which the first of them prints when nothing logged before). If standard error
/// cannot be redirected, `load` runs as it is.
pub(crate) fn without_loader_alarms<T>(load: impl FnOnce() -> T) -> T {
    without_lines(|line| is_false_alarm(line) || is_absl_preamble(line), load)
}

/// Whether `line` is absl's one-time warning that logging was not initialised.
fn is_absl_preamble(line: &str) -> bool {
    line.starts_with("WARNING: All log messages before absl::InitializeLog() is called")
}

/// Runs `load` with the lines `is_noise` names dropped from standard error.
fn without_lines<T>(is_noise: fn(&str) -> bool, load: impl FnOnce() -> T) -> T {
    let _guard = REDIRECT.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut capture) = tempfile() else {
        return load();
    };
    let _ = std::io::stderr().flush();
    // SAFETY: dup/dup2/close on the process's own descriptors; `saved` is restored below.
    let saved = unsafe { libc::dup(2) };
    if saved < 0 || unsafe { libc::dup2(capture.as_raw_fd(), 2) } < 0 {
        if saved >= 0 {
            unsafe { libc::close(saved) };
        }
        return load();
    }
    let result = load();
    let _ = std::io::stderr().flush();
    // SAFETY: puts the saved descriptor back as standard error and closes the copy.
    unsafe {
        libc::dup2(saved, 2);
        libc::close(saved);
    }
    let mut text = String::new();
    if capture.rewind().is_ok() && capture.read_to_string(&mut text).is_ok() {
        let kept: String = text
            .split_inclusive('\n')
            .filter(|line| !is_noise(line))
            .collect();
        let _ = std::io::stderr().write_all(kept.as_bytes());
    }
    result
}

/// An unnamed temporary file (created and unlinked at once).
fn tempfile() -> Option<std::fs::File> {
    let name = format!(
        "tessera-stderr-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    );
    let path = std::env::temp_dir().join(name.replace(['(', ')'], ""));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .ok()?;
    let _ = std::fs::remove_file(&path);
    Some(file)
}

#[cfg(test)]
mod tests {
    use super::{is_client_chatter, is_false_alarm};

    #[test]
    fn only_absls_preamble_and_the_device_count_line_are_client_chatter() {
        assert!(is_client_chatter(
            "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        ));
        assert!(is_client_chatter(
            "I0000 00:00:1795929385.219669   16233 pjrt_c_api_cpu_internal.cc:61] cpu_device_count set via create_options: 8\n"
        ));
        assert!(!is_client_chatter(
            "E0000 pjrt_c_api_cpu_internal.cc:70] bad option\n"
        ));
        assert!(!is_client_chatter("WARNING: something else\n"));
    }

    #[test]
    fn only_the_loaders_preference_warning_is_a_false_alarm() {
        let alarm = "E0000 00:00:1795719274.256959   25647 cpu_aot_loader.cc:195] Loading XLA:CPU AOT result. Target machine feature +prefer-no-scatter is not  supported on the host machine. Machine type used";
        assert!(is_false_alarm(alarm));
        let real = "E0000 cpu_aot_loader.cc:195] Loading XLA:CPU AOT result. Target machine feature +avx512f is not  supported on the host machine.";
        assert!(!is_false_alarm(real));
        assert!(!is_false_alarm("E0000 some other plugin error"));
    }
}
