//! How many programs a `cargo xtask demo` compiled with XLA and loaded from the persistent compile
//! cache, counted honestly: every `tessera` process the demo starts appends one line per compile
//! or load to `target/demo-compiles.log` (`TESSERA_COMPILE_EVENTS`, written by tessera-pjrt), and
//! the demo reads them at its end. The previous demo's log is kept, so the second demo says which
//! of its compiles (by cache key) the first one had compiled already: none, when the cache works.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use anyhow::Context;

use crate::cmd;

/// The variable tessera-pjrt appends its compile events to.
const EVENTS_ENV: &str = "TESSERA_COMPILE_EVENTS";

static LOG: OnceLock<PathBuf> = OnceLock::new();

fn log_path() -> PathBuf {
    cmd::workspace_root()
        .join("target")
        .join("demo-compiles.log")
}

fn previous_path() -> PathBuf {
    cmd::workspace_root()
        .join("target")
        .join("demo-compiles.previous.log")
}

/// Starts counting: the last demo's log becomes the previous one, and every command built by
/// [`attach`] from now on appends to a fresh log.
pub fn start() -> anyhow::Result<()> {
    let (log, previous) = (log_path(), previous_path());
    if log.exists() {
        std::fs::rename(&log, &previous)
            .with_context(|| format!("moving {} to {}", log.display(), previous.display()))?;
    }
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let _ = LOG.set(log);
    Ok(())
}

/// Makes `command` report its compiles to the demo's log (once [`start`] ran).
pub fn attach(command: &mut Command) {
    if let Some(log) = LOG.get() {
        command.env(EVENTS_ENV, log);
    }
}

/// One line of the log: `compile KEY @NAME` or `load KEY @NAME`.
struct Event {
    load: bool,
    key: String,
    name: String,
}

/// The events of the log at `path`; a log that is missing (no process wrote it) reads as `None`,
/// one that cannot be read is an error.
fn read(path: &PathBuf) -> anyhow::Result<Option<Vec<Event>>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    Ok(Some(parse(&text)))
}

fn parse(text: &str) -> Vec<Event> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            let load = match words.next()? {
                "load" => true,
                "compile" => false,
                _ => return None,
            };
            Some(Event {
                load,
                key: words.next()?.to_owned(),
                name: words.next().unwrap_or("<module>").to_owned(),
            })
        })
        .collect()
}

/// Prints the demo's compile and cache-load counts, and which of its compiles the previous demo
/// had compiled too. A log that no process wrote, or wrote no event to, is an error: the demo's
/// programs were compiled or loaded somewhere, so an empty count means the events were lost
/// (not that nothing was compiled).
pub fn report() -> anyhow::Result<()> {
    let Some(log) = LOG.get() else {
        return Ok(());
    };
    let events = match read(log)? {
        Some(events) if !events.is_empty() => events,
        _ => anyhow::bail!(
            "no compile events were recorded in {} ({EVENTS_ENV}), though the demo ran programs: \
             the count of compiles is unknown (see the warnings above for a failed write)",
            log.display()
        ),
    };
    let compiled: Vec<&Event> = events.iter().filter(|e| !e.load).collect();
    let loaded = events.len() - compiled.len();
    let uncached = compiled.iter().filter(|e| e.key == "-").count();
    cmd::step(&format!(
        "demo: {} programs compiled by XLA, {loaded} loaded from the persistent compile cache{} \
         (each line of {})",
        compiled.len(),
        if uncached > 0 {
            format!("; {uncached} of the compiles outside the cache")
        } else {
            String::new()
        },
        log.display()
    ));
    let previous = read(&previous_path())?.unwrap_or_default();
    if compiled.is_empty() {
        println!("this demo compiled nothing: every program came from the cache");
        return Ok(());
    }
    if previous.is_empty() {
        println!(
            "no previous demo's log to compare with: a second `cargo xtask demo` should load \
             these {} programs from the cache, and says so here",
            compiled.len()
        );
        return Ok(());
    }
    let before: BTreeSet<&str> = previous
        .iter()
        .filter(|e| !e.load && e.key != "-")
        .map(|e| e.key.as_str())
        .collect();
    let again: Vec<&str> = compiled
        .iter()
        .filter(|e| before.contains(e.key.as_str()))
        .map(|e| e.name.as_str())
        .collect();
    if before.is_empty() {
        println!(
            "the previous demo compiled nothing, so there is nothing to compare with (another \
             cache folder, or an emptied one); a second `cargo xtask demo` should load these {} \
             programs from the cache, and says so here",
            compiled.len()
        );
    } else if again.is_empty() {
        println!(
            "of the {} programs the previous demo compiled, this one compiled none again",
            before.len()
        );
    } else {
        println!(
            "{} programs the previous demo compiled were compiled again (is the cache off or \
             unwritable?): {}",
            again.len(),
            again.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_no_process_wrote_is_an_unknown_count_not_zero_compiles() {
        let dir =
            std::env::temp_dir().join(format!("tessera-compile-count-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.log");
        assert!(read(&missing).unwrap().is_none());
        let written = dir.join("written.log");
        std::fs::write(&written, "compile abc @main\nload def @step\nnoise\n").unwrap();
        let events = read(&written).unwrap().unwrap();
        assert_eq!(events.len(), 2);
        assert!(!events[0].load && events[1].load);
        assert_eq!(
            (events[1].key.as_str(), events[1].name.as_str()),
            ("def", "@step")
        );
        // A folder in place of the log cannot be read: an error, not an empty log.
        assert!(read(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
