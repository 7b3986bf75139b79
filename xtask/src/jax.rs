//! `cargo xtask bench --compare-jax`: JAX and Tessera on the same machine, written as run files
//! under `docs/runs/` ([`crate::runs`]) from which `docs/benchmarks.md` is generated.
//!
//! This module measures the data-parallel `jit` step (a 3-layer MLP on 8 CPU devices: step time,
//! trace + lower, XLA's compile, dispatch) and Tessera's pipelined steps against the simulator;
//! [`crate::llama`] the Llama rows, [`crate::synthetic`] the runtime without XLA. Fairness, as
//! the page states it: both sides start from the same parameters and batch and compute the same
//! loss (the label's log-probability by a one-hot product), and their first losses must agree
//! ([`CHECK_TOLERANCE`]); JAX runs on glibc's `malloc` as installed and on the jemalloc
//! Tessera links ([`crate::alloc`]); the sides alternate in each round (JAX first in odd
//! rounds, Tessera first in even ones); every round's ratio is kept and a spread across 1.0 is a
//! tie ([`crate::ratio`]). JAX's trace + lower is timed on a new Python function each sample,
//! without clearing JAX's own caches (a user jitting a new function does not pay for them).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use crate::alloc::{self, Allocator};
use crate::cmd::{self, step};
use crate::known_plugins::DEFAULT_CPU_PLUGIN;
use crate::ratio::{self, Bound};
use crate::runs;

/// The JAX release Tessera is compared with: the one whose XLA is nearest to the default CPU
/// plugin's among those that run on this Python (`known_plugins.rs` records, per plugin, the
/// jaxlib and its own PJRT C API version, as jaxlib logs them when it loads the plugin). Near
/// versions mean XLA of the same weeks, so the comparison measures Tessera rather than two XLA
/// versions.
pub const JAX_VERSION: &str = DEFAULT_CPU_PLUGIN.compare_jax;
/// The jaxlib matching [`JAX_VERSION`] (see there for why).
pub const JAXLIB_VERSION: &str = DEFAULT_CPU_PLUGIN.compare_jax;
/// The optax whose `adamw` JAX's Llama step uses.
pub const OPTAX_VERSION: &str = "0.2.8";
/// The virtual environment, under the git-ignored `target/`.
pub const VENV_DIR: &str = "target/jax-venv";
/// JAX's benchmark script.
const SCRIPT: &str = "benches/jax/bench_jax.py";
/// The model both sides run, as the page states it.
const MODEL: &str = "3-layer MLP 256→512→512→10, batch 256, float32, softmax cross-entropy \
                     (the label's log-probability by a one-hot product on both sides), plain SGD \
                     step returning new params and loss; mesh `data=8` (batch sharded, params \
                     replicated); both sides start from the same parameters and batch";
/// Rounds of the alternating runs.
pub const ROUNDS: usize = 3;
/// The largest relative difference between the two sides' first three losses.
pub const CHECK_TOLERANCE: f64 = 1e-4;
/// Tessera's pipelined step must be within this factor of the simulator's prediction.
pub const PIPELINE_TOLERANCE: f64 = 1.10;

/// The metrics of the table, in its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// One data-parallel training step of the jitted function.
    JitStep,
    /// Tracing and lowering the step to StableHLO, without XLA's compile.
    TraceLower,
    /// XLA's compile of that lowering.
    Compile,
    /// Per-call overhead of a tiny jitted function.
    Dispatch,
}

impl Metric {
    /// Every metric, in the table's order.
    pub const ALL: [Metric; 4] = [
        Metric::JitStep,
        Metric::TraceLower,
        Metric::Compile,
        Metric::Dispatch,
    ];

    /// The key in both sides' JSON.
    pub fn key(self) -> &'static str {
        match self {
            Metric::JitStep => "jit_step",
            Metric::TraceLower => "trace_lower",
            Metric::Compile => "compile",
            Metric::Dispatch => "dispatch",
        }
    }

    /// The row's label.
    pub fn label(self) -> &'static str {
        match self {
            Metric::JitStep => "jit step time (data parallel, 8 devices)",
            Metric::TraceLower => "trace + lower (no XLA compile)",
            Metric::Compile => "compile (XLA)",
            Metric::Dispatch => "dispatch overhead per call (x + 1, 4 floats)",
        }
    }

    /// The target for Tessera / JAX, if one is set.
    pub fn target(self) -> Option<f64> {
        match self {
            Metric::JitStep | Metric::Dispatch => Some(1.0),
            Metric::TraceLower => Some(0.1),
            Metric::Compile => None,
        }
    }
}

/// One side of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// JAX on an allocator.
    Jax(Allocator),
    /// Tessera.
    Tessera,
}

impl Side {
    /// The key of this side's figures in a round.
    pub fn key(self) -> &'static str {
        match self {
            Side::Jax(a) => a.key(),
            Side::Tessera => "tessera",
        }
    }
}

/// The order of round `round` (from 1): JAX first in odd rounds, Tessera first in even ones.
pub fn order(round: usize) -> [Side; 3] {
    let forward = [
        Side::Jax(Allocator::Glibc),
        Side::Jax(Allocator::Jemalloc),
        Side::Tessera,
    ];
    if round % 2 == 1 {
        forward
    } else {
        let [a, b, c] = forward;
        [c, b, a]
    }
}

/// "JAX first" or "Tessera first", for the page.
fn order_label(round: &Value) -> &'static str {
    match round["order"][0].as_str() {
        Some("tessera") => "Tessera first",
        _ => "JAX first",
    }
}

/// `cargo xtask bench --compare-jax`: every section it measures, then the page.
pub fn compare() -> anyhow::Result<()> {
    let root = cmd::workspace_root();
    let (python, preload) = prepare(&root)?;
    runs::write(
        &root,
        "cpu-jit-step",
        measure_jit(&root, &python, &preload)?,
    )?;
    runs::write(
        &root,
        "cpu-llama",
        crate::llama::measure(&root, &python, &preload)?,
    )?;
    runs::write(&root, "cpu-pipelined", measure_pipelined(&root)?)?;
    runs::write(&root, "cpu-synthetic", crate::synthetic::measure(&root)?)?;
    runs::regenerate(&root)
}

/// `cargo xtask bench --compare-jax --llama-only`: the Llama rows alone, then the page.
pub fn compare_llama_only() -> anyhow::Result<()> {
    let root = cmd::workspace_root();
    let (python, preload) = prepare(&root)?;
    runs::write(
        &root,
        "cpu-llama",
        crate::llama::measure(&root, &python, &preload)?,
    )?;
    runs::regenerate(&root)
}

/// JAX's venv, the release build, and the jemalloc JAX preloads (checked to be mapped).
fn prepare(root: &Path) -> anyhow::Result<(std::path::PathBuf, std::path::PathBuf)> {
    let python = crate::venv::ensure_venv(root)?;
    crate::venv::ensure_jax(&python)?;
    step("bench: building the release binaries");
    cmd::build_release_tessera()?;
    cmd::cargo(&[
        "build",
        "--release",
        "--package",
        "tessera-benches",
        "--bins",
    ])?;
    let preload = alloc::jemalloc_preload(root)?;
    alloc::check_preload(&python, &preload)?;
    Ok((python, preload))
}

/// [`ROUNDS`] rounds of the three sides in [`order`]; each round's first losses checked.
fn measure_jit(root: &Path, python: &Path, preload: &Path) -> anyhow::Result<Value> {
    let mut rounds = Vec::new();
    let mut versions = Value::Null;
    for round in 1..=ROUNDS {
        let sides = order(round);
        let mut entry = serde_json::json!({
            "round": round,
            "order": sides.map(Side::key),
        });
        for side in sides {
            step(&format!(
                "bench: jit step, round {round}/{ROUNDS}: {}",
                side.key()
            ));
            let figures = match side {
                Side::Jax(allocator) => {
                    let out = run_jax(root, python, allocator, preload)?;
                    versions = out["versions"].clone();
                    out
                }
                Side::Tessera => run_tessera(root)?,
            };
            entry[side.key()] = figures;
        }
        check_first_losses(&entry)?;
        rounds.push(entry);
    }
    Ok(serde_json::json!({
        "model": MODEL,
        "jax_versions": versions,
        "check_tolerance": CHECK_TOLERANCE,
        "rounds": rounds,
    }))
}

/// The three sides' first losses (same parameters, same batch) agree within
/// [`CHECK_TOLERANCE`], else the comparison is refused.
fn check_first_losses(round: &Value) -> anyhow::Result<()> {
    let losses = |key: &str| -> anyhow::Result<Vec<f64>> {
        round[key]["first_losses"]
            .as_array()
            .map(|l| l.iter().filter_map(Value::as_f64).collect::<Vec<_>>())
            .filter(|l| l.len() == 3)
            .ok_or_else(|| anyhow!("{key} reported no three first_losses"))
    };
    let tessera = losses("tessera")?;
    for allocator in [Allocator::Glibc, Allocator::Jemalloc] {
        let jax = losses(allocator.key())?;
        let worst = relative_difference(&tessera, &jax);
        if worst.is_nan() || worst > CHECK_TOLERANCE {
            bail!(
                "the jit step's first losses differ: Tessera {tessera:?}, {} {jax:?} (relative \
                 {worst:.1e} > {CHECK_TOLERANCE:.0e}): {SCRIPT} and tessera-bench-jit do not \
                 compute the same step",
                allocator.label()
            );
        }
    }
    Ok(())
}

/// The largest relative difference of two equally long lists (NaN if either has a NaN).
pub fn relative_difference(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / x.abs().max(f64::MIN_POSITIVE))
        .fold(0.0, |worst, d| {
            if d.is_nan() || worst.is_nan() {
                f64::NAN
            } else {
                worst.max(d)
            }
        })
}

/// Runs `bench_jax.py` on `allocator` and returns its JSON.
fn run_jax(
    root: &Path,
    python: &Path,
    allocator: Allocator,
    preload: &Path,
) -> anyhow::Result<Value> {
    let env = allocator.env(preload);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let text = cmd::python_stdout(python, root, SCRIPT, &[], &env)?;
    let out: Value = serde_json::from_str(text.trim())
        .with_context(|| format!("{SCRIPT} did not print one JSON object"))?;
    if out["device_count"].as_u64() != Some(8) {
        bail!("JAX saw {} devices, not 8", out["device_count"]);
    }
    Ok(out)
}

/// Runs `tessera-bench-jit` (release) and returns its JSON.
fn run_tessera(root: &Path) -> anyhow::Result<Value> {
    let mut command = cmd::cargo_command(&[
        "run",
        "--release",
        "--quiet",
        "--package",
        "tessera-benches",
        "--bin",
        "tessera-bench-jit",
    ]);
    command
        .current_dir(root)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    let out = command
        .output()
        .with_context(|| format!("could not start {command:?}"))?;
    if !out.status.success() {
        bail!("{command:?} failed ({})", out.status);
    }
    serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim())
        .context("tessera-bench-jit did not print one JSON object")
}

/// The schedules whose pipelined step is set against the simulator: (name, stages, groups).
const PIPELINED: &[(&str, &str, &str)] = &[
    ("gpipe", "4", "4"),
    ("1f1b", "4", "4"),
    ("eager-1f1b", "4", "4"),
    ("zero-bubble", "4", "4"),
    ("interleaved-1f1b", "4", "2"),
    ("dualpipev", "4", "2"),
];

/// Trains the byte-level GPT for 5 steps under each schedule (release build) and keeps the
/// measured makespan and the simulator's prediction from the measured task times.
fn measure_pipelined(root: &Path) -> anyhow::Result<Value> {
    let mut rows = Vec::new();
    for &(schedule, stages, groups) in PIPELINED {
        step(&format!(
            "bench: pipelined GPT step under {schedule} ({stages} stages on {groups} groups)"
        ));
        let args = [
            "train",
            "--model",
            "gpt",
            "--schedule",
            schedule,
            "--stages",
            stages,
            "--mpmd-dim",
            groups,
            "--microbatches",
            "8",
            "--devices",
            "8",
            "--steps",
            "5",
            "--json",
        ];
        let summary = cmd::tessera_json(root, &args, &format!("tessera train under {schedule}"))?;
        let ms = |key: &str| {
            summary
                .get(key)
                .and_then(Value::as_f64)
                .ok_or_else(|| anyhow!("{key} missing from the {schedule} summary"))
        };
        rows.push(serde_json::json!({
            "schedule": schedule,
            "stages": stages,
            "groups": groups,
            "makespan_ms": ms("makespan_ms")?,
            "predicted_makespan_ms": ms("predicted_makespan_ms")?,
        }));
    }
    Ok(serde_json::json!({ "rows": rows }))
}

/// A side's median for `metric` in one round.
fn round_median(round: &Value, side: &str, metric: Metric) -> anyhow::Result<f64> {
    let side_figures = &round[side];
    side_figures["metrics"][metric.key()]["median_s"]
        .as_f64()
        .or_else(|| side_figures[metric.key()]["median_s"].as_f64())
        .ok_or_else(|| anyhow!("round {} has no {side}.{}", round["round"], metric.key()))
}

/// The jit-step section, from its run file.
pub fn render_jit_run(md: &mut String, run: &Value) -> anyhow::Result<()> {
    let data = &run["data"];
    let rounds = data["rounds"]
        .as_array()
        .filter(|r| !r.is_empty())
        .ok_or_else(|| anyhow!("cpu-jit-step.json has no rounds"))?;
    let versions = &data["jax_versions"];
    let text = |v: &Value| v.as_str().unwrap_or("?").to_owned();
    let _ = writeln!(
        md,
        "## Data-parallel `jit` step against JAX (8 CPU devices)"
    );
    let _ = writeln!(md);
    let _ = writeln!(md, "Measured at {}.", runs::provenance(run));
    let _ = writeln!(md);
    let _ = writeln!(md, "| | |");
    let _ = writeln!(md, "|---|---|");
    let _ = writeln!(
        md,
        "| JAX | jax {}, jaxlib {} (CPU, Python {}), 8 devices via \
         `--xla_force_host_platform_device_count` |",
        text(&versions["jax"]),
        text(&versions["jaxlib"]),
        text(&versions["python"])
    );
    let _ = writeln!(
        md,
        "| Tessera's PJRT plugin | {}, 8 virtual CPU devices |",
        text(&run["meta"]["plugin"])
    );
    let _ = writeln!(md, "| XLA | not the same build: {} |", version_match());
    let _ = writeln!(md, "| Model | {} |", text(&data["model"]));
    let _ = writeln!(
        md,
        "| Allocators | Tessera: jemalloc (`oversize_threshold:0`); JAX: the same jemalloc \
         preloaded, and glibc's `malloc` as installed |"
    );
    let orders: Vec<String> = rounds
        .iter()
        .map(|r| format!("{}: {}", r["round"], order_label(r)))
        .collect();
    let _ = writeln!(md, "| Rounds | {} ({}) |", rounds.len(), orders.join(", "));
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| Metric | JAX (jemalloc) | Tessera | Tessera / JAX, each round | Tessera / JAX | \
         Target | Check | JAX (glibc malloc) | Tessera / JAX (glibc) |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
    for metric in Metric::ALL {
        let column = |side: &str| -> anyhow::Result<Vec<f64>> {
            rounds
                .iter()
                .map(|r| round_median(r, side, metric))
                .collect()
        };
        let (jax, glibc, tessera) = (
            column(Allocator::Jemalloc.key())?,
            column(Allocator::Glibc.key())?,
            column("tessera")?,
        );
        let ratios: Vec<f64> = tessera.iter().zip(&jax).map(|(t, j)| t / j).collect();
        let glibc_ratios: Vec<f64> = tessera.iter().zip(&glibc).map(|(t, j)| t / j).collect();
        let (target, check) = match metric.target() {
            Some(t) => (
                ratio::target_cell(Bound::AtMost, t),
                ratio::check(&ratios, Bound::AtMost, t),
            ),
            None => ("—".to_owned(), "no target".to_owned()),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {target} | {check} | {} | {} |",
            metric.label(),
            seconds(ratio::median(&jax)),
            seconds(ratio::median(&tessera)),
            ratio::each(&ratios),
            ratio::verdict(&ratios),
            seconds(ratio::median(&glibc)),
            ratio::verdict(&glibc_ratios),
        );
    }
    let _ = writeln!(md);
    let tessera = losses_of(&rounds[0], "tessera");
    let jax = losses_of(&rounds[0], Allocator::Jemalloc.key());
    let worst = rounds
        .iter()
        .flat_map(|r| {
            let t = losses_of(r, "tessera");
            [Allocator::Glibc, Allocator::Jemalloc]
                .map(|a| relative_difference(&t, &losses_of(r, a.key())))
        })
        .fold(0.0, f64::max);
    let _ = writeln!(
        md,
        "The same computation: the first three losses from the same start, Tessera {} against \
         JAX {} in round 1; the largest relative difference over every round and allocator \
         {worst:.1e} (at most {:.0e}, checked by the harness before a round counts).",
        join_losses(&tessera),
        join_losses(&jax),
        data["check_tolerance"].as_f64().unwrap_or(CHECK_TOLERANCE)
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "Method: the step is timed from the call with the parameters and batch on the devices \
         until its results are ready, 200 steps after 10 (JAX) or 20 (Tessera) warm-up steps; \
         trace + lower and compile time a new function each sample (Tessera: 10 after 2, JAX: \
         10 after 1), JAX's compile through `lowered.compile()`, Tessera's uncached \
         `Client::compile`; dispatch is 200 (Tessera) or 500 (JAX) calls of `x + 1` waited for \
         one by one. A round's figure is each side's median; a cell gives the median over the \
         rounds, and a ratio whose rounds lie on both sides of 1.0 is a tie."
    );
    let _ = writeln!(md);
    Ok(())
}

fn losses_of(round: &Value, key: &str) -> Vec<f64> {
    round[key]["first_losses"]
        .as_array()
        .map(|l| l.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

fn join_losses(losses: &[f64]) -> String {
    let cells: Vec<String> = losses.iter().map(|l| format!("{l:.6}")).collect();
    cells.join(", ")
}

/// The pipelined-step section, from its run file.
pub fn render_pipelined_run(md: &mut String, run: &Value) -> anyhow::Result<()> {
    let rows = run["data"]["rows"]
        .as_array()
        .ok_or_else(|| anyhow!("cpu-pipelined.json has no rows"))?;
    let _ = writeln!(md, "## Pipelined step against the simulator (Tessera only)");
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "`tessera train --model gpt --schedule NAME --stages 4 --microbatches 8 --devices 8 \
         --steps 5` (release build; 4 groups, 2 for the interleaved schedules): the byte-level \
         GPT's measured step against the simulator's prediction from the same step's measured \
         task times (F, B, W per stage) and mean transfer time; medians over steps 2 to 5. A \
         task's time runs from its dispatch until its outputs are computed. JAX has no \
         counterpart. Measured at {}.",
        runs::provenance(run)
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| Schedule | Stages on groups | Tessera | Simulator prediction | Measured / predicted \
         | Target | Check |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    let low = 2.0 - PIPELINE_TOLERANCE;
    for row in rows {
        let number = |key: &str| {
            row[key]
                .as_f64()
                .ok_or_else(|| anyhow!("a pipelined row has no {key}"))
        };
        let (measured, predicted) = (number("makespan_ms")?, number("predicted_makespan_ms")?);
        let ratio = measured / predicted;
        let _ = writeln!(
            md,
            "| {} | {} on {} | {} | {} | {ratio:.2}× | {low:.2}×–{PIPELINE_TOLERANCE:.2}× | {} |",
            row["schedule"].as_str().unwrap_or("?"),
            row["stages"].as_str().unwrap_or("?"),
            row["groups"].as_str().unwrap_or("?"),
            seconds(measured / 1e3),
            seconds(predicted / 1e3),
            check_within(ratio, low, PIPELINE_TOLERANCE),
        );
    }
    let _ = writeln!(md);
    Ok(())
}

/// A two-sided check: met when the measurement is within the band around the prediction.
fn check_within(ratio: f64, low: f64, high: f64) -> String {
    if (low..=high).contains(&ratio) {
        format!("met ({low:.2}× ≤ {ratio:.2}× ≤ {high:.2}×)")
    } else if ratio < low {
        format!("missed ({ratio:.2}× < {low:.2}×: faster than the model predicts)")
    } else {
        format!("missed ({ratio:.2}× > {high:.2}×)")
    }
}

/// "fastatomstruct-xla-cpu 2026.6.23 (`zml-cpu`, PJRT C API 0.106)": the default CPU plugin.
pub fn plugin_version() -> String {
    let plugin = DEFAULT_CPU_PLUGIN;
    format!(
        "{} {} (`{}`, PJRT C API {}.{})",
        plugin.package, plugin.version, plugin.name, plugin.api.0, plugin.api.1
    )
}

/// Why this jaxlib: its PJRT C API version beside the plugin's.
fn version_match() -> String {
    let plugin = DEFAULT_CPU_PLUGIN;
    let (jax_major, jax_minor) = plugin.compare_jax_api;
    let (major, minor) = plugin.api;
    format!(
        "jaxlib {} (PJRT C API {jax_major}.{jax_minor}) against the plugin's {major}.{minor}: the \
         nearest XLA among the jaxlib releases that run on this Python",
        plugin.compare_jax
    )
}

/// A duration in s, ms, µs or ns, three significant digits or so.
fn seconds(s: f64) -> String {
    let (value, unit) = if s >= 1.0 {
        (s, "s")
    } else if s >= 1e-3 {
        (s * 1e3, "ms")
    } else if s >= 1e-6 {
        (s * 1e6, "µs")
    } else {
        (s * 1e9, "ns")
    };
    if value >= 100.0 {
        format!("{value:.0} {unit}")
    } else if value >= 10.0 {
        format!("{value:.1} {unit}")
    } else {
        format!("{value:.2} {unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A side's figures as both programs print them (JAX nests them under `metrics`).
    fn side(step_s: f64, nested: bool, losses: [f64; 3]) -> Value {
        let metrics = serde_json::json!({
            "jit_step": {"median_s": step_s}, "trace_lower": {"median_s": 0.05},
            "compile": {"median_s": 0.2}, "dispatch": {"median_s": 4e-6},
        });
        let mut out = if nested {
            serde_json::json!({ "metrics": metrics })
        } else {
            metrics
        };
        out["first_losses"] = serde_json::json!(losses);
        out
    }

    fn fake_run(tessera_steps: [f64; 3]) -> Value {
        let losses = [2.3, 2.2, 2.1];
        let rounds: Vec<Value> = (1..=3)
            .map(|r| {
                serde_json::json!({
                    "round": r,
                    "order": order(r).map(Side::key),
                    "jax_glibc": side(0.012, true, losses),
                    "jax_jemalloc": side(0.010, true, losses),
                    "tessera": side(tessera_steps[r - 1], false, losses),
                })
            })
            .collect();
        serde_json::json!({
            "benchmark": "cpu-jit-step",
            "meta": {"commit": "abc", "machine": "M", "date": "D", "plugin": "P"},
            "data": {"model": "m", "jax_versions": {"jax": "0.10.1", "jaxlib": "0.10.1",
                     "python": "3.11"}, "check_tolerance": 1e-4, "rounds": rounds},
        })
    }

    fn row<'a>(md: &'a str, label: &str) -> &'a str {
        md.lines()
            .find(|line| line.starts_with(&format!("| {label} |")))
            .unwrap_or_else(|| panic!("no row {label:?} in:\n{md}"))
    }

    #[test]
    fn rounds_alternate_which_side_goes_first() {
        assert_eq!(order(1)[0], Side::Jax(Allocator::Glibc));
        assert_eq!(order(2)[0], Side::Tessera);
        assert_eq!(order(3), order(1));
    }

    #[test]
    fn a_spread_across_one_is_rendered_as_a_tie_with_every_round() {
        let mut md = String::new();
        render_jit_run(&mut md, &fake_run([0.0095, 0.0105, 0.0099])).unwrap();
        let line = row(&md, Metric::JitStep.label());
        assert!(line.contains("0.95×, 1.05×, 0.99×"), "{line}");
        assert!(line.contains("tie (0.95×–1.05×)"), "{line}");
        assert!(line.contains("not settled: 2 of 3 rounds met"), "{line}");
        // Against JAX on glibc the same Tessera is faster in every round.
        assert!(line.contains("0.83× (0.79×–0.88×)"), "{line}");
        assert!(
            md.contains("1: JAX first, 2: Tessera first, 3: JAX first"),
            "{md}"
        );

        let mut md = String::new();
        render_jit_run(&mut md, &fake_run([0.008, 0.0085, 0.009])).unwrap();
        let line = row(&md, Metric::JitStep.label());
        assert!(line.contains("| 0.85× (0.80×–0.90×) |"), "{line}");
        assert!(line.contains("met in every round"), "{line}");
    }

    #[test]
    fn different_first_losses_refuse_the_round() {
        let mut round = fake_run([0.01; 3])["data"]["rounds"][0].clone();
        assert!(check_first_losses(&round).is_ok());
        round["tessera"]["first_losses"] = serde_json::json!([2.3, 2.2, 2.0]);
        let err = check_first_losses(&round).unwrap_err().to_string();
        assert!(err.contains("do not compute the same step"), "{err}");
        round["tessera"]["first_losses"] = serde_json::json!([2.3, f64::NAN, 2.1]);
        assert!(check_first_losses(&round).is_err());
    }

    #[test]
    fn the_pipelined_check_is_two_sided() {
        assert_eq!(check_within(1.0, 0.9, 1.1), "met (0.90× ≤ 1.00× ≤ 1.10×)");
        assert!(check_within(0.85, 0.9, 1.1).starts_with("missed (0.85× < 0.90×"));
        assert!(check_within(1.2, 0.9, 1.1).starts_with("missed (1.20× > 1.10×"));
    }

    #[test]
    fn seconds_are_readable() {
        assert_eq!(seconds(1.5), "1.50 s");
        assert_eq!(seconds(0.0123), "12.3 ms");
        assert_eq!(seconds(0.000_003_77), "3.77 µs");
        assert_eq!(seconds(0.449), "449 ms");
    }
}
