//! `docs/runs/`: every benchmark's raw results, one JSON file per benchmark, and
//! `docs/benchmarks.md` generated from them and from nothing else.
//!
//! A file is `{"benchmark": NAME, "meta": {...}, "data": {...}}`: `meta` says where and on what
//! it ran (the commit, whether the tree had uncommitted changes, the machine, the date, the load
//! average at the end, the PJRT plugin), `data` holds what the benchmark measured, every
//! round's figures, not only their medians. A benchmark whose command does not write its file
//! yet is kept as a *transcribed* file: its section copied once from an earlier
//! `docs/benchmarks.md`, with `transcribed` saying from where and why, and the page says so above
//! its tables (whatever the section's renderer, a file with `transcribed` is drawn so). [`SECTIONS`]
//! is the page's order; a file in `docs/runs/` that no section renders
//! is an error, so no run is dropped silently. A planner preset's earlier runs, replaced by a
//! later one, are kept whole in `docs/runs/earlier/` (any file name) and summed up under the
//! preset's section, so that a miss does not vanish when a rerun meets the target.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use crate::cmd::{self, step};

/// Where the runs are kept.
pub const RUNS_DIR: &str = "docs/runs";
/// Earlier runs of a section, kept beside the one it renders (planner presets only).
pub const EARLIER_DIR: &str = "docs/runs/earlier";
/// The page generated from them.
pub const OUTPUT: &str = "docs/benchmarks.md";

/// How a section is drawn from its run file.
#[derive(Clone, Copy, Debug)]
pub enum Renderer {
    /// The jit-step comparison with JAX ([`crate::jax`]).
    JitStep,
    /// The Llama rows against JAX ([`crate::llama`]).
    Llama,
    /// The pipelined steps against the simulator ([`crate::jax`]).
    Pipelined,
    /// The synthetic runs of every schedule ([`crate::synthetic`]).
    Synthetic,
    /// Checkpoints every step ([`crate::checkpoint_bench`]).
    Checkpoints,
    /// Saved residuals against recomputation ([`crate::remat_bench`]).
    Remat,
    /// Data-parallel stages reducing per step against per micro-batch ([`crate::dp_bench`]).
    DataParallel,
    /// The planner on one preset of `benches/plan_accuracy.py` ([`crate::plan_bench`]).
    Plan,
    /// Greedy generation against transformers ([`crate::generate_bench`]).
    Generate,
    /// The MPI transport against raw MPI ([`crate::mpi_bench`]).
    MpiTransport,
    /// Compile times of loops against unrolled steps ([`crate::compile_bench`]).
    Compile,
    /// A GPU run of the bundle's `run.sh` ([`crate::gpu_run`]).
    GpuRun,
    /// A section copied from an earlier page: its markdown as it was.
    Transcribed,
}

/// The page's sections in order: the run file's name (without `.json`) and how it is drawn.
pub const SECTIONS: &[(&str, Renderer)] = &[
    ("cpu-jit-step", Renderer::JitStep),
    ("cpu-llama", Renderer::Llama),
    ("cpu-pipelined", Renderer::Pipelined),
    ("cpu-synthetic", Renderer::Synthetic),
    ("cpu-remat", Renderer::Remat),
    ("cpu-data-parallel", Renderer::DataParallel),
    ("cpu-generate", Renderer::Generate),
    ("gpu-h100", Renderer::GpuRun),
    ("gpu-h200", Renderer::GpuRun),
    ("cpu-treduce-compile", Renderer::Compile),
    ("cpu-scan-compile", Renderer::Compile),
    ("cpu-mpi-transport", Renderer::MpiTransport),
    ("cpu-checkpoints", Renderer::Checkpoints),
    ("cpu-plan-gpt", Renderer::Plan),
    ("cpu-plan-llama", Renderer::Plan),
    ("cpu-plan-gpt-held-out", Renderer::Plan),
    ("cpu-plan-llama-held-out", Renderer::Plan),
    ("cpu-plan", Renderer::Transcribed),
];

/// Where and on what a benchmark ran, as its run file records it.
pub fn meta(root: &Path) -> Value {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| !s.is_empty());
    let load = fs::read_to_string("/proc/loadavg").ok().and_then(|t| {
        t.split_whitespace()
            .next()
            .and_then(|l| l.parse::<f64>().ok())
    });
    serde_json::json!({
        "commit": git(&["rev-parse", "--short=10", "HEAD"]),
        "uncommitted_changes": dirty,
        "machine": cmd::machine(),
        "date": cmd::output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        "load_average_at_end": load,
        "plugin": crate::jax::plugin_version(),
    })
}

/// Writes `docs/runs/NAME.json` with `data` and this machine's [`meta`].
pub fn write(root: &Path, name: &str, data: Value) -> anyhow::Result<PathBuf> {
    write_with_meta(root, name, data, meta(root))
}

/// [`write`](fn@write) with `meta` taken earlier (a benchmark writing several files takes it once, before
/// the first file makes the tree differ from the commit).
pub fn write_with_meta(
    root: &Path,
    name: &str,
    data: Value,
    meta: Value,
) -> anyhow::Result<PathBuf> {
    if !SECTIONS.iter().any(|(known, _)| *known == name) {
        bail!("{name} is not a section of {OUTPUT} (xtask/src/runs.rs: SECTIONS)");
    }
    let dir = root.join(RUNS_DIR);
    fs::create_dir_all(&dir).with_context(|| format!("could not make {}", dir.display()))?;
    let path = dir.join(format!("{name}.json"));
    let run = serde_json::json!({ "benchmark": name, "meta": meta, "data": data });
    let text = serde_json::to_string_pretty(&run)? + "\n";
    fs::write(&path, text).with_context(|| format!("could not write {}", path.display()))?;
    step(&format!("bench: wrote {}", path.display()));
    Ok(path)
}

/// Every run file, by name; refuses a file no section renders and one that is not a run.
fn read_all(root: &Path) -> anyhow::Result<Vec<(String, Value)>> {
    let dir = root.join(RUNS_DIR);
    let mut runs = Vec::new();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(runs),
        Err(e) => return Err(e).with_context(|| format!("could not read {}", dir.display())),
    };
    for entry in entries {
        let path = entry?.path();
        if path == root.join(EARLIER_DIR) {
            continue;
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".json"))
            .ok_or_else(|| anyhow!("{} is not a run file (NAME.json)", path.display()))?
            .to_owned();
        if !SECTIONS.iter().any(|(known, _)| *known == name) {
            bail!(
                "{} is not rendered by any section of {OUTPUT}; add it to SECTIONS in \
                 xtask/src/runs.rs or remove it",
                path.display()
            );
        }
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let run: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        if run.get("benchmark").and_then(Value::as_str) != Some(name.as_str()) {
            bail!("{}: its `benchmark` is not {name}", path.display());
        }
        runs.push((name, run));
    }
    Ok(runs)
}

/// The earlier runs in [`EARLIER_DIR`], each with the section it belongs to, oldest first;
/// refuses a file that is not a run of a planner preset's section (nothing else renders them).
fn read_earlier(root: &Path) -> anyhow::Result<Vec<(String, Value)>> {
    let dir = root.join(EARLIER_DIR);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("could not read {}", dir.display())),
    };
    let mut runs = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let run: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        let name = run["benchmark"].as_str().unwrap_or_default().to_owned();
        if !SECTIONS
            .iter()
            .any(|(known, r)| *known == name && matches!(r, Renderer::Plan))
        {
            bail!(
                "{}: its `benchmark` ({name:?}) is not a planner preset's section; only those \
                 keep earlier runs",
                path.display()
            );
        }
        runs.push((name, run));
    }
    runs.sort_by_cached_key(|(_, r)| r["meta"]["date"].as_str().unwrap_or_default().to_owned());
    Ok(runs)
}

/// "commit 1a2b3c4d5e (with uncommitted changes), AMD EPYC, 2 CPUs (nproc), 2026-11-29 08:00
/// UTC, load average 1.9 at the end": a run's provenance, for the page.
pub fn provenance(run: &Value) -> String {
    let meta = &run["meta"];
    let text = |key: &str| meta[key].as_str().unwrap_or("unknown").to_owned();
    let dirty = if meta["uncommitted_changes"].as_bool() == Some(true) {
        " (with uncommitted changes)"
    } else {
        ""
    };
    let load = meta["load_average_at_end"]
        .as_f64()
        .map_or_else(String::new, |l| format!(", load average {l:.2} at the end"));
    format!(
        "commit {}{dirty}, {}, {}{load}",
        text("commit"),
        text("machine"),
        text("date")
    )
}

/// The whole page from the run files.
pub fn render(root: &Path) -> anyhow::Result<String> {
    let runs = read_all(root)?;
    let earlier = read_earlier(root)?;
    let mut md = String::new();
    let _ = writeln!(md, "# Benchmarks");
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "Generated by `cargo xtask bench --render` from the raw runs in `{RUNS_DIR}/` (one JSON \
         file per benchmark: every round's figures, the commit, machine, plugin and date); do \
         not edit by hand, a test compares this page with its rendering. `cargo xtask bench \
         --compare-jax` measures the first four sections again and regenerates the page. A \
         section marked *transcribed* was copied once from an earlier page because its command \
         does not write a run file yet; it stays as it was until that command measures again. \
         How to reproduce each figure and where the time goes: [profiling.md](profiling.md)."
    );
    let _ = writeln!(md);
    for (name, renderer) in SECTIONS {
        let run = runs.iter().find(|(n, _)| n == name).map(|(_, r)| r);
        let kept: Vec<&Value> = earlier
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, r)| r)
            .collect();
        let Some(run) = run else {
            let _ = writeln!(
                md,
                "## `{name}`: not measured yet\n\nNo `{RUNS_DIR}/{name}.json` yet.\n"
            );
            // A preset's earlier runs stay on the page without a current one.
            crate::plan_bench::render_earlier(&mut md, &kept);
            continue;
        };
        if run.get("transcribed").is_some() {
            render_transcribed(&mut md, name, run)?;
            continue;
        }
        match renderer {
            Renderer::JitStep => crate::jax::render_jit_run(&mut md, run)?,
            Renderer::Llama => crate::llama::render_run(&mut md, run)?,
            Renderer::Pipelined => crate::jax::render_pipelined_run(&mut md, run)?,
            Renderer::Synthetic => crate::synthetic::render_run(&mut md, run)?,
            Renderer::Checkpoints => crate::checkpoint_bench::render_run(&mut md, run)?,
            Renderer::Plan => {
                crate::plan_bench::render_run(&mut md, run)?;
                crate::plan_bench::render_earlier(&mut md, &kept);
            }
            Renderer::Remat => crate::remat_bench::render_run(&mut md, run)?,
            Renderer::DataParallel => crate::dp_bench::render_run(&mut md, run)?,
            Renderer::GpuRun => crate::gpu_run::render_run(&mut md, run)?,
            Renderer::Generate => crate::generate_bench::render_run(&mut md, run)?,
            Renderer::MpiTransport => crate::mpi_bench::render_run(&mut md, run)?,
            Renderer::Compile => crate::compile_bench::render_run(&mut md, name, run)?,
            Renderer::Transcribed => render_transcribed(&mut md, name, run)?,
        }
    }
    Ok(md.trim_end().to_owned() + "\n")
}

/// A transcribed section: its heading, where it was copied from, then its markdown as it was.
fn render_transcribed(md: &mut String, name: &str, run: &Value) -> anyhow::Result<()> {
    let data = &run["data"];
    let field = |key: &str| {
        data[key]
            .as_str()
            .ok_or_else(|| anyhow!("{RUNS_DIR}/{name}.json: data.{key} is not text"))
    };
    let from = run["transcribed"]["from"].as_str().ok_or_else(|| {
        anyhow!("{RUNS_DIR}/{name}.json: a transcribed run says `transcribed.from`")
    })?;
    let until = run["transcribed"]["until"].as_str().unwrap_or("");
    let _ = writeln!(md, "## {}", field("title")?);
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "*Transcribed* from {from}, not measured by a command that writes `{RUNS_DIR}/{name}.json`; \
         {until}"
    );
    let _ = writeln!(md);
    let _ = writeln!(md, "{}", field("markdown")?.trim_end());
    let _ = writeln!(md);
    Ok(())
}

/// `cargo xtask bench --render`: `docs/benchmarks.md` from `docs/runs/`.
pub fn regenerate(root: &Path) -> anyhow::Result<()> {
    let text = render(root)?;
    let out = root.join(OUTPUT);
    fs::write(&out, text).with_context(|| format!("could not write {}", out.display()))?;
    step(&format!("bench: wrote {} from {RUNS_DIR}/", out.display()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed page is the rendering of the committed runs: nothing in it is typed by
    /// hand, and a run file changed without regenerating the page fails here.
    #[test]
    fn the_benchmarks_page_is_generated_from_the_runs() {
        let root = cmd::workspace_root();
        let rendered = render(&root).expect("the run files render");
        let page = fs::read_to_string(root.join(OUTPUT)).expect("docs/benchmarks.md");
        assert!(
            rendered == page,
            "{OUTPUT} is not the rendering of {RUNS_DIR}/: run `cargo xtask bench --render`"
        );
    }

    /// A fresh folder (named by `tag` and this process) standing for the workspace root, with
    /// one file `folder/one.json` holding `text`.
    fn root_with(tag: &str, folder: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tessera-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join(folder)).unwrap();
        fs::write(dir.join(folder).join("one.json"), text).unwrap();
        dir
    }

    #[test]
    fn an_unknown_run_file_is_refused() {
        let dir = root_with("runs", RUNS_DIR, "{}");
        let err = read_all(&dir).unwrap_err().to_string();
        assert!(err.contains("not rendered by any section"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_earlier_run_of_another_section_is_refused() {
        let dir = root_with("earlier", EARLIER_DIR, r#"{"benchmark": "cpu-llama"}"#);
        let err = read_earlier(&dir).unwrap_err().to_string();
        assert!(err.contains("not a planner preset's section"), "{err}");
        // The folder itself is not a run file of docs/runs.
        assert!(read_all(&dir).unwrap().is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A preset's earlier run stays on the page when the current run file is missing.
    #[test]
    fn an_earlier_run_is_drawn_without_a_current_one() {
        let run = r#"{"benchmark": "cpu-plan-gpt", "meta": {"commit": "abc"},
            "data": {"within_15_percent": 2, "of": 7, "regret": 0.0, "rounds": 0}}"#;
        let dir = root_with("earlier-only", EARLIER_DIR, run);
        let page = render(&dir).unwrap();
        let section = page
            .split("## `cpu-plan-gpt`: not measured yet")
            .nth(1)
            .unwrap();
        let section = section.split("## ").next().unwrap();
        assert!(section.contains("commit abc"), "{section}");
        assert!(
            section.contains("**2 of 7 within 15%** (missed)"),
            "{section}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn provenance_names_commit_machine_date_and_load() {
        let run = serde_json::json!({"meta": {"commit": "abc", "uncommitted_changes": true,
            "machine": "M", "date": "D", "load_average_at_end": 1.5}});
        assert_eq!(
            provenance(&run),
            "commit abc (with uncommitted changes), M, D, load average 1.50 at the end"
        );
    }
}
