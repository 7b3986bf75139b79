//! `cargo xtask bench --checkpoints`: what saving a checkpoint after every step costs a run, with
//! the saves written in the background (`--checkpoint-async`) and in the step (synchronous),
//! against the same run without saves; the run file `docs/runs/cpu-checkpoints.json` and its
//! section of docs/benchmarks.md.
//!
//! The model is the 3.3M-parameter Llama of the "Llama train step, 1 device" rows (AdamW: the
//! parameters and two moments, 40 MB a save). The three runs alternate over [`ROUNDS`]; a run's
//! figure is the median of its steps' whole iterations (`iteration_ms` of `tessera train
//! --json`: the step, then the save) over steps 2 to [`STEPS`].

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, bail};

use crate::cmd::{self, step};
use crate::llama::MODELS;

/// The heading of the section in docs/benchmarks.md.
pub const HEADING: &str = "## Checkpoints every step (Tessera only)";
/// Rounds of the three runs.
pub const ROUNDS: usize = 3;
/// Steps of each run (a save after each).
pub const STEPS: u32 = 12;
/// The background saves' median iteration over the run without saves must stay within this.
pub const TARGET: f64 = 1.1;

/// How a run saves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Saving {
    None,
    Background,
    InTheStep,
}

impl Saving {
    fn label(self) -> &'static str {
        match self {
            Saving::None => "no saves",
            Saving::Background => "a save every step, `--checkpoint-async`",
            Saving::InTheStep => "a save every step, synchronous",
        }
    }

    fn args(self, dir: &Path) -> Vec<String> {
        let dir = dir.display().to_string();
        let save = ["--checkpoint-dir", &dir, "--checkpoint-every", "1"].map(String::from);
        match self {
            Saving::None => Vec::new(),
            Saving::Background => {
                let mut args = save.to_vec();
                args.push("--checkpoint-async".into());
                args
            }
            Saving::InTheStep => save.to_vec(),
        }
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One run's median iteration in milliseconds (steps 2 on).
fn run_once(root: &Path, saving: Saving, dir: &Path) -> anyhow::Result<f64> {
    let _ = std::fs::remove_dir_all(dir);
    let mut args = MODELS[1].tessera_args(STEPS);
    args.extend(saving.args(dir));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let summary = cmd::tessera_json(root, &refs, "tessera train")?;
    let iterations: Vec<f64> = summary["iteration_ms"]
        .as_array()
        .context("the summary has no iteration_ms")?
        .iter()
        .filter_map(serde_json::Value::as_f64)
        .skip(1)
        .collect();
    if iterations.is_empty() {
        bail!("the run reported no iterations");
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(median(iterations))
}

/// Runs the benchmark and writes its section into docs/benchmarks.md.
pub fn run(root: &Path) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("tessera-bench-ckpt-{}", std::process::id()));
    let runs = [Saving::None, Saving::Background, Saving::InTheStep];
    let mut medians: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    for round in 1..=ROUNDS {
        for (k, saving) in runs.iter().enumerate() {
            step(&format!(
                "bench: checkpoints: round {round}/{ROUNDS}: {}",
                saving.label()
            ));
            medians[k].push(run_once(root, *saving, &dir)?);
        }
    }
    let labels = runs.map(Saving::label);
    let rows: Vec<serde_json::Value> = labels
        .iter()
        .zip(&medians)
        .map(|(label, rounds_ms)| serde_json::json!({"run": label, "rounds_ms": rounds_ms}))
        .collect();
    crate::runs::write(root, "cpu-checkpoints", serde_json::json!({ "rows": rows }))?;
    crate::runs::regenerate(root)
}

/// The section, from its run file.
pub fn render_run(md: &mut String, run: &serde_json::Value) -> anyhow::Result<()> {
    let rows = run["data"]["rows"]
        .as_array()
        .filter(|r| r.len() == 3)
        .context("cpu-checkpoints.json has no three rows")?;
    let labels: Vec<&str> = rows
        .iter()
        .map(|r| r["run"].as_str().unwrap_or("?"))
        .collect();
    let medians: Vec<Vec<f64>> = rows
        .iter()
        .map(|r| {
            r["rounds_ms"]
                .as_array()
                .map(|v| v.iter().filter_map(serde_json::Value::as_f64).collect())
                .unwrap_or_default()
        })
        .collect();
    md.push_str(&render(&labels, &medians, &crate::runs::provenance(run)));
    md.push('\n');
    Ok(())
}

fn render(labels: &[&str], medians: &[Vec<f64>], provenance: &str) -> String {
    let mut md = String::new();
    let model = MODELS[1];
    let _ = writeln!(md, "{HEADING}\n");
    let _ = writeln!(
        md,
        "`cargo xtask bench --checkpoints`: `tessera train` (release build) of the {} \
         (AdamW, 40 MB of parameters and moments a save) for {STEPS} steps, without saves, \
         then saving after every step in the background and in the step, the three runs \
         alternating over {ROUNDS} rounds. A run's figure is its median iteration (the step, \
         then its save: `iteration_ms` of `--json`) over steps 2 to {STEPS}; a cell gives the \
         median of the rounds' figures and their range. Measured at {}.\n",
        model
            .label()
            .replace("Llama train step, 1 device: ", "Llama: "),
        provenance
    );
    let _ = writeln!(
        md,
        "| Run | iteration | range | / no saves | Target | Check |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---|---|");
    let base = median(medians[0].clone());
    for (k, (label, rounds)) in labels.iter().zip(medians).enumerate() {
        let m = median(rounds.clone());
        let lo = rounds.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = rounds.iter().copied().fold(0.0, f64::max);
        let ratio = m / base;
        let (target, check) = match k {
            1 if ratio <= TARGET => (format!("≤ {TARGET}×"), format!("met ({ratio:.2}×)")),
            1 => (format!("≤ {TARGET}×"), format!("missed ({ratio:.2}×)")),
            _ => ("—".to_owned(), "for comparison".to_owned()),
        };
        let _ = writeln!(
            md,
            "| {label} | {m:.1} ms | {lo:.1}–{hi:.1} ms | {ratio:.2}× | {target} | {check} |"
        );
    }
    let _ = writeln!(
        md,
        "\nBoth save modes do the same work: every shard's copy from the devices to the host is \
         started in the step and waited for together; then each file is written from those \
         bytes, checksummed on the way (CRC-32 of the file and of each block), with direct I/O \
         (`O_DIRECT`: the kernel does not copy it into the page cache, which on this machine \
         took most of a save's processor time) and synced. In the background \
         (`--checkpoint-async`) the writing runs on a thread in Linux's `SCHED_IDLE` class while \
         the next steps run, so it costs the step little processor time; in the step, the step \
         waits for the disk. The `tessera` program's allocator (jemalloc, keeping freed pages) \
         also spares the step the page faults of its fresh host copies."
    );
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_background_row_is_checked_against_the_target() {
        let md = render(
            &["none", "bg", "sync"],
            &[vec![100.0], vec![105.0], vec![180.0]],
            "here",
        );
        assert!(
            md.contains("| bg | 105.0 ms") && md.contains("met (1.05×)"),
            "{md}"
        );
        let md = render(
            &["none", "bg", "sync"],
            &[vec![100.0], vec![120.0], vec![180.0]],
            "here",
        );
        assert!(md.contains("missed (1.20×)"), "{md}");
    }
}
