//! The "Llama train step, 1 device" rows of `cargo xtask bench --compare-jax`: the model library's
//! byte-level Llama trained by `tessera train` (release build, one CPU device, AdamW) against the
//! same model written in plain JAX (`benches/jax/llama_jax.py`: `jax.jit` of value_and_grad and
//! `optax.adamw`), the two alternating, as tokens/s and their ratio; a section of
//! docs/benchmarks.md.
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

use crate::cmd::{self, step};

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

/// One side's rounds: the median step time of each, in seconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rounds {
    /// Each round's median step.
    pub medians_s: Vec<f64>,
}

impl Rounds {
    /// The median of the rounds' medians.
    pub fn median_s(&self) -> f64 {
        let mut v = self.medians_s.clone();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    fn range_s(&self) -> (f64, f64) {
        let min = self.medians_s.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.medians_s.iter().copied().fold(0.0, f64::max);
        (min, max)
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
        self.tessera
            .iter()
            .zip(&self.jax)
            .map(|(t, j)| (t - j).abs() / t.abs().max(f64::MIN_POSITIVE))
            .fold(0.0, f64::max)
    }
}

/// One model's row.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaRow {
    /// The model.
    pub model: LlamaModel,
    /// Its parameters (the same on both sides).
    pub parameters: u64,
    /// JAX's rounds.
    pub jax: Rounds,
    /// Tessera's rounds.
    pub tessera: Rounds,
    /// The equivalence check.
    pub check: Check,
}

impl LlamaRow {
    /// Tessera's tokens/s over JAX's (medians of the rounds).
    pub fn ratio(&self) -> f64 {
        self.jax.median_s() / self.tessera.median_s()
    }
}

/// The section: where and with what it ran, and its rows.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaSection {
    /// The machine.
    pub machine: String,
    /// When.
    pub date: String,
    /// "jax 0.10.1, jaxlib 0.10.1, optax.adamw (optax 0.2.8), cpu".
    pub jax: String,
    /// One row per model.
    pub rows: Vec<LlamaRow>,
}

/// Checks and times every model of [`MODELS`] (see the module's documentation).
pub fn run(root: &Path, python: &Path) -> anyhow::Result<(String, Vec<LlamaRow>)> {
    let data = root.join(DATA);
    let mut rows = Vec::new();
    let mut jax_version = String::new();
    for model in MODELS {
        step(&format!(
            "bench: {}: checking that JAX's model is Tessera's",
            model.label()
        ));
        let (check, parameters) = check(root, python, &model, &data)?;
        rows.push(LlamaRow {
            model,
            parameters,
            jax: Rounds::default(),
            tessera: Rounds::default(),
            check,
        });
    }
    for round in 1..=ROUNDS {
        for row in &mut rows {
            let model = row.model;
            step(&format!(
                "bench: round {round}/{ROUNDS}: {} (JAX)",
                model.label()
            ));
            let jax = run_jax(root, python, &model.jax_args(STEPS, &data))?;
            jax_version = describe_jax(&jax);
            row.jax.medians_s.push(number(&jax, "median_step_s")?);
            step(&format!(
                "bench: round {round}/{ROUNDS}: {} (Tessera)",
                model.label()
            ));
            let summary =
                cmd::tessera_json(root, &refs(&model.tessera_args(STEPS)), "tessera train")?;
            let tokens_per_second = number(&summary, "tokens_per_second")?;
            row.tessera
                .medians_s
                .push(model.tokens_per_step() / tokens_per_second);
        }
    }
    Ok((jax_version, rows))
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
    let jax = run_jax(root, python, &jax_args)?;
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

/// Runs `llama_jax.py` on one CPU device and reads its JSON.
fn run_jax(root: &Path, python: &Path, args: &[String]) -> anyhow::Result<Value> {
    let text = cmd::python_stdout(python, root, SCRIPT, args, &[("JAX_PLATFORMS", "cpu")])?;
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

/// The section of docs/benchmarks.md, from [`HEADING`] on.
pub fn render(md: &mut String, section: &LlamaSection) {
    let _ = writeln!(md, "{HEADING}");
    let _ = writeln!(md);
    let example = MODELS[0].tessera_args(STEPS).join(" ");
    let _ = writeln!(
        md,
        "`tessera {example}` (release build, the default CPU plugin) and the same sizes for the \
         other model, against `{SCRIPT}`: the same byte-level Llama in plain JAX, `jax.jit` of \
         value_and_grad and AdamW as one step, float32, one CPU device. Measured on {}, {}; {}.",
        section.machine, section.date, section.jax
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| Model | Parameters | JAX step | JAX tokens/s | Tessera step | Tessera tokens/s | \
         Tessera / JAX tokens/s | Target | Check |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---|---|");
    if section.rows.is_empty() {
        let _ = writeln!(
            md,
            "| Llama train step, 1 device | — | not measured yet | | not measured yet | | not \
             measured yet | ≥ {TARGET:.1}× | not measured yet |"
        );
    }
    for row in &section.rows {
        let side = |rounds: &Rounds| {
            let (low, high) = rounds.range_s();
            let step = format!(
                "{} ({}–{})",
                milliseconds(rounds.median_s()),
                milliseconds(low),
                milliseconds(high)
            );
            let tokens = row.model.tokens_per_step() / rounds.median_s();
            (step, format!("{tokens:.0}"))
        };
        let ((jax_step, jax_tokens), (tessera_step, tessera_tokens)) =
            (side(&row.jax), side(&row.tessera));
        let ratio = row.ratio();
        let check = if ratio >= TARGET {
            format!("met ({ratio:.2}× ≥ {TARGET:.2}×)")
        } else {
            format!("missed ({ratio:.2}× < {TARGET:.2}×)")
        };
        let _ = writeln!(
            md,
            "| {} | {} | {jax_step} | {jax_tokens} | {tessera_step} | {tessera_tokens} | \
             {ratio:.2}× | ≥ {TARGET:.1}× | {check} |",
            row.model.label(),
            grouped(row.parameters),
        );
    }
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "Method: {ROUNDS} rounds, each running JAX then Tessera on each model in turn; a run's \
         figure is its median step over steps 2 to {STEPS} (step 1 compiles), from handing the \
         host batch to the step until the loss is on the host; a cell gives the median of the \
         rounds' figures and their range, and tokens/s is batch × seq_len over that median. \
         Both sides train on the windows of `{DATA}` that `tessera train` cuts, at learning rate \
         {LR}. JAX picks the target's log-probability with `take_along_axis`, Tessera with a \
         one-hot product."
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
    for row in &section.rows {
        let c = &row.check;
        let _ = writeln!(
            md,
            "| {} | {:.7} | {:.7} | {:.7} | {:.7} | {:.1e} | {CHECK_TOLERANCE:.0e} |",
            row.model.label(),
            c.tessera[0],
            c.jax[0],
            c.tessera[1],
            c.jax[1],
            c.worst()
        );
    }
    let _ = writeln!(md);
}

/// `doc` with its Llama section (from [`HEADING`] to the next `## ` heading or `stop`) replaced
/// by `section`; without one, `section` goes before `before` (a heading), else before `stop`,
/// else at the end.
pub fn splice(doc: &str, section: &str, before: &str, stop: &str) -> String {
    let section = format!("{}\n\n", section.trim_end());
    let end_after = |from: usize| {
        let rest = &doc[from..];
        let next = rest.find("\n## ").map(|i| i + 1);
        let marker = rest.find(stop);
        let end = match (next, marker) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(rest.len()),
        };
        from + end
    };
    let at = if let Some(start) = doc.find(HEADING) {
        let end = end_after(start + HEADING.len());
        return format!("{}{section}{}", &doc[..start], &doc[end..]);
    } else if let Some(i) = doc.find(before) {
        i
    } else if let Some(i) = doc.find(stop) {
        i
    } else {
        return format!("{}\n\n{section}", doc.trim_end());
    };
    format!("{}{section}{}", &doc[..at], &doc[at..])
}

#[cfg(test)]
pub(crate) mod tests;
