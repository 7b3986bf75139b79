//! `cargo xtask bench --generate`: greedy generation speed of `tessera generate` against
//! `transformers`' `model.generate` (PyTorch on the CPU) on the same random Llama folder; the run
//! file `docs/runs/cpu-generate.json` and its section of docs/benchmarks.md.
//!
//! PyTorch is several GB, so `cargo xtask setup` does not install it: `TESSERA_TORCH_PYTHON`
//! names a Python with the versions `benches/hf/generate_speed.py` pins. The two sides alternate
//! over [`ROUNDS`], each a fresh process; both time the prefill and every decode step, neither
//! its compilation or warm-up, and both must produce the same tokens.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::cmd::{self, step};
use crate::ratio::{self, Bound};

/// The heading of the section in docs/benchmarks.md.
pub const HEADING: &str = "## Greedy generation against transformers (PyTorch, CPU)";
/// Rounds of the two sides.
pub const ROUNDS: usize = 3;
/// New tokens per generation.
pub const NEW_TOKENS: usize = 64;
/// The prompt.
pub const PROMPT: &str = "The quick brown fox jumps over the lazy dog";
/// Tessera's tokens per second over transformers' must be at least this.
pub const TARGET: f64 = 1.0;
const SCRIPT: &str = "benches/hf/generate_speed.py";

fn torch_python() -> anyhow::Result<PathBuf> {
    match std::env::var_os("TESSERA_TORCH_PYTHON") {
        Some(p) => Ok(PathBuf::from(p)),
        None => bail!(
            "set TESSERA_TORCH_PYTHON to a Python with torch 2.5.1, transformers 4.57.1 and \
             tokenizers 0.22.1 (e.g. python3 -m venv /tmp/hf && /tmp/hf/bin/pip install \
             torch==2.5.1 transformers==4.57.1 tokenizers==0.22.1 safetensors; several GB)"
        ),
    }
}

fn measure(root: &Path, python: &Path, folder: &Path, side: &str) -> anyhow::Result<Value> {
    let n = NEW_TOKENS.to_string();
    let dir = folder.display().to_string();
    match side {
        "tessera" => {
            let args = [
                "generate",
                "--model-dir",
                &dir,
                "--prompt",
                PROMPT,
                "--max-new-tokens",
                &n,
                "--ignore-eos",
                "--json",
            ];
            cmd::tessera_json(root, &args, "tessera generate")
        }
        _ => {
            let args = ["time", &dir, PROMPT, &n].map(String::from);
            let out = cmd::python_stdout(python, root, SCRIPT, &args, &[])?;
            serde_json::from_str(out.lines().last().unwrap_or_default())
                .context("generate_speed.py printed no JSON")
        }
    }
}

/// Runs the benchmark and writes its section into docs/benchmarks.md.
pub fn run(root: &Path) -> anyhow::Result<()> {
    let python = torch_python()?;
    cmd::build_release_tessera()?;
    let folder =
        std::env::temp_dir().join(format!("tessera-bench-generate-{}", std::process::id()));
    step("bench: generate: a random Llama folder (33M parameters)");
    let tokenizer = root.join("tests/data/hf/llama_gqa/tokenizer.json");
    let make = [
        "make".to_string(),
        folder.display().to_string(),
        tokenizer.display().to_string(),
    ];
    cmd::python_stdout(&python, root, SCRIPT, &make, &[])?;
    let rounds = ratio::alternating_rounds(ROUNDS, &["tessera", "transformers"], |side, round| {
        step(&format!("bench: generate: round {round}/{ROUNDS}: {side}"));
        let got = measure(root, &python, &folder, side)?;
        Ok(serde_json::json!({
            "tokens_per_second": got["tokens_per_second"],
            "ids": got["ids"],
        }))
    })?;
    let _ = std::fs::remove_dir_all(&folder);
    for r in &rounds {
        if r["tessera"]["ids"] != r["transformers"]["ids"] {
            bail!(
                "round {}: the two sides generated different tokens",
                r["round"]
            );
        }
    }
    let data = serde_json::json!({
        "new_tokens": NEW_TOKENS,
        "prompt": PROMPT,
        "rounds": rounds,
    });
    crate::runs::write(root, "cpu-generate", data)?;
    crate::runs::regenerate(root)
}

/// The section, from its run file.
pub fn render_run(md: &mut String, run: &Value) -> anyhow::Result<()> {
    let rounds = run["data"]["rounds"]
        .as_array()
        .context("cpu-generate.json has no rounds")?;
    let rate = |side: &str| -> Vec<f64> {
        rounds
            .iter()
            .filter_map(|r| r[side]["tokens_per_second"].as_f64())
            .collect()
    };
    let (ours, theirs) = (rate("tessera"), rate("transformers"));
    let ratios: Vec<f64> = ours.iter().zip(&theirs).map(|(a, b)| a / b).collect();
    let new_tokens = run["data"]["new_tokens"].as_u64().unwrap_or(0);
    let _ = writeln!(md, "{HEADING}\n");
    let _ = writeln!(
        md,
        "`cargo xtask bench --generate`: greedy generation of {new_tokens} tokens after the \
         prompt \"{}\" from a random 33M-parameter Llama folder (8 layers, width 512, 8 query \
         and 4 key/value heads, vocabulary 8192, float32): `tessera generate` (release build; \
         a prefill program, then one decode program call per token with the key/value cache on \
         the device; compilation not timed) against `transformers`' `model.generate` (PyTorch \
         2.5.1 on the CPU, its default threads, eager attention, one warm-up generation not \
         timed). The sides alternate over {} rounds, each a fresh process, and generated the \
         same tokens in every round. Measured at {}.\n",
        run["data"]["prompt"].as_str().unwrap_or("?"),
        rounds.len(),
        crate::runs::provenance(run)
    );
    md.push_str(
        "| | Tessera tokens/s | transformers tokens/s | Tessera / transformers | target | |\n",
    );
    md.push_str("|---|---|---|---|---|---|\n");
    let cells = |v: &[f64]| {
        let (low, high) = ratio::spread(v);
        format!("{:.0} ({low:.0}–{high:.0})", ratio::median(v))
    };
    let _ = writeln!(
        md,
        "| greedy, {new_tokens} new tokens | {} | {} | {} | {} | {} |\n",
        cells(&ours),
        cells(&theirs),
        ratio::verdict(&ratios),
        ratio::target_cell(Bound::AtLeast, TARGET),
        ratio::check(&ratios, Bound::AtLeast, TARGET)
    );
    Ok(())
}
