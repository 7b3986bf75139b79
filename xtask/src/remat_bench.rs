//! `cargo xtask bench --remat`: a pipelined step whose backwards read their forwards' residuals
//! (the default `--remat everything_saveable`) against the same step recomputing its forwards
//! (`--remat nothing_saveable`), alternating over [`ROUNDS`]; the run file
//! `docs/runs/cpu-remat.json` and its section of docs/benchmarks.md.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, anyhow};
use serde_json::Value;

use crate::cmd::{self, step};
use crate::ratio::{self, Bound};
use crate::runs;

/// Rounds of the two runs.
pub const ROUNDS: usize = 3;
/// Steps of each run (the first compiles).
pub const STEPS: &str = "12";
/// The policies compared, the default first.
const POLICIES: [&str; 2] = ["everything_saveable", "nothing_saveable"];
/// Saving, a stage's backward must take at most this many of its forwards.
pub const BF_TARGET: f64 = 2.3;
/// Saving, the step must be at least this much faster than recomputing.
pub const SPEEDUP_TARGET: f64 = 1.2;

/// The model of issue 46: a 4-layer Llama over 2 stages on 2 groups, 4 micro-batches.
fn args(policy: &str) -> Vec<String> {
    [
        "train",
        "--model",
        "llama",
        "--layers",
        "4",
        "--d-model",
        "256",
        "--heads",
        "8",
        "--seq-len",
        "128",
        "--batch",
        "16",
        "--stages",
        "2",
        "--devices",
        "2",
        "--microbatches",
        "4",
        "--steps",
        STEPS,
        "--no-reference",
        "--eval-every",
        "0",
        "--json",
        "--remat",
        policy,
    ]
    .map(String::from)
    .to_vec()
}

/// Runs the comparison, writes its run file, then the page.
pub fn run(root: &Path) -> anyhow::Result<()> {
    cmd::build_release_tessera()?;
    let rounds = ratio::alternating_rounds(ROUNDS, &POLICIES, |policy, round| {
        step(&format!("bench: remat, round {round}/{ROUNDS}: {policy}"));
        let args = args(policy);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let s = cmd::tessera_json(root, &refs, "tessera train")?;
        Ok(serde_json::json!({
            "tokens_per_second": s["tokens_per_second"],
            "task_ms": s["task_ms"],
            "remat": s["remat"],
            "losses": s["losses"],
        }))
    })?;
    let command = format!("tessera {}", args("POLICY").join(" "));
    runs::write(
        root,
        "cpu-remat",
        serde_json::json!({ "command": command, "tokens_per_step": 16 * 128, "rounds": rounds }),
    )?;
    runs::regenerate(root)
}

/// The section, from its run file.
pub fn render_run(md: &mut String, run: &Value) -> anyhow::Result<()> {
    let data = &run["data"];
    let rounds = data["rounds"]
        .as_array()
        .filter(|r| !r.is_empty())
        .context("cpu-remat.json has no rounds")?;
    let tokens = data["tokens_per_step"].as_f64().unwrap_or(f64::NAN);
    let step_ms = |policy: &str| -> anyhow::Result<Vec<f64>> {
        rounds
            .iter()
            .map(|r| {
                r[policy]["tokens_per_second"]
                    .as_f64()
                    .map(|t| tokens / t * 1e3)
                    .ok_or_else(|| anyhow!("a round has no {policy} figures"))
            })
            .collect()
    };
    let (saving, recomputing) = (step_ms(POLICIES[0])?, step_ms(POLICIES[1])?);
    let speedups: Vec<f64> = recomputing
        .iter()
        .zip(&saving)
        .map(|(r, s)| r / s)
        .collect();
    let _ = writeln!(
        md,
        "## Saved residuals against recomputation (Tessera only)"
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "`cargo xtask bench --remat`: `{}` (release build), the default policy against \
         `nothing_saveable`, {} rounds alternating which goes first; a run's step is its median \
         over steps 2 to {STEPS}, a task's time its median over those steps' micro-batches \
         (`task_ms`). Measured at {}.",
        data["command"].as_str().unwrap_or("?"),
        rounds.len(),
        runs::provenance(run)
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| step: everything_saveable | step: nothing_saveable | speed-up, each round | speed-up \
         | Target | Check |"
    );
    let _ = writeln!(md, "|---:|---:|---|---|---|---|");
    let _ = writeln!(
        md,
        "| {:.1} ms | {:.1} ms | {} | {} | {} | {} |",
        ratio::median(&saving),
        ratio::median(&recomputing),
        ratio::each(&speedups),
        ratio::verdict(&speedups),
        ratio::target_cell(Bound::AtLeast, SPEEDUP_TARGET),
        ratio::check(&speedups, Bound::AtLeast, SPEEDUP_TARGET)
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| policy | stage | F ms | B ms | B / F, each round | Target | Check |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---|---|---|");
    for policy in POLICIES {
        for stage in 0..2 {
            let task = |kind: &str| -> Vec<f64> {
                let name = format!("{kind} s{stage}");
                rounds
                    .iter()
                    .filter_map(|r| r[policy]["task_ms"][&name].as_f64())
                    .collect()
            };
            let (f, b) = (task("F"), task("B"));
            let ratios: Vec<f64> = b.iter().zip(&f).map(|(b, f)| b / f).collect();
            let (target, check) = match policy == POLICIES[0] {
                true => (
                    format!("≤ {BF_TARGET}"),
                    ratio::check(&ratios, Bound::AtMost, BF_TARGET),
                ),
                false => ("—".to_owned(), "for comparison".to_owned()),
            };
            let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            let _ = writeln!(
                md,
                "| {policy} | {stage} | {:.2} | {:.2} | {} | {target} | {check} |",
                ratio::median(&f),
                ratio::median(&b),
                each.join(", ")
            );
        }
    }
    let _ = writeln!(md);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_speed_up_and_each_stages_ratio_are_checked() {
        let side = |tps: f64, f: f64, b: f64| {
            serde_json::json!({"tokens_per_second": tps,
                "task_ms": {"F s0": f, "B s0": b, "F s1": f, "B s1": b}})
        };
        let rounds: Vec<Value> = (1..=3)
            .map(|r| {
                serde_json::json!({"round": r, "everything_saveable": side(2048.0 / 0.100, 10.0, 20.0),
                    "nothing_saveable": side(2048.0 / 0.130, 10.0, 30.0)})
            })
            .collect();
        let run = serde_json::json!({"meta": {"commit": "abc"}, "data": {"command": "tessera train",
            "tokens_per_step": 2048, "rounds": rounds}});
        let mut md = String::new();
        render_run(&mut md, &run).unwrap();
        assert!(
            md.contains("| 100.0 ms | 130.0 ms | 1.30×, 1.30×, 1.30× |"),
            "{md}"
        );
        assert!(md.contains("| ≥ 1.2× | met in every round |"), "{md}");
        assert!(md.contains("| everything_saveable | 0 | 10.00 | 20.00 | 2.00, 2.00, 2.00 | ≤ 2.3 | met in every round |"), "{md}");
        assert!(
            md.contains("| nothing_saveable | 1 | 10.00 | 30.00 |"),
            "{md}"
        );
    }
}
