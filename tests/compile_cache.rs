//! The persistent compile cache end to end: `tessera train` run twice against one fresh cache
//! folder compiles every program the first time and none the second (each loaded from the cache,
//! and `TESSERA_LOG_COMPILES=1` says which), with losses equal bit for bit; with the cache off it
//! compiles again. The counts are the `compiles` of the `--json` summary, checked against the
//! log's lines and the events file (`TESSERA_COMPILE_EVENTS`, what `cargo xtask demo` counts):
//! the second run loads exactly the keys the first compiled, each a file in the cache. The other
//! CPU plugin caches its own entries beside the default plugin's.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::Command;

use tessera_tests::{summary_numbers, tessera_bin, train_summary};

/// A small pipelined MLP with its unpipelined reference (which compiles through `jit`).
const ARGS: &[&str] = &[
    "train",
    "--model",
    "mlp",
    "--stages",
    "2",
    "--microbatches",
    "2",
    "--batch",
    "8",
    "--steps",
    "3",
    "--eval-every",
    "0",
    "--json",
];

struct Run {
    summary: serde_json::Value,
    /// The events file's `(word, key)` pairs.
    events: Vec<(String, String)>,
    compile_lines: usize,
    hit_lines: usize,
}

impl Run {
    fn count(&self, what: &str) -> u64 {
        self.summary["compiles"][what]
            .as_u64()
            .unwrap_or_else(|| panic!("no compiles.{what} in {}", self.summary))
    }
}

fn train(cache: &std::path::Path, switch: &str) -> Run {
    train_on(cache, switch, None)
}

/// `tessera train` on `plugin` (default: the default CPU plugin).
fn train_on(cache: &std::path::Path, switch: &str, plugin: Option<&str>) -> Run {
    let events = cache.with_extension("events");
    let _ = std::fs::remove_file(&events);
    let out = Command::new(tessera_bin())
        .args(ARGS)
        .args(plugin.map(|p| ["--plugin", p]).into_iter().flatten())
        .env_remove("TESSERA_PJRT_PLUGIN")
        .env("TF_CPP_MIN_LOG_LEVEL", "2")
        .env("TESSERA_LOG_COMPILES", "1")
        .env("TESSERA_COMPILE_CACHE", switch)
        .env("TESSERA_COMPILE_CACHE_DIR", cache)
        .env("TESSERA_COMPILE_EVENTS", &events)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", tessera_bin().display()));
    let summary = train_summary(&out, &format!("{ARGS:?} with the cache {switch}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines = |prefix: &str| stderr.lines().filter(|l| l.starts_with(prefix)).count();
    let events = std::fs::read_to_string(&events)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let words: Vec<&str> = l.split(' ').collect();
            assert_eq!(words.len(), 3, "{l}");
            (words[0].to_owned(), words[1].to_owned())
        })
        .collect();
    Run {
        events,
        compile_lines: lines("compile: @"),
        hit_lines: lines("cache hit: @"),
        summary,
    }
}

#[test]
fn a_second_training_run_loads_every_program_from_the_cache() {
    let cache = std::env::temp_dir().join(format!("tessera-compile-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);

    let first = train(&cache, "1");
    let compiled = first.count("compiled");
    assert!(compiled > 0, "{}", first.summary);
    assert_eq!(
        first.count("loaded"),
        0,
        "a fresh folder has nothing to load"
    );
    assert_eq!(
        first.compile_lines as u64, compiled,
        "one log line per compile"
    );
    assert_eq!(first.hit_lines, 0);
    assert_eq!(
        first.summary["compiles"]["cache_dir"].as_str(),
        Some(cache.to_str().unwrap())
    );
    let entries = std::fs::read_dir(&cache).unwrap().count() as u64;
    assert!(
        entries > 0 && entries <= compiled,
        "{entries} entries for {compiled} compiles"
    );
    assert_eq!(first.events.len() as u64, compiled);
    let mut compiled_keys: Vec<&str> = first.events.iter().map(|(_, k)| k.as_str()).collect();
    for (word, key) in &first.events {
        assert_eq!(word, "compile");
        assert!(cache.join(format!("{key}.xla")).is_file(), "no entry {key}");
    }

    let second = train(&cache, "1");
    assert_eq!(second.count("compiled"), 0, "{}", second.summary);
    assert_eq!(second.count("loaded"), compiled, "{}", second.summary);
    assert_eq!(second.compile_lines, 0);
    assert_eq!(second.hit_lines as u64, compiled, "one log line per load");
    assert!(second.events.iter().all(|(word, _)| word == "load"));
    let mut loaded_keys: Vec<&str> = second.events.iter().map(|(_, k)| k.as_str()).collect();
    compiled_keys.sort_unstable();
    loaded_keys.sort_unstable();
    assert_eq!(
        loaded_keys, compiled_keys,
        "the second run loads what the first compiled"
    );
    for key in ["losses", "reference_losses"] {
        let (a, b) = (
            summary_numbers(&first.summary, key),
            summary_numbers(&second.summary, key),
        );
        assert_eq!(a.len(), 3, "{key}");
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b), "{key}: {a:?} vs {b:?}");
    }

    let off = train(&cache, "0");
    assert_eq!(off.count("compiled"), compiled, "{}", off.summary);
    assert_eq!(off.count("loaded"), 0);
    assert!(off.summary["compiles"]["cache_dir"].is_null());
    assert!(
        off.events
            .iter()
            .all(|(word, key)| word == "compile" && key == "-")
    );
    std::fs::remove_dir_all(&cache).unwrap();
    let _ = std::fs::remove_file(cache.with_extension("events"));
}

/// The other CPU plugin of `cargo xtask setup` (`xla-cpu-pjrt`) serializes and loads its
/// executables too, and never takes the default plugin's entries from the same folder.
#[test]
fn each_plugin_has_its_own_entries() {
    let cache = std::env::temp_dir().join(format!("tessera-plugin-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let default = train(&cache, "1");
    let compiled = default.count("compiled");
    assert!(compiled > 0, "{}", default.summary);
    let other = train_on(&cache, "1", Some("xla-cpu-pjrt"));
    assert_eq!(
        (other.count("compiled"), other.count("loaded")),
        (compiled, 0),
        "another plugin is another key: {}",
        other.summary
    );
    let again = train_on(&cache, "1", Some("xla-cpu-pjrt"));
    assert_eq!(
        (again.count("compiled"), again.count("loaded")),
        (0, compiled),
        "{}",
        again.summary
    );
    let bits = |r: &Run| {
        summary_numbers(&r.summary, "losses")
            .iter()
            .map(|x| x.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(bits(&other), bits(&again));
    std::fs::remove_dir_all(&cache).unwrap();
    let _ = std::fs::remove_file(cache.with_extension("events"));
}
