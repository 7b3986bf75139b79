//! `cargo xtask bench --data-parallel`: pipelined GPT and Llama steps whose stages are
//! data-parallel (`--mesh stage=2,data=4`) or data- and tensor-parallel
//! (`stage=2,data=2,model=2`), with and without FSDP, at 8 and 16 micro-batches, reducing the
//! gradients once per step (the default) against once per micro-batch, alternating over
//! [`ROUNDS`]; and the demo's Llama, whose exposed transfer wait is measured against its step.
//! The run file `docs/runs/cpu-data-parallel.json` and its section of docs/benchmarks.md.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, anyhow};
use serde_json::Value;

use crate::cmd::{self, step};
use crate::ratio::{self, Bound};
use crate::runs;

/// Rounds of each pair.
pub const ROUNDS: usize = 3;
/// Steps of each run (the first compiles).
const STEPS: &str = "8";
/// The reductions compared, the default first.
const REDUCTIONS: [&str; 2] = ["per-step", "per-microbatch"];
/// Per step, the step must be at least as fast as per micro-batch.
const SPEEDUP_TARGET: f64 = 1.0;
/// The demo's exposed transfer wait, at most this share of its step (on its busiest group).
const WAIT_TARGET: f64 = 0.05;

/// The configurations: model, mesh, FSDP, micro-batches.
fn configurations() -> Vec<(&'static str, &'static str, bool, &'static str)> {
    let mut all = Vec::new();
    for model in ["gpt", "llama"] {
        for mesh in ["stage=2,data=4", "stage=2,data=2,model=2"] {
            for fsdp in [false, true] {
                for microbatches in ["8", "16"] {
                    all.push((model, mesh, fsdp, microbatches));
                }
            }
        }
    }
    all
}

fn args(model: &str, mesh: &str, fsdp: bool, microbatches: &str, reduce: &str) -> Vec<String> {
    let mut args: Vec<String> = [
        "train",
        "--model",
        model,
        "--layers",
        "4",
        "--d-model",
        "128",
        "--heads",
        "4",
        "--seq-len",
        "64",
        "--batch",
        "64",
        "--mesh",
        mesh,
        "--stages",
        "2",
        "--microbatches",
        microbatches,
        "--optimizer",
        "adamw",
        "--steps",
        STEPS,
        "--no-reference",
        "--eval-every",
        "0",
        "--json",
        "--grad-reduce",
        reduce,
    ]
    .map(String::from)
    .to_vec();
    if fsdp {
        args.push("--fsdp".into());
    }
    args
}

/// The demo's training run (`cargo xtask demo`'s, [`crate::demo::TRAIN`]) for [`STEPS`] steps
/// without the reference, for its transfer wait.
fn demo_args() -> Vec<String> {
    let mut args = Vec::new();
    let mut from = crate::demo::TRAIN.iter();
    while let Some(&a) = from.next() {
        match a {
            "--steps" | "--eval-every" => {
                from.next();
            }
            a => args.push(a.to_owned()),
        }
    }
    let own = [
        "--steps",
        STEPS,
        "--eval-every",
        "0",
        "--no-reference",
        "--json",
    ];
    args.extend(own.map(str::to_owned));
    args
}

/// What one run keeps: the step, the bytes, the collectives.
fn figures(s: &Value) -> Value {
    serde_json::json!({
        "step_wall_ms": s["step_wall_ms"],
        "iteration_ms": s["iteration_ms"],
        "parameter_bytes_per_device": s["parameter_bytes_per_device"],
        "peak_live_bytes": s["memory"]["groups"].as_array().map(|g| {
            g.iter().map(|g| g["peak_live_bytes"].clone()).collect::<Vec<_>>()
        }),
        "collectives_per_step": s["collectives_per_step"],
        "transfer_wait_ms": s["transfer_wait_ms"],
        "losses": s["losses"],
    })
}

/// Runs the comparison, writes its run file, then the page.
pub fn run(root: &Path) -> anyhow::Result<()> {
    cmd::build_release_tessera()?;
    let mut rows = Vec::new();
    for (model, mesh, fsdp, microbatches) in configurations() {
        let fsdp_text = if fsdp { " --fsdp" } else { "" };
        let rounds = ratio::alternating_rounds(ROUNDS, &REDUCTIONS, |reduce, round| {
            step(&format!(
                "bench: data parallel, {model} {mesh}{fsdp_text} {microbatches} micro-batches, \
                 round {round}/{ROUNDS}: {reduce}"
            ));
            let args = args(model, mesh, fsdp, microbatches, reduce);
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            Ok(figures(&cmd::tessera_json(root, &refs, "tessera train")?))
        })?;
        rows.push(serde_json::json!({
            "model": model, "mesh": mesh, "fsdp": fsdp, "microbatches": microbatches,
            "rounds": rounds,
        }));
    }
    let mut demo = Vec::new();
    for round in 1..=ROUNDS {
        step(&format!(
            "bench: data parallel, the demo's transfer wait, round {round}/{ROUNDS}"
        ));
        let args = demo_args();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        demo.push(figures(&cmd::tessera_json(root, &refs, "tessera train")?));
    }
    let command = format!(
        "tessera {}",
        args("MODEL", "MESH", false, "MICROBATCHES", "WHEN").join(" ")
    );
    runs::write(
        root,
        "cpu-data-parallel",
        serde_json::json!({
            "command": command, "demo_command": format!("tessera {}", demo_args().join(" ")),
            "rows": rows, "demo": demo,
        }),
    )?;
    runs::regenerate(root)
}

/// The median step of each round of `reduce` (the median of its iterations after the first).
fn steps_ms(rounds: &[Value], reduce: &str) -> anyhow::Result<Vec<f64>> {
    rounds
        .iter()
        .map(|r| {
            let all: Vec<f64> = r[reduce]["iteration_ms"]
                .as_array()
                .map(|a| a.iter().skip(1).filter_map(Value::as_f64).collect())
                .unwrap_or_default();
            match all.is_empty() {
                true => Err(anyhow!("a round has no {reduce} iterations")),
                false => Ok(ratio::median(&all)),
            }
        })
        .collect()
}

/// The largest of a list of numbers in a run's figures.
fn largest(v: &Value) -> f64 {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).fold(0.0, f64::max))
        .unwrap_or(f64::NAN)
}

/// The all-reduces, all-gathers and reduce-scatters of a step on its busiest group, as
/// `r / g / s`.
fn counts(v: &Value) -> String {
    let groups = v.as_array().cloned().unwrap_or_default();
    let most = |kind: &str| {
        groups
            .iter()
            .filter_map(|g| g[kind].as_u64())
            .max()
            .unwrap_or(0)
    };
    let kinds = ["all-reduce", "all-gather", "reduce-scatter"];
    kinds.map(|k| most(k).to_string()).join(" / ")
}

/// The section, from its run file.
pub fn render_run(md: &mut String, run: &Value) -> anyhow::Result<()> {
    let data = &run["data"];
    let rows = data["rows"]
        .as_array()
        .context("cpu-data-parallel.json has no rows")?;
    let _ = writeln!(
        md,
        "## Data-parallel stages: one reduction per step (Tessera only)"
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "`cargo xtask bench --data-parallel`: `{}` (release build) for each model, mesh, FSDP \
         and micro-batch count below, reducing the gradients once per step (the default) against \
         once per micro-batch, {ROUNDS} rounds alternating which goes first; a run's step is the \
         median of its iterations after the first. Collectives are per step on the busiest \
         group, all-reduces / all-gathers / reduce-scatters, counted in XLA's optimized programs; bytes are the \
         largest group's peak live bytes during the step (all its devices). Measured at {}.",
        data["command"].as_str().unwrap_or("?"),
        runs::provenance(run)
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| model | mesh | FSDP | micro-batches | step: per step | step: per micro-batch | \
         speed-up, each round | collectives: per step | per micro-batch | peak bytes: per step | \
         per micro-batch | Target | Check |"
    );
    let _ = writeln!(
        md,
        "|---|---|---|---:|---:|---:|---|---|---|---:|---:|---|---|"
    );
    for row in rows {
        let rounds = row["rounds"].as_array().context("a row has no rounds")?;
        let (per_step, per_mb) = (
            steps_ms(rounds, REDUCTIONS[0])?,
            steps_ms(rounds, REDUCTIONS[1])?,
        );
        let speedups: Vec<f64> = per_mb.iter().zip(&per_step).map(|(m, s)| m / s).collect();
        let first = rounds.first().context("a row has no rounds")?;
        let peak = |reduce: &str| largest(&first[reduce]["peak_live_bytes"]);
        let _ = writeln!(
            md,
            "| {} | `{}` | {} | {} | {:.1} ms | {:.1} ms | {} | {} | {} | {:.0} | {:.0} | {} | {} |",
            row["model"].as_str().unwrap_or("?"),
            row["mesh"].as_str().unwrap_or("?"),
            if row["fsdp"].as_bool() == Some(true) {
                "yes"
            } else {
                "no"
            },
            row["microbatches"].as_str().unwrap_or("?"),
            ratio::median(&per_step),
            ratio::median(&per_mb),
            ratio::each(&speedups),
            counts(&first[REDUCTIONS[0]]["collectives_per_step"]),
            counts(&first[REDUCTIONS[1]]["collectives_per_step"]),
            peak(REDUCTIONS[0]),
            peak(REDUCTIONS[1]),
            ratio::target_cell(Bound::AtLeast, SPEEDUP_TARGET),
            ratio::check(&speedups, Bound::AtLeast, SPEEDUP_TARGET)
        );
    }
    let _ = writeln!(md);
    render_demo(md, data)
}

/// The demo's exposed transfer wait against its step.
fn render_demo(md: &mut String, data: &Value) -> anyhow::Result<()> {
    let demo = data["demo"]
        .as_array()
        .context("cpu-data-parallel.json has no demo runs")?;
    let shares: Vec<f64> = demo
        .iter()
        .map(|d| {
            let step = d["step_wall_ms"].as_f64().unwrap_or(f64::NAN);
            largest(&d["transfer_wait_ms"]) / step
        })
        .collect();
    let waits: Vec<f64> = demo
        .iter()
        .map(|d| largest(&d["transfer_wait_ms"]))
        .collect();
    let steps: Vec<f64> = demo
        .iter()
        .filter_map(|d| d["step_wall_ms"].as_f64())
        .collect();
    let each: Vec<String> = shares
        .iter()
        .map(|s| format!("{:.1}%", s * 100.0))
        .collect();
    let _ = writeln!(
        md,
        "The demo's training run, `{}`: the busiest group's wait for inputs already produced \
         (`transfer_wait_ms`: the transfers' exposed time, the bubble not counted) against the \
         last step.",
        data["demo_command"].as_str().unwrap_or("?")
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| exposed wait | step | share, each round | Target | Check |"
    );
    let _ = writeln!(md, "|---:|---:|---|---|---|");
    let _ = writeln!(
        md,
        "| {:.2} ms | {:.1} ms | {} | ≤ {:.0}% | {} |",
        ratio::median(&waits),
        ratio::median(&steps),
        each.join(", "),
        WAIT_TARGET * 100.0,
        ratio::check(&shares, Bound::AtMost, WAIT_TARGET)
    );
    let _ = writeln!(md);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_row_compares_the_two_reductions_and_the_demo_its_wait() {
        let side = |ms: f64, reduces: u64| {
            serde_json::json!({"iteration_ms": [500.0, ms, ms, ms],
                "peak_live_bytes": [1000, 2000],
                "collectives_per_step": [{"all-reduce": reduces}, {"all-reduce": 1}]})
        };
        let rounds: Vec<Value> = (1..=3)
            .map(|r| {
                serde_json::json!({"round": r, "per-step": side(10.0, 1),
                "per-microbatch": side(12.0, 8)})
            })
            .collect();
        let row = serde_json::json!({"model": "gpt", "mesh": "stage=2,data=4", "fsdp": false,
            "microbatches": "8", "rounds": rounds});
        let demo: Vec<Value> = (0..3)
            .map(|_| serde_json::json!({"step_wall_ms": 100.0, "transfer_wait_ms": [1.0, 6.0]}))
            .collect();
        let run = serde_json::json!({"meta": {"commit": "abc"}, "data": {"command": "tessera train",
            "demo_command": "tessera train", "rows": [row], "demo": demo}});
        let mut md = String::new();
        render_run(&mut md, &run).unwrap();
        assert!(
            md.contains("| gpt | `stage=2,data=4` | no | 8 | 10.0 ms | 12.0 ms | 1.20×, 1.20×, 1.20× | 1 / 0 / 0 | 8 / 0 / 0 | 2000 | 2000 |"),
            "{md}"
        );
        assert!(
            md.contains("| 6.00 ms | 100.0 ms | 6.0%, 6.0%, 6.0% | ≤ 5% | missed in every round |"),
            "{md}"
        );
    }
}
