//! `cargo xtask bench --compile`: how the compile time of a jit step grows with the number of
//! micro-batches (a `treduce` lowered as a `stablehlo.while`, against unrolled) and with the
//! number of layers (a `scan`, against the layers written out): the criterion benches
//! `treduce_compile` and `scan_compile` (the Rust side in the dev profile, XLA and MLIR
//! optimized), their estimates read from `target/criterion/` into the run files
//! `docs/runs/cpu-treduce-compile.json` and `docs/runs/cpu-scan-compile.json`, then the page.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use crate::cmd::{self, step};

/// A criterion bench and what it measures.
pub struct Bench {
    /// The bench target (`benches/benches/NAME.rs`).
    pub name: &'static str,
    /// Its criterion group.
    group: &'static str,
    /// The run file's name.
    pub run: &'static str,
    /// The page's heading.
    heading: &'static str,
    /// Its functions: (criterion name, the row's label, whether the target applies).
    functions: &'static [(&'static str, &'static str, bool)],
    /// The small and the large parameter.
    params: [i64; 2],
    /// What the parameter counts.
    unit: &'static str,
    /// What the step is, for the page.
    what: &'static str,
}

/// The large parameter's compile time over the small one's must be at most this for the
/// loop forms (issues 20 and 23).
pub const TARGET: f64 = 1.5;

/// The two benches.
pub const BENCHES: [Bench; 2] = [
    Bench {
        name: "treduce_compile",
        group: "jit step compile",
        run: "cpu-treduce-compile",
        heading: "## Compile time of a jit step with a `treduce` loop (Tessera only)",
        functions: &[
            (
                "while",
                "`stablehlo.while` (`lower_closed`, what `jit` uses)",
                true,
            ),
            ("unrolled", "unrolled (`lower_closed_unrolled`)", false),
        ],
        params: [8, 64],
        unit: "micro-batches",
        what: "`tessera train`'s shape: a `treduce` over micro-batches of \
               `value_and_grad_call(loss)` for a two-layer MLP (16→32→4, 8 rows per \
               micro-batch), then SGD",
    },
    Bench {
        name: "scan_compile",
        group: "scanned layers step compile",
        run: "cpu-scan-compile",
        heading: "## Compile time of a jit step over a scanned stack of layers (Tessera only)",
        functions: &[
            ("scan", "`scan` over the stacked weights", true),
            ("unrolled", "the layers written out", false),
        ],
        params: [4, 32],
        unit: "layers",
        what: "one SGD update of `value_and_grad` of a stack of layers `h = tanh(h W_l + b_l)` \
               (width 64, batch 8, float32, mean-square loss), under `scan` (one \
               `stablehlo.while` forward, two in the VJP) or written out at trace time",
    },
];

/// One benchmark's estimate: criterion's median and its 95% confidence interval (ns).
fn estimate(root: &Path, bench: &Bench, function: &str, param: i64) -> anyhow::Result<Value> {
    let dir = root
        .join("target/criterion")
        .join(bench.group)
        .join(function)
        .join(param.to_string())
        .join("new");
    let read = |file: &str| -> anyhow::Result<Value> {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("criterion wrote no {}", path.display()))?;
        Ok(serde_json::from_str(&text)?)
    };
    let estimates = read("estimates.json")?;
    let sample = read("sample.json")?;
    let median = &estimates["median"];
    let per_iter: Vec<f64> = sample["iters"]
        .as_array()
        .zip(sample["times"].as_array())
        .map(|(iters, times)| {
            iters
                .iter()
                .zip(times)
                .filter_map(|(i, t)| Some(t.as_f64()? / i.as_f64()?))
                .collect()
        })
        .unwrap_or_default();
    Ok(serde_json::json!({
        "function": function,
        "param": param,
        "median_ns": median["point_estimate"],
        "low_ns": median["confidence_interval"]["lower_bound"],
        "high_ns": median["confidence_interval"]["upper_bound"],
        "samples_ns": per_iter,
    }))
}

/// Runs both benches and writes their sections into docs/benchmarks.md.
pub fn run(root: &Path) -> anyhow::Result<()> {
    // Both measured, then both written with one record of the tree (clean before the first).
    let mut measured = Vec::new();
    for bench in &BENCHES {
        step(&format!(
            "bench: compile: cargo bench --bench {} --profile dev",
            bench.name
        ));
        let _ = std::fs::remove_dir_all(root.join("target/criterion").join(bench.group));
        cmd::cargo(&[
            "bench",
            "-p",
            "tessera-benches",
            "--bench",
            bench.name,
            "--profile",
            "dev",
        ])?;
        let mut results = Vec::new();
        for (function, _, _) in bench.functions {
            for param in bench.params {
                results.push(estimate(root, bench, function, param)?);
            }
        }
        measured.push((bench.run, results));
    }
    let meta = crate::runs::meta(root);
    for (run, results) in measured {
        let data = serde_json::json!({ "results": results });
        crate::runs::write_with_meta(root, run, data, meta.clone())?;
    }
    crate::runs::regenerate(root)
}

fn time(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else {
        format!("{:.0} ms", ns / 1e6)
    }
}

/// The section of the bench whose run file is `name`.
pub fn render_run(md: &mut String, name: &str, run: &Value) -> anyhow::Result<()> {
    let bench = BENCHES
        .iter()
        .find(|b| b.run == name)
        .with_context(|| format!("no compile bench writes {name}"))?;
    let results = run["data"]["results"]
        .as_array()
        .with_context(|| format!("{name}.json has no results"))?;
    let find = |function: &str, param: i64| {
        results
            .iter()
            .find(|r| r["function"] == function && r["param"] == param)
    };
    let [small, large] = bench.params;
    let _ = writeln!(md, "{}\n", bench.heading);
    let _ = writeln!(
        md,
        "`cargo xtask bench --compile` (`cargo bench -p tessera-benches --bench {} --profile \
         dev`: criterion, 10 samples each; the Rust side in the dev profile, XLA and MLIR \
         optimized). The step is {}. Each sample lowers the step to StableHLO and compiles it \
         with XLA through PJRT (one CPU device). Medians with criterion's 95% confidence \
         intervals, one run. Measured at {}.\n",
        bench.name,
        bench.what,
        crate::runs::provenance(run)
    );
    let _ = writeln!(
        md,
        "| | {small} {unit} | {large} {unit} | {large} / {small} | target | |\n|---|---|---|---|---|---|",
        unit = bench.unit
    );
    for (function, label, targeted) in bench.functions {
        let (Some(a), Some(b)) = (find(function, small), find(function, large)) else {
            continue;
        };
        let cell = |r: &Value| {
            let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
            format!(
                "{} [{}, {}]",
                time(f("median_ns")),
                time(f("low_ns")),
                time(f("high_ns"))
            )
        };
        let ratio = b["median_ns"].as_f64().unwrap_or(f64::NAN)
            / a["median_ns"].as_f64().unwrap_or(f64::NAN);
        let (target, check) = match targeted {
            true => (
                format!("≤ {TARGET:.1}×"),
                if ratio <= TARGET { "met" } else { "missed" }.to_string(),
            ),
            false => ("—".into(), "for comparison".into()),
        };
        let _ = writeln!(
            md,
            "| {label} | {} | {} | {ratio:.2}× | {target} | {check} |",
            cell(a),
            cell(b)
        );
    }
    md.push('\n');
    Ok(())
}
