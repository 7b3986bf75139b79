//! The "Llama train step, 1 device" rows of `cargo xtask bench --compare-jax`: the model library's
//! byte-level Llama trained by `tessera train` (release build, one CPU device, AdamW) against the
//! same model written in plain JAX (`benches/jax/llama_jax.py`: `jax.jit` of value_and_grad and
//! `optax.adamw`), as tokens/s and their ratio; the run file `docs/runs/cpu-llama.json` and its
//! section of docs/benchmarks.md. JAX runs on jemalloc (as Tessera) and on glibc's `malloc`;
//! the sides alternate which goes first ([`crate::jax::order`]); both time a step from its call
//! with the batch already on the device (Tessera uploads the next batch on a helper thread, JAX
//! with `jax.device_put` while the step before runs) until the loss is on the host.
//!
//! Before timing, each model is checked to be the same on both sides: the parameter counts must
//! be equal, and JAX, started from Tessera's checkpoint after step 1, must give Tessera's losses
//! of steps 2 and 3 (the second after one AdamW update computed by JAX) within
//! [`CHECK_TOLERANCE`].

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use crate::alloc::Allocator;
use crate::cmd::{self, step};
use crate::jax::Side;
use crate::ratio::{self, Bound};
use crate::runs;

/// JAX's side of the rows.
pub const SCRIPT: &str = "benches/jax/llama_jax.py";
/// The data both sides train on (`tessera train`'s default corpus).
pub const DATA: &str = "examples/data/corpus.txt";
/// The heading of the section (also where `--llama-only` splices it into docs/benchmarks.md).
pub const HEADING: &str = "## Llama train step, 1 device";
/// Rounds of (JAX, Tessera) per model.
pub const ROUNDS: usize = 3;
/// Steps of each run; the first (compilation) is left out of the median.
pub const STEPS: u32 = 10;
/// The learning rate of both sides.
pub const LR: &str = "0.001";
/// The largest relative difference of the checked losses.
pub const CHECK_TOLERANCE: f64 = 1e-4;
/// Tessera's tokens/s over JAX's must be at least this (issue 29).
pub const TARGET: f64 = 1.0;

/// A Llama's sizes and batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaModel {
    /// Decoder layers.
    pub layers: u32,
    /// Model width.
    pub d_model: u32,
    /// Attention heads.
    pub heads: u32,
    /// Tokens per sequence.
    pub seq_len: u32,
    /// Sequences per step.
    pub batch: u32,
}

/// The two CPU models of issue 29.
pub const MODELS: [LlamaModel; 2] = [
    LlamaModel {
        layers: 2,
        d_model: 1024,
        heads: 16,
        seq_len: 16,
        batch: 2,
    },
    LlamaModel {
        layers: 4,
        d_model: 256,
        heads: 8,
        seq_len: 128,
        batch: 16,
    },
];

impl LlamaModel {
    /// "Llama train step, 1 device: 2 layers, d_model 1024, 16 heads, seq_len 16, batch 2".
    pub fn label(&self) -> String {
        format!(
            "Llama train step, 1 device: {} layers, d_model {}, {} heads, seq_len {}, batch {}",
            self.layers, self.d_model, self.heads, self.seq_len, self.batch
        )
    }

    /// Tokens trained on per step.
    pub fn tokens_per_step(&self) -> f64 {
        f64::from(self.batch) * f64::from(self.seq_len)
    }

    fn size_args(&self) -> Vec<String> {
        [
            ("--layers", self.layers),
            ("--d-model", self.d_model),
            ("--heads", self.heads),
            ("--seq-len", self.seq_len),
            ("--batch", self.batch),
        ]
        .iter()
        .flat_map(|(flag, value)| [flag.to_string(), value.to_string()])
        .collect()
    }

    /// `tessera train`'s arguments for `steps` steps of this model on one device.
    pub fn tessera_args(&self, steps: u32) -> Vec<String> {
        let mut args = vec!["train".to_owned(), "--model".into(), "llama".into()];
        args.extend(self.size_args());
        let fixed = [
            "--microbatches",
            "1",
            "--stages",
            "1",
            "--mpmd-dim",
            "1",
            "--devices",
            "1",
            "--optimizer",
            "adamw",
            "--lr",
            LR,
            "--no-reference",
            "--eval-every",
            "0",
            "--json",
            "--steps",
        ];
        args.extend(fixed.map(String::from));
        args.push(steps.to_string());
        args
    }

    /// `llama_jax.py`'s arguments for `steps` steps of this model on `data`.
    pub fn jax_args(&self, steps: u32, data: &Path) -> Vec<String> {
        let mut args = self.size_args();
        args.extend([
            "--steps".to_owned(),
            steps.to_string(),
            "--lr".into(),
            LR.into(),
        ]);
        args.extend(["--data".to_owned(), data.to_string_lossy().into_owned()]);
        args
    }
}

/// The losses of steps 2 and 3: Tessera's, and JAX's from Tessera's checkpoint after step 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Check {
    /// Tessera's losses of steps 2 and 3.
    pub tessera: [f64; 2],
    /// JAX's.
    pub jax: [f64; 2],
}

impl Check {
    /// The largest relative difference of the two pairs.
    pub fn worst(&self) -> f64 {
        crate::jax::relative_difference(&self.tessera, &self.jax)
    }
}

/// Checks every model of [`MODELS`], then times them over [`ROUNDS`] alternating rounds; the
/// run file's data.
pub fn measure(root: &Path, python: &Path, preload: &Path) -> anyhow::Result<Value> {
    let data = root.join(DATA);
    let mut models = Vec::new();
    for model in MODELS {
        step(&format!(
            "bench: {}: checking that JAX's model is Tessera's",
            model.label()
        ));
        let (check, parameters) = check(root, python, &model, &data)?;
        models.push(serde_json::json!({
            "layers": model.layers, "d_model": model.d_model, "heads": model.heads,
            "seq_len": model.seq_len, "batch": model.batch, "parameters": parameters,
            "check": {"tessera": check.tessera, "jax": check.jax, "tolerance": CHECK_TOLERANCE},
            "rounds": [],
        }));
    }
    let mut jax_version = String::new();
    for round in 1..=ROUNDS {
        for (model, entry) in MODELS.iter().zip(&mut models) {
            let sides = crate::jax::order(round);
            let mut figures = serde_json::json!({ "round": round, "order": sides.map(Side::key) });
            for side in sides {
                step(&format!(
                    "bench: round {round}/{ROUNDS}: {} ({})",
                    model.label(),
                    side.key()
                ));
                let median_s = match side {
                    Side::Jax(allocator) => {
                        let env = allocator.env(preload);
                        let jax = run_jax(root, python, &model.jax_args(STEPS, &data), &env)?;
                        jax_version = describe_jax(&jax);
                        number(&jax, "median_step_s")?
                    }
                    Side::Tessera => {
                        let args = model.tessera_args(STEPS);
                        let summary = cmd::tessera_json(root, &refs(&args), "tessera train")?;
                        model.tokens_per_step() / number(&summary, "tokens_per_second")?
                    }
                };
                figures[format!("{}_s", side.key())] = serde_json::json!(median_s);
            }
            entry["rounds"]
                .as_array_mut()
                .context("rounds")?
                .push(figures);
        }
    }
    Ok(serde_json::json!({
        "jax": jax_version,
        "steps": STEPS,
        "lr": LR,
        "command": format!("tessera {}", MODELS[0].tessera_args(STEPS).join(" ")),
        "models": models,
    }))
}

/// Tessera's losses of steps 2 and 3 and JAX's from Tessera's step-1 checkpoint; the parameter
/// counts, which must agree.
fn check(
    root: &Path,
    python: &Path,
    model: &LlamaModel,
    data: &Path,
) -> anyhow::Result<(Check, u64)> {
    let dir = root
        .join("target")
        .join("tmp")
        .join(format!("llama-check-{}x{}", model.layers, model.d_model));
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("could not remove {}", dir.display()))?;
    }
    let mut args = model.tessera_args(3);
    let full = cmd::tessera_json(root, &refs(&args), "tessera train (3 steps)")?;
    // The same run stopped after step 1, saving its parameters and AdamW's state.
    let dir_arg = dir.to_string_lossy().into_owned();
    args.extend(
        [
            "--checkpoint-dir",
            &dir_arg,
            "--checkpoint-every",
            "1",
            "--stop-after",
            "1",
        ]
        .map(String::from),
    );
    cmd::tessera_json(
        root,
        &refs(&args),
        "tessera train (checkpoint after step 1)",
    )?;
    let mut jax_args = model.jax_args(STEPS, data);
    jax_args.extend(["--check".to_owned(), dir_arg]);
    let jax = run_jax(root, python, &jax_args, &[])?;
    fs::remove_dir_all(&dir).ok();
    let tessera_params = number(&full, "parameters")? as u64;
    let jax_params = number(&jax, "parameters")? as u64;
    if tessera_params != jax_params {
        bail!(
            "{}: JAX's model has {jax_params} parameters but Tessera's {tessera_params}: {SCRIPT} \
             is not the model of crates/tessera-nn/src/decoder.rs",
            model.label()
        );
    }
    let losses = full
        .get("losses")
        .and_then(Value::as_array)
        .filter(|l| l.len() == 3)
        .ok_or_else(|| anyhow!("tessera train did not report 3 losses"))?;
    let loss = |i: usize| losses[i].as_f64().unwrap_or(f64::NAN);
    let check = Check {
        tessera: [loss(1), loss(2)],
        jax: [
            number(&jax, "check.step_2_loss")?,
            number(&jax, "check.step_3_loss")?,
        ],
    };
    // A NaN difference fails too.
    if check.worst().is_nan() || check.worst() > CHECK_TOLERANCE {
        bail!(
            "{}: from Tessera's checkpoint after step 1, JAX's losses of steps 2 and 3 are {:?} \
             but Tessera's {:?} (relative difference {:.1e} > {CHECK_TOLERANCE:.0e}): {SCRIPT} is \
             not the model of crates/tessera-nn/src/decoder.rs",
            model.label(),
            check.jax,
            check.tessera,
            check.worst()
        );
    }
    Ok((check, tessera_params))
}

fn refs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// A number of a JSON object, by a dotted path.
fn number(value: &Value, path: &str) -> anyhow::Result<f64> {
    path.split('.')
        .try_fold(value, |v, key| v.get(key))
        .and_then(Value::as_f64)
        .ok_or_else(|| anyhow!("{path} is missing from a JSON summary"))
}

/// "jax 0.10.1, jaxlib 0.10.1, optax.adamw (optax 0.2.8), cpu".
fn describe_jax(out: &Value) -> String {
    let text = |path: &[&str]| {
        path.iter()
            .try_fold(out, |v, key| v.get(key))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned()
    };
    format!(
        "jax {}, jaxlib {}, {}, {}",
        text(&["versions", "jax"]),
        text(&["versions", "jaxlib"]),
        text(&["optimizer"]),
        text(&["platform"])
    )
}

/// Runs `llama_jax.py` on one CPU device, with `env` added, and reads its JSON.
fn run_jax(
    root: &Path,
    python: &Path,
    args: &[String],
    env: &[(String, String)],
) -> anyhow::Result<Value> {
    let mut all: Vec<(&str, &str)> = vec![("JAX_PLATFORMS", "cpu")];
    all.extend(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let text = cmd::python_stdout(python, root, SCRIPT, args, &all)?;
    serde_json::from_str(text.lines().last().unwrap_or_default())
        .with_context(|| format!("{SCRIPT} printed no JSON object"))
}

fn milliseconds(s: f64) -> String {
    let ms = s * 1e3;
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

/// `n` with thousands separated by commas.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The section, from its run file.
pub fn render_run(md: &mut String, run: &Value) -> anyhow::Result<()> {
    let data = &run["data"];
    let models = data["models"]
        .as_array()
        .ok_or_else(|| anyhow!("cpu-llama.json has no models"))?;
    let _ = writeln!(md, "{HEADING}");
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "`{}` (release build, the default CPU plugin) and the same sizes for the other model, \
         against `{SCRIPT}`: the same byte-level Llama in plain JAX, `jax.jit` of \
         value_and_grad and AdamW as one step, float32, one CPU device. Measured at {}; {}. \
         Not the same XLA build on the two sides (see the jit section).",
        data["command"].as_str().unwrap_or("?"),
        runs::provenance(run),
        data["jax"].as_str().unwrap_or("?")
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| Model | Parameters | JAX step (jemalloc) | Tessera step | Tessera / JAX tokens/s, \
         each round | Tessera / JAX tokens/s | Target | Check | JAX step (glibc malloc) | \
         Tessera / JAX (glibc) |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---|---|---|---|---:|---|");
    for entry in models {
        render_row(md, entry)?;
    }
    let orders: Vec<String> = models
        .first()
        .and_then(|m| m["rounds"].as_array())
        .map(|rounds| {
            rounds
                .iter()
                .map(|r| match r["order"][0].as_str() {
                    Some("tessera") => "Tessera first",
                    _ => "JAX first",
                })
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "Method: {} rounds ({}), each running JAX on jemalloc (preloaded, as Tessera's), JAX on \
         glibc's `malloc` and Tessera on each model; a run's figure is its median step over \
         steps 2 to {} (step 1 compiles), timed from the call with the batch already on the \
         device until the loss is on the host (both sides upload the next batch while the step \
         before runs); a cell gives the median of the rounds' figures, and a ratio whose rounds \
         lie on both sides of 1.0 is a tie. Both sides train on the windows of `{DATA}` that \
         `tessera train` cuts, at learning rate {}. JAX picks the target's log-probability with \
         `take_along_axis`, Tessera with a one-hot product.",
        orders.len(),
        orders.join(", "),
        data["steps"],
        data["lr"].as_str().unwrap_or("?"),
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "The same model on both sides: equal parameter counts, and JAX started from Tessera's \
         checkpoint after step 1 (`--checkpoint-dir`, read by `{SCRIPT} --check`) gives \
         Tessera's loss of step 2 and, after one AdamW update of its own, of step 3:"
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| Model | step 2 loss: Tessera | JAX | step 3 loss: Tessera | JAX | largest relative \
         difference | Tolerance |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|");
    for entry in models {
        let model = model_of(entry)?;
        let pair = |side: &str| -> [f64; 2] {
            let at = |i: usize| entry["check"][side][i].as_f64().unwrap_or(f64::NAN);
            [at(0), at(1)]
        };
        let check = Check {
            tessera: pair("tessera"),
            jax: pair("jax"),
        };
        let _ = writeln!(
            md,
            "| {} | {:.7} | {:.7} | {:.7} | {:.7} | {:.1e} | {CHECK_TOLERANCE:.0e} |",
            model.label(),
            check.tessera[0],
            check.jax[0],
            check.tessera[1],
            check.jax[1],
            check.worst()
        );
    }
    let _ = writeln!(md);
    Ok(())
}

/// The model a run file's entry names.
fn model_of(entry: &Value) -> anyhow::Result<LlamaModel> {
    let size = |key: &str| {
        entry[key]
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| anyhow!("a Llama entry has no {key}"))
    };
    Ok(LlamaModel {
        layers: size("layers")?,
        d_model: size("d_model")?,
        heads: size("heads")?,
        seq_len: size("seq_len")?,
        batch: size("batch")?,
    })
}

/// One model's row: medians, every round's ratio, the verdict and the glibc ratio.
fn render_row(md: &mut String, entry: &Value) -> anyhow::Result<()> {
    let model = model_of(entry)?;
    let rounds = entry["rounds"]
        .as_array()
        .filter(|r| !r.is_empty())
        .ok_or_else(|| anyhow!("{}: no rounds", model.label()))?;
    let column = |side: Side| -> anyhow::Result<Vec<f64>> {
        let key = format!("{}_s", side.key());
        rounds
            .iter()
            .map(|r| {
                r[&key]
                    .as_f64()
                    .ok_or_else(|| anyhow!("{}: a round has no {key}", model.label()))
            })
            .collect()
    };
    let jax = column(Side::Jax(Allocator::Jemalloc))?;
    let glibc = column(Side::Jax(Allocator::Glibc))?;
    let tessera = column(Side::Tessera)?;
    // Tokens/s: the ratio of JAX's step to Tessera's.
    let ratios: Vec<f64> = jax.iter().zip(&tessera).map(|(j, t)| j / t).collect();
    let glibc_ratios: Vec<f64> = glibc.iter().zip(&tessera).map(|(j, t)| j / t).collect();
    let parameters = entry["parameters"].as_u64().unwrap_or(0);
    let _ = writeln!(
        md,
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        model.label(),
        grouped(parameters),
        milliseconds(ratio::median(&jax)),
        milliseconds(ratio::median(&tessera)),
        ratio::each(&ratios),
        ratio::verdict(&ratios),
        ratio::target_cell(Bound::AtLeast, TARGET),
        ratio::check(&ratios, Bound::AtLeast, TARGET),
        milliseconds(ratio::median(&glibc)),
        ratio::verdict(&glibc_ratios),
    );
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests;
