//! The runtime's own overhead for `cargo xtask bench --compare-jax`: every built-in schedule run
//! by `tessera schedule NAME --execute-synthetic` (tasks that sleep for their costs, the real
//! workers and transport), its measured makespan set against the simulator's; the run file
//! `docs/runs/cpu-synthetic.json` and its section of docs/benchmarks.md.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::anyhow;
use serde_json::Value;

use crate::cmd::{self, step};

/// The schedules measured: (name, stages, groups).
pub const SCHEDULES: &[(&str, &str, &str)] = &[
    ("gpipe", "8", "8"),
    ("interleaved-gpipe", "8", "4"),
    ("1f1b", "8", "8"),
    ("eager-1f1b", "8", "8"),
    ("interleaved-1f1b", "8", "4"),
    ("interleaved-1f1b-fused", "8", "4"),
    ("zero-bubble", "8", "8"),
    ("dualpipev", "8", "4"),
];
/// Micro-batches, costs `F,B,W` and milliseconds per cost unit of every run.
pub const MICROBATCHES: &str = "32";
/// The costs of every run.
pub const COSTS: &str = "1,2,1";
/// Milliseconds per cost unit.
pub const UNIT_MS: &str = "2";
/// Runs per schedule; the row shows their median.
pub const RUNS: usize = 3;
/// The target: measured over simulated makespan at most this.
pub const TARGET: f64 = 1.05;

/// One schedule's synthetic runs.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticRow {
    /// The schedule.
    pub schedule: String,
    /// Its stages and groups, e.g. "8 on 4".
    pub layout: String,
    /// The median measured makespan, in milliseconds.
    pub measured_ms: f64,
    /// Every run's makespan, in milliseconds.
    pub runs_ms: Vec<f64>,
    /// The simulator's makespan, in milliseconds.
    pub simulated_ms: f64,
}

/// Runs every schedule [`RUNS`] times (release build): the run file's data, every run kept.
pub fn measure(root: &Path) -> anyhow::Result<Value> {
    let rows = run(root)?;
    let rows: Vec<Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({"schedule": r.schedule, "layout": r.layout,
                "measured_ms": r.measured_ms, "runs_ms": r.runs_ms,
                "simulated_ms": r.simulated_ms})
        })
        .collect();
    Ok(serde_json::json!({ "rows": rows }))
}

/// The section, from its run file.
pub fn render_run(md: &mut String, run: &Value) -> anyhow::Result<()> {
    let rows = run["data"]["rows"]
        .as_array()
        .ok_or_else(|| anyhow!("cpu-synthetic.json has no rows"))?;
    let rows = rows
        .iter()
        .map(|r| {
            let number = |key: &str| {
                r[key]
                    .as_f64()
                    .ok_or_else(|| anyhow!("a synthetic row has no {key}"))
            };
            Ok(SyntheticRow {
                schedule: r["schedule"].as_str().unwrap_or("?").to_owned(),
                layout: r["layout"].as_str().unwrap_or("?").to_owned(),
                measured_ms: number("measured_ms")?,
                runs_ms: Vec::new(),
                simulated_ms: number("simulated_ms")?,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    render(md, &rows, &crate::runs::provenance(run));
    Ok(())
}

fn run(root: &Path) -> anyhow::Result<Vec<SyntheticRow>> {
    let mut rows = Vec::new();
    for &(schedule, stages, groups) in SCHEDULES {
        step(&format!("bench: synthetic execution of {schedule}"));
        let mut measured = Vec::new();
        let mut simulated = 0.0;
        for _ in 0..RUNS {
            let report = run_once(root, schedule, stages, groups)?;
            let get = |key: &str| {
                report
                    .get(key)
                    .and_then(Value::as_f64)
                    .ok_or_else(|| anyhow!("{key} missing from the {schedule} report"))
            };
            measured.push(get("measured_makespan_ms")?);
            simulated = get("simulated_makespan_ms")?;
        }
        let runs_ms = measured.clone();
        measured.sort_by(f64::total_cmp);
        rows.push(SyntheticRow {
            schedule: schedule.to_owned(),
            layout: format!("{stages} on {groups}"),
            measured_ms: measured[measured.len() / 2],
            runs_ms,
            simulated_ms: simulated,
        });
    }
    Ok(rows)
}

fn run_once(root: &Path, schedule: &str, stages: &str, groups: &str) -> anyhow::Result<Value> {
    let args = [
        "schedule",
        schedule,
        "--stages",
        stages,
        "--mpmd-dim",
        groups,
        "--microbatches",
        MICROBATCHES,
        "--costs",
        COSTS,
        "--execute-synthetic",
        "--time-unit-ms",
        UNIT_MS,
        "--json",
    ];
    cmd::tessera_json(root, &args, &format!("the synthetic run of {schedule}"))
}

/// The section of docs/benchmarks.md; `provenance` says where and when it ran.
pub fn render(md: &mut String, rows: &[SyntheticRow], provenance: &str) {
    let _ = writeln!(md, "## Runtime overhead without XLA (synthetic execution)");
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "`tessera schedule NAME --stages 8 --microbatches {MICROBATCHES} --costs {COSTS} \
         --execute-synthetic --time-unit-ms {UNIT_MS}`: the plan runs through the real workers \
         and transport with tasks that sleep for their costs; median of {RUNS} runs. Measured \
         at {provenance}."
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| Schedule | Stages on groups | Measured makespan | Simulated makespan | Measured / \
         simulated | Target | Check |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    if rows.is_empty() {
        let _ = writeln!(
            md,
            "| every schedule, synthetic | — | not measured yet | not measured yet | not measured yet | \
             ≤ {TARGET:.2}× | not measured yet |"
        );
    }
    for row in rows {
        let ratio = row.measured_ms / row.simulated_ms;
        let check = if ratio <= TARGET {
            format!("met ({ratio:.3}× ≤ {TARGET:.2}×)")
        } else {
            format!("missed ({ratio:.3}× > {TARGET:.2}×)")
        };
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} ms | {:.1} ms | {ratio:.3}× | ≤ {TARGET:.2}× | {check} |",
            row.schedule, row.layout, row.measured_ms, row.simulated_ms
        );
    }
    let _ = writeln!(md);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_checked_against_the_target() {
        let mut md = String::new();
        let row = |schedule: &str, measured_ms| SyntheticRow {
            schedule: schedule.into(),
            layout: "8 on 8".into(),
            measured_ms,
            runs_ms: Vec::new(),
            simulated_ms: 234.0,
        };
        render(&mut md, &[row("1f1b", 240.0), row("gpipe", 260.0)], "here");
        assert!(md.contains(
            "| 1f1b | 8 on 8 | 240.0 ms | 234.0 ms | 1.026× | ≤ 1.05× | met (1.026× ≤ 1.05×) |"
        ));
        assert!(md.contains("| gpipe | 8 on 8 | 260.0 ms | 234.0 ms | 1.111× | ≤ 1.05× | missed"));
        let mut empty = String::new();
        render(&mut empty, &[], "here");
        assert!(empty.contains("| every schedule, synthetic |"));
    }
}
