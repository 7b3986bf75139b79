//! A GPU run of `cargo xtask gpu-bundle`'s `run.sh` as a section of docs/benchmarks.md: the
//! run file `run.sh` writes (`WORK/out/run.json`, copied to `docs/runs/gpu-KIND.json`), with
//! every part's row and each Llama's rounds against the machine's own JAX.

use std::fmt::Write as _;

use anyhow::anyhow;
use serde_json::Value;

use crate::ratio::{self, Bound};
use crate::runs;

/// The section, from a run file `run.sh` wrote.
pub fn render_run(md: &mut String, run: &Value) -> anyhow::Result<()> {
    let data = &run["data"];
    let rows = data["rows"]
        .as_array()
        .ok_or_else(|| anyhow!("a GPU run has no rows"))?;
    let models = data["models"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(
        md,
        "## On a GPU: {}",
        run["meta"]["machine"].as_str().unwrap_or("?")
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "`run.sh` of `cargo xtask gpu-bundle` ([gpus.md](gpus.md)), {} rounds of {} steps per \
         model, JAX first in odd rounds and Tessera in even ones; JAX is the machine's own (its \
         CUDA plugin, glibc's `malloc`), Tessera runs with `--plugin {}` (jemalloc). Measured \
         at {}.",
        data["rounds"],
        data["steps"],
        run["meta"]["plugin"].as_str().unwrap_or("?"),
        runs::provenance(run)
    );
    let _ = writeln!(md);
    if !models.is_empty() {
        let _ = writeln!(
            md,
            "| Model | JAX step | Tessera step | Tessera / JAX tokens/s, each round | Tessera / \
             JAX tokens/s | same model (steps 2, 3 from the checkpoint) | MFU |"
        );
        let _ = writeln!(md, "|---|---:|---:|---|---|---|---:|");
    }
    for m in &models {
        let rounds = |key: &str| -> Vec<f64> {
            m[key]
                .as_array()
                .map(|v| v.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default()
        };
        let (jax, tessera) = (rounds("jax_rounds_s"), rounds("tessera_rounds_s"));
        let ratios: Vec<f64> = jax.iter().zip(&tessera).map(|(j, t)| j / t).collect();
        let mfu = m["mfu"]
            .as_f64()
            .map_or_else(|| "—".to_owned(), |f| format!("{:.1}%", f * 100.0));
        let _ = writeln!(
            md,
            "| {} | {:.1} ms | {:.1} ms | {} | {} ({}) | within {:.1e} (tolerance {}) | {mfu} |",
            m["model"].as_str().unwrap_or("?"),
            ratio::median(&jax) * 1e3,
            ratio::median(&tessera) * 1e3,
            ratio::each(&ratios),
            ratio::verdict(&ratios),
            ratio::check(&ratios, Bound::AtLeast, 1.0),
            m["check"]["worst"].as_f64().unwrap_or(f64::NAN),
            m["check"]["tolerance"],
        );
    }
    if !models.is_empty() {
        let _ = writeln!(md);
    }
    let _ = writeln!(md, "| part | result | detail |");
    let _ = writeln!(md, "|---|---|---|");
    for row in rows {
        let cell = |key: &str| row[key].as_str().unwrap_or("?").replace('|', "\\|");
        let _ = writeln!(
            md,
            "| {} | {} | {} |",
            cell("part"),
            cell("result"),
            cell("detail")
        );
    }
    let _ = writeln!(md);
    Ok(())
}
