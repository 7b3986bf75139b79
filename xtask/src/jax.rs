//! `cargo xtask bench --compare-jax`: JAX and Tessera on the same model, batch and 8 CPU devices,
//! written to `docs/benchmarks.md`.
//!
//! JAX's side: a virtual environment under `target/jax-venv/` with a pinned CPU `jax`/`jaxlib`
//! and `optax`, running `benches/jax/bench_jax.py`, which prints one JSON object of medians.
//! Tessera's side fills [`TesseraResults`]; every metric it leaves `None` is rendered as "not
//! measured yet", so the table never shows a made-up number. The Llama rows (one device, the
//! model users train) are [`crate::llama`]'s.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use crate::cmd::{self, step};
use crate::known_plugins::DEFAULT_CPU_PLUGIN;

/// The JAX release Tessera is compared with: the one whose XLA is nearest to the default CPU
/// plugin's among those that run on this Python (`known_plugins.rs` records, per plugin, the
/// jaxlib and its own PJRT C API version, as jaxlib logs them when it loads the plugin: "The
/// PJRT plugin has PJRT API version A. The framework PJRT API version is B"). Near versions mean
/// XLA of the same weeks, so the comparison measures Tessera rather than two XLA versions.
pub const JAX_VERSION: &str = DEFAULT_CPU_PLUGIN.compare_jax;
/// The jaxlib matching [`JAX_VERSION`] (see there for why).
pub const JAXLIB_VERSION: &str = DEFAULT_CPU_PLUGIN.compare_jax;
/// The optax whose `adamw` JAX's Llama step uses (the newest release when this was written; it
/// takes jax 0.4.27 and later).
pub const OPTAX_VERSION: &str = "0.2.8";
/// The virtual environment, under the git-ignored `target/`.
pub const VENV_DIR: &str = "target/jax-venv";
/// JAX's benchmark script.
const SCRIPT: &str = "benches/jax/bench_jax.py";
/// Where JAX's raw JSON is kept for a later look.
const RAW_JSON: &str = "target/bench-jax.json";
/// The generated table.
const OUTPUT: &str = "docs/benchmarks.md";
/// Where the sections of `docs/benchmarks.md` that other commands measure begin; the
/// regeneration keeps them.
const KEPT_MARKER: &str =
    "<!-- measured by other commands: kept by cargo xtask bench --compare-jax -->";
/// What a cell says while Tessera's side is missing.
const NOT_MEASURED: &str = "not measured yet";
/// The model both sides run, as the table states it.
const MODEL: &str = "3-layer MLP 256→512→512→10, batch 256, float32, softmax cross-entropy, \
                     plain SGD step returning new params and loss; mesh `data=8` (batch sharded, \
                     params replicated)";

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

    /// The key in `bench_jax.py`'s JSON.
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

    /// The issue's target for Tessera / JAX, if it sets one.
    pub fn target(self) -> Option<f64> {
        match self {
            Metric::JitStep | Metric::Dispatch => Some(1.0),
            Metric::TraceLower => Some(0.1),
            Metric::Compile => None,
        }
    }
}

/// A median and how many samples it was taken over.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stat {
    /// Median in seconds.
    pub median_s: f64,
    /// Number of samples.
    pub samples: usize,
}

/// What `bench_jax.py` measured.
#[derive(Clone, Debug, PartialEq)]
pub struct JaxResults {
    /// `jax.__version__`.
    pub jax: String,
    /// `jaxlib.__version__`.
    pub jaxlib: String,
    /// The Python that ran it.
    pub python: String,
    /// How many devices JAX saw.
    pub device_count: u64,
    /// One per [`Metric::ALL`], in that order.
    pub metrics: [Stat; 4],
}

impl JaxResults {
    /// Reads the JSON object that `bench_jax.py` prints.
    pub fn from_json(text: &str) -> anyhow::Result<Self> {
        let value: Value = serde_json::from_str(text.trim())
            .with_context(|| format!("{SCRIPT} did not print one JSON object"))?;
        let string = |path: &[&str]| -> anyhow::Result<String> {
            lookup(&value, path)?
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| anyhow!("{} is not a string", path.join(".")))
        };
        let stat = |metric: Metric| -> anyhow::Result<Stat> {
            let path = ["metrics", metric.key()];
            let entry = lookup(&value, &path)?;
            let median_s = entry
                .get("median_s")
                .and_then(Value::as_f64)
                .ok_or_else(|| anyhow!("{}.median_s is not a number", path.join(".")))?;
            let samples = entry
                .get("samples")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            Ok(Stat { median_s, samples })
        };
        Ok(Self {
            jax: string(&["versions", "jax"])?,
            jaxlib: string(&["versions", "jaxlib"])?,
            python: string(&["versions", "python"])?,
            device_count: lookup(&value, &["device_count"])?
                .as_u64()
                .ok_or_else(|| anyhow!("device_count is not a count"))?,
            metrics: [
                stat(Metric::JitStep)?,
                stat(Metric::TraceLower)?,
                stat(Metric::Compile)?,
                stat(Metric::Dispatch)?,
            ],
        })
    }

    /// JAX's stat for one metric.
    pub fn stat(&self, metric: Metric) -> Stat {
        self.metrics[metric as usize]
    }
}

fn lookup<'a>(value: &'a Value, path: &[&str]) -> anyhow::Result<&'a Value> {
    path.iter().try_fold(value, |v, key| {
        v.get(key)
            .ok_or_else(|| anyhow!("{SCRIPT}'s JSON has no {}", path.join(".")))
    })
}

/// One pipelined step of Tessera, for one schedule, against the simulator's prediction.
#[derive(Clone, Debug, PartialEq)]
pub struct PipelinedRow {
    /// The schedule's name (e.g. "1F1B").
    pub schedule: String,
    /// Tessera's measured median step time, in seconds.
    pub measured_s: f64,
    /// The simulator's predicted step time, in seconds.
    pub predicted_s: f64,
}

/// Tessera's medians, in seconds. Every `None` is rendered as "not measured yet"; filling a
/// field is all the table needs to show the value, its ratio to JAX and the target check.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TesseraResults {
    /// Median step time of Tessera's jit of the same data-parallel step.
    pub jit_step: Option<f64>,
    /// Median time to trace and lower the step (no XLA compile).
    pub trace_lower: Option<f64>,
    /// Median time to compile that lowering.
    pub compile: Option<f64>,
    /// Median per-call dispatch overhead of a tiny jitted function.
    pub dispatch: Option<f64>,
    /// Tessera's pipelined step for each schedule (target: within 10% of the prediction).
    pub pipelined: Vec<PipelinedRow>,
}

impl TesseraResults {
    /// Tessera's median for one metric, if measured.
    pub fn get(&self, metric: Metric) -> Option<f64> {
        match metric {
            Metric::JitStep => self.jit_step,
            Metric::TraceLower => self.trace_lower,
            Metric::Compile => self.compile,
            Metric::Dispatch => self.dispatch,
        }
    }
}

/// Tessera's pipelined step must be within this factor of the simulator's prediction (either way).
pub const PIPELINE_TOLERANCE: f64 = 1.10;

/// Everything the table shows.
#[derive(Clone, Debug)]
pub struct Report {
    /// The machine, e.g. "AMD EPYC 7B13, 2 CPUs (nproc)".
    pub machine: String,
    /// When it ran, e.g. "2026-11-23 08:55 UTC".
    pub date: String,
    /// The PJRT plugin Tessera compiles with, with its PJRT C API version.
    pub plugin: String,
    /// JAX's side.
    pub jax: JaxResults,
    /// Tessera's side.
    pub tessera: TesseraResults,
    /// The runtime's synthetic runs, one row per schedule.
    pub synthetic: Vec<crate::synthetic::SyntheticRow>,
    /// The Llama rows (their section names the machine and date too).
    pub llama: crate::llama::LlamaSection,
}

/// `cargo xtask bench --compare-jax`: JAX's side now; Tessera's side joins through
/// [`TesseraResults`].
pub fn compare() -> anyhow::Result<()> {
    let root = cmd::workspace_root();
    let python = ensure_venv(&root)?;
    ensure_jax(&python)?;
    // Alternate the two sides so machine noise hits both alike; each metric is the mean of the
    // per-round medians.
    let mut jax_rounds = Vec::new();
    let mut tessera_rounds = Vec::new();
    for _ in 0..ROUNDS {
        jax_rounds.push(run_jax(&root, &python)?);
        tessera_rounds.push(run_tessera(&root)?);
    }
    let jax = average_jax(&jax_rounds);
    let mut tessera = average_tessera(&tessera_rounds);
    let llama = llama_section(&root, &python)?;
    tessera.pipelined = run_pipelined(&root)?;
    let synthetic = crate::synthetic::run(&root)?;
    let report = Report {
        machine: llama.machine.clone(),
        date: llama.date.clone(),
        plugin: plugin_version(),
        jax,
        tessera,
        synthetic,
        llama,
    };
    let markdown = render(&report);
    println!("{markdown}");
    let out = root.join(OUTPUT);
    step(&format!("bench: writing {}", out.display()));
    // Sections measured by other commands (after KEPT_MARKER) survive a regeneration.
    let old = match fs::read_to_string(&out) {
        Ok(old) => Some(old),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("could not read {}", out.display())),
    };
    let kept = kept_sections(old.as_deref())?;
    let text = if kept.is_empty() {
        markdown
    } else {
        format!("{}\n\n{kept}", markdown.trim_end())
    };
    fs::write(&out, text).with_context(|| format!("could not write {}", out.display()))?;
    Ok(())
}

/// What a regeneration keeps of the old file: everything from [`KEPT_MARKER`] on. An old file
/// without the marker is refused rather than overwritten, which would drop the sections other
/// commands measured.
fn kept_sections(old: Option<&str>) -> anyhow::Result<String> {
    let Some(old) = old else {
        return Ok(String::new());
    };
    match old.find(KEPT_MARKER) {
        Some(at) => Ok(old[at..].to_owned()),
        None => anyhow::bail!(
            "{OUTPUT} has no line `{KEPT_MARKER}`, so regenerating it would drop the sections \
             kept after it; put the line back above them (or remove the file to start anew)"
        ),
    }
}

/// Runs the Llama rows ([`crate::llama::run`]) and dates them.
fn llama_section(root: &Path, python: &Path) -> anyhow::Result<crate::llama::LlamaSection> {
    let (jax, rows) = crate::llama::run(root, python)?;
    Ok(crate::llama::LlamaSection {
        machine: cmd::machine(),
        date: cmd::date_and_load(),
        jax,
        rows,
    })
}

/// `cargo xtask bench --compare-jax --llama-only`: the Llama rows alone, replacing their section
/// of `docs/benchmarks.md` and keeping the rest.
pub fn compare_llama_only() -> anyhow::Result<()> {
    let root = cmd::workspace_root();
    let python = ensure_venv(&root)?;
    ensure_jax(&python)?;
    let mut section = String::new();
    crate::llama::render(&mut section, &llama_section(&root, &python)?);
    println!("{section}");
    let out = root.join(OUTPUT);
    step(&format!(
        "bench: writing the Llama section of {}",
        out.display()
    ));
    let old = fs::read_to_string(&out).unwrap_or_default();
    let text = crate::llama::splice(&old, &section, "## Pipelined step", KEPT_MARKER);
    fs::write(&out, text).with_context(|| format!("could not write {}", out.display()))
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

/// Trains the byte-level GPT for a few steps under each schedule (release build) and reads the
/// measured makespan of the last step and the simulator's prediction from the measured task times.
fn run_pipelined(root: &Path) -> anyhow::Result<Vec<PipelinedRow>> {
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
        rows.push(PipelinedRow {
            schedule: schedule.to_owned(),
            measured_s: ms("makespan_ms")? / 1000.0,
            predicted_s: ms("predicted_makespan_ms")? / 1000.0,
        });
    }
    Ok(rows)
}

/// Rounds of (JAX, Tessera) runs.
const ROUNDS: usize = 3;

/// Runs Tessera's side (`benches/src/bin/tessera_bench_jit.rs`, built in release mode).
fn run_tessera(root: &Path) -> anyhow::Result<TesseraResults> {
    step("bench: running Tessera's benchmark tessera-bench-jit on 8 CPU devices");
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
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    let out = command
        .output()
        .with_context(|| format!("could not start {command:?}"))?;
    if !out.status.success() {
        bail!("{command:?} failed ({})", out.status);
    }
    TesseraResults::from_json(&String::from_utf8_lossy(&out.stdout))
}

impl TesseraResults {
    /// Reads the JSON object that `tessera-bench-jit` prints (one `{median_s}` per metric).
    pub fn from_json(text: &str) -> anyhow::Result<Self> {
        let value: Value = serde_json::from_str(text.trim())
            .context("tessera-bench-jit did not print one JSON object")?;
        let median = |key: &str| {
            value
                .get(key)
                .and_then(|m| m.get("median_s"))
                .and_then(Value::as_f64)
        };
        Ok(TesseraResults {
            jit_step: median("jit_step"),
            trace_lower: median("trace_lower"),
            compile: median("compile"),
            dispatch: median("dispatch"),
            pipelined: Vec::new(),
        })
    }
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = values.collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn average_jax(rounds: &[JaxResults]) -> JaxResults {
    let mut out = rounds[0].clone();
    for (i, stat) in out.metrics.iter_mut().enumerate() {
        stat.median_s = mean(rounds.iter().map(|r| r.metrics[i].median_s)).unwrap_or(stat.median_s);
        stat.samples = rounds.iter().map(|r| r.metrics[i].samples).sum();
    }
    out
}

fn average_tessera(rounds: &[TesseraResults]) -> TesseraResults {
    let pick = |f: fn(&TesseraResults) -> Option<f64>| mean(rounds.iter().filter_map(f));
    TesseraResults {
        jit_step: pick(|r| r.jit_step),
        trace_lower: pick(|r| r.trace_lower),
        compile: pick(|r| r.compile),
        dispatch: pick(|r| r.dispatch),
        pipelined: Vec::new(),
    }
}

/// Makes `target/jax-venv/` if it is missing or broken, and returns its Python.
pub fn ensure_venv(root: &Path) -> anyhow::Result<PathBuf> {
    ensure_venv_at(root, VENV_DIR, "bench")
}

/// Makes the virtual environment `dir` (relative to `root`) if it is missing or broken, and
/// returns its Python; `command` (e.g. `bench`) begins the lines that say what it does.
pub fn ensure_venv_at(root: &Path, dir: &str, command: &str) -> anyhow::Result<PathBuf> {
    let venv = root.join(dir);
    let python = venv.join("bin").join("python");
    if python.is_file() && cmd::output(&python.to_string_lossy(), &["--version"]).is_some() {
        step(&format!(
            "{command}: Python virtual environment {} exists (skipped)",
            venv.display()
        ));
        return Ok(python);
    }
    if venv.exists() {
        step(&format!(
            "{command}: {} is broken (its Python does not run); making it anew",
            venv.display()
        ));
        fs::remove_dir_all(&venv)
            .with_context(|| format!("could not remove {}", venv.display()))?;
    }
    ensure_venv_module()?;
    step(&format!(
        "{command}: making a Python virtual environment in {}",
        venv.display()
    ));
    cmd::run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    if !python.is_file() {
        bail!(
            "python3 -m venv finished but {} is missing",
            python.display()
        );
    }
    Ok(python)
}

/// `python3 -m venv` needs the `venv` and `ensurepip` modules (Debian's `python3-venv`).
fn ensure_venv_module() -> anyhow::Result<()> {
    let has_venv = || cmd::output("python3", &["-c", "import venv, ensurepip"]).is_some();
    if cmd::output("python3", &["--version"]).is_none() {
        bail!(
            "python3 was not found; JAX and TensorBoard run in Python virtual environments. Install \
             it: apt-get install python3 python3-venv"
        );
    }
    if has_venv() {
        return Ok(());
    }
    let is_root = cmd::output("id", &["-u"]).as_deref() == Some("0");
    if !is_root {
        bail!(
            "python3 has no venv/ensurepip module. xtask is not root, so it cannot install it. \
             Run:\n    sudo apt-get update && sudo apt-get install -y python3-venv\nthen run \
             this command again"
        );
    }
    step("bench: installing python3-venv from Debian's packages");
    cmd::run(
        Command::new("apt-get")
            .args(["update", "-q"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    cmd::run(
        Command::new("apt-get")
            .args([
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
                "python3-venv",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    if !has_venv() {
        bail!("apt-get installed python3-venv but python3 still has no venv/ensurepip module");
    }
    Ok(())
}

/// Installs the pinned CPU jax/jaxlib and optax into the venv unless they are there already.
pub fn ensure_jax(python: &Path) -> anyhow::Result<()> {
    let python_str = python.to_string_lossy();
    let installed = cmd::output(
        &python_str,
        &[
            "-c",
            "import jax, jaxlib, optax; print(jax.__version__, jaxlib.__version__, \
             optax.__version__)",
        ],
    );
    let wanted = format!("{JAX_VERSION} {JAXLIB_VERSION} {OPTAX_VERSION}");
    if installed.as_deref() == Some(wanted.as_str()) {
        step(&format!(
            "bench: jax {JAX_VERSION}, jaxlib {JAXLIB_VERSION} and optax {OPTAX_VERSION} are \
             installed in the venv (skipped)"
        ));
        return Ok(());
    }
    step(&format!(
        "bench: installing CPU jax {JAX_VERSION}, jaxlib {JAXLIB_VERSION} and optax \
         {OPTAX_VERSION} into the venv with pip (was: {})",
        installed.as_deref().unwrap_or("none")
    ));
    cmd::run(Command::new(python).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        &format!("jax=={JAX_VERSION}"),
        &format!("jaxlib=={JAXLIB_VERSION}"),
        &format!("optax=={OPTAX_VERSION}"),
    ]))
}

/// Runs `bench_jax.py` and reads its JSON (also kept in `target/bench-jax.json`).
fn run_jax(root: &Path, python: &Path) -> anyhow::Result<JaxResults> {
    step(&format!(
        "bench: running JAX's benchmark {SCRIPT} on 8 CPU devices (about 15 s)"
    ));
    let text = cmd::python_stdout(python, root, SCRIPT, &[], &[])?;
    let raw = root.join(RAW_JSON);
    fs::write(&raw, text.as_bytes())
        .with_context(|| format!("could not write {}", raw.display()))?;
    let results = JaxResults::from_json(&text)?;
    if results.device_count != 8 {
        bail!(
            "JAX saw {} devices, not 8; the comparison needs 8",
            results.device_count
        );
    }
    Ok(results)
}

/// "fastatomstruct-xla-cpu 2026.6.23 (`zml-cpu`, PJRT C API 0.106)": the default CPU plugin.
fn plugin_version() -> String {
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

/// "met (0.85× ≤ 1.00×)", "missed (1.30× > 1.00×)", or "not measured yet".
fn check(ratio: Option<f64>, target: Option<f64>) -> String {
    match (ratio, target) {
        (_, None) => "no target".into(),
        (None, Some(_)) => "not measured yet".into(),
        (Some(r), Some(t)) if r <= t => format!("met ({r:.2}× ≤ {t:.2}×)"),
        (Some(r), Some(t)) => format!("missed ({r:.2}× > {t:.2}×)"),
    }
}

/// A two-sided check: the prediction is met when the measurement is within the band around it.
fn check_within(ratio: f64, low: f64, high: f64) -> String {
    if (low..=high).contains(&ratio) {
        format!("met ({low:.2}× ≤ {ratio:.2}× ≤ {high:.2}×)")
    } else if ratio < low {
        format!("missed ({ratio:.2}× < {low:.2}×: faster than the model predicts)")
    } else {
        format!("missed ({ratio:.2}× > {high:.2}×)")
    }
}

/// The markdown of `docs/benchmarks.md`.
pub fn render(report: &Report) -> String {
    let jax = &report.jax;
    let mut md = String::new();
    let _ = writeln!(md, "# Benchmarks: Tessera against JAX");
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "Generated by `cargo xtask bench --compare-jax`; do not edit by hand. Medians over \
         repeated runs after warm-up, both on the same machine in one run."
    );
    let _ = writeln!(md);
    let _ = writeln!(md, "| | |");
    let _ = writeln!(md, "|---|---|");
    let _ = writeln!(md, "| Machine | {} |", report.machine);
    let _ = writeln!(md, "| Date | {} |", report.date);
    let _ = writeln!(
        md,
        "| JAX | jax {}, jaxlib {} (CPU, Python {}), {} devices via \
         `--xla_force_host_platform_device_count` |",
        jax.jax, jax.jaxlib, jax.python, jax.device_count
    );
    let _ = writeln!(
        md,
        "| Tessera's PJRT plugin | {}, 8 virtual CPU devices |",
        report.plugin
    );
    let _ = writeln!(md, "| JAX–plugin match | {} |", version_match());
    let _ = writeln!(md, "| Model | {MODEL} |");
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| Metric | JAX median | Tessera median | Tessera / JAX | Target | Check |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    for metric in Metric::ALL {
        let stat = jax.stat(metric);
        let tessera = report.tessera.get(metric);
        let ratio = tessera.map(|t| t / stat.median_s);
        let _ = writeln!(
            md,
            "| {} | {} (n={}) | {} | {} | {} | {} |",
            metric.label(),
            seconds(stat.median_s),
            stat.samples,
            tessera.map_or_else(|| NOT_MEASURED.to_owned(), seconds),
            ratio.map_or_else(|| NOT_MEASURED.to_owned(), |r| format!("{r:.2}×")),
            metric
                .target()
                .map_or_else(|| "—".to_owned(), |t| format!("≤ {t:.1}×")),
            check(ratio, metric.target()),
        );
    }
    let _ = writeln!(md);
    crate::llama::render(&mut md, &report.llama);
    let _ = writeln!(md, "## Pipelined step (Tessera only)");
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "JAX has no counterpart here: each schedule's step time is set against the simulator's \
         prediction."
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| Schedule | Tessera median | Simulator prediction | Measured / predicted | Target | \
         Check |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    let low = 2.0 - PIPELINE_TOLERANCE;
    let target = format!("{low:.2}×–{PIPELINE_TOLERANCE:.2}×");
    if report.tessera.pipelined.is_empty() {
        let _ = writeln!(
            md,
            "| every schedule | {NOT_MEASURED} | {NOT_MEASURED} | {NOT_MEASURED} | {target} | \
             not measured yet |"
        );
    }
    for row in &report.tessera.pipelined {
        let ratio = row.measured_s / row.predicted_s;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {ratio:.2}× | {target} | {} |",
            row.schedule,
            seconds(row.measured_s),
            seconds(row.predicted_s),
            check_within(ratio, low, PIPELINE_TOLERANCE),
        );
    }
    let _ = writeln!(md);
    crate::synthetic::render(&mut md, &report.synthetic);
    let _ = writeln!(
        md,
        "Method: {ROUNDS} rounds alternating JAX and Tessera; each figure is the mean of the \
         per-round medians. Tessera's loss picks the label's log-probability with a one-hot \
         product (its IR has gather, but this keeps the step to dense ops); JAX's uses \
         `take_along_axis`. Pipelined rows: the byte-level GPT of `tessera train --model gpt` (4 \
         blocks, d=64, 8 microbatches, 8 devices), medians over steps 2 to 5 of 5; a task's time \
         runs from its dispatch until its outputs are computed (PJRT runs asynchronously, so \
         timing the dispatch alone would hide the computation); each step's prediction feeds its \
         measured per-task times (F, B, W per stage) and mean transfer time into the schedule \
         simulator. Where the time goes: docs/profiling.md."
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "JAX's version: {}. jaxlib logs both versions when it loads the plugin (\"The PJRT plugin \
         has PJRT API version A. The framework PJRT API version is B\"); for the CPU plugins \
         Tessera knows, crates/tessera-pjrt/src/known_plugins.rs records the pairs and the reason \
         for each choice.",
        version_match()
    );
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_jax() -> JaxResults {
        JaxResults {
            jax: "0.8.1".into(),
            jaxlib: "0.8.1".into(),
            python: "3.11.7".into(),
            device_count: 8,
            metrics: [
                Stat {
                    median_s: 0.010,
                    samples: 100,
                },
                Stat {
                    median_s: 0.050,
                    samples: 7,
                },
                Stat {
                    median_s: 0.400,
                    samples: 7,
                },
                Stat {
                    median_s: 4e-6,
                    samples: 15,
                },
            ],
        }
    }

    fn row<'a>(md: &'a str, label: &str) -> &'a str {
        let found = md
            .lines()
            .find(|line| line.starts_with(&format!("| {label} |")));
        assert!(found.is_some(), "no row {label:?} in:\n{md}");
        found.unwrap_or_default()
    }

    #[test]
    fn render_fills_measured_rows_and_marks_the_rest() {
        let report = Report {
            machine: "Test CPU, 2 CPUs (nproc)".into(),
            date: "2026-11-23 09:00 UTC".into(),
            plugin: "xla-cpu-pjrt 0.0.1 (PJRT C API 0.81)".into(),
            jax: fake_jax(),
            tessera: TesseraResults {
                jit_step: Some(0.008),
                trace_lower: Some(0.015),
                compile: None,
                dispatch: Some(8e-6),
                pipelined: vec![PipelinedRow {
                    schedule: "1F1B".into(),
                    measured_s: 0.0105,
                    predicted_s: 0.010,
                }],
            },
            synthetic: Vec::new(),
            llama: crate::llama::tests::fake_section(),
        };
        let md = render(&report);
        assert!(md.contains("| Machine | Test CPU, 2 CPUs (nproc) |"));
        assert!(md.contains("| Date | 2026-11-23 09:00 UTC |"));
        assert!(md.contains("jax 0.8.1, jaxlib 0.8.1"));
        assert!(md.contains("xla-cpu-pjrt 0.0.1 (PJRT C API 0.81)"));

        assert_eq!(
            row(&md, Metric::JitStep.label()),
            "| jit step time (data parallel, 8 devices) | 10.0 ms (n=100) | 8.00 ms | 0.80× \
             | ≤ 1.0× | met (0.80× ≤ 1.00×) |"
        );
        assert_eq!(
            row(&md, Metric::TraceLower.label()),
            "| trace + lower (no XLA compile) | 50.0 ms (n=7) | 15.0 ms | 0.30× | ≤ 0.1× \
             | missed (0.30× > 0.10×) |"
        );
        assert_eq!(
            row(&md, Metric::Compile.label()),
            format!(
                "| compile (XLA) | 400 ms (n=7) | {NOT_MEASURED} | {NOT_MEASURED} | — | no target |"
            )
        );
        assert_eq!(
            row(&md, Metric::Dispatch.label()),
            "| dispatch overhead per call (x + 1, 4 floats) | 4.00 µs (n=15) | 8.00 µs | 2.00× \
             | ≤ 1.0× | missed (2.00× > 1.00×) |"
        );
        assert_eq!(
            row(&md, "1F1B"),
            "| 1F1B | 10.5 ms | 10.0 ms | 1.05× | 0.90×–1.10× | met (0.90× ≤ 1.05× ≤ 1.10×) |"
        );
        assert!(!md.contains("| every schedule |"));
        // The Llama rows come between the main table and the pipelined step, as tokens/s.
        let (llama, pipelined) = (md.find(crate::llama::HEADING), md.find("## Pipelined step"));
        assert!(llama.is_some() && llama < pipelined, "{md}");
        assert!(row(&md, &crate::llama::MODELS[0].label()).contains("| 0.69× | ≥ 1.0× | missed"));
    }

    #[test]
    fn the_pipelined_check_is_two_sided() {
        assert_eq!(check_within(1.0, 0.9, 1.1), "met (0.90× ≤ 1.00× ≤ 1.10×)");
        assert!(check_within(0.85, 0.9, 1.1).starts_with("missed (0.85× < 0.90×"));
        assert!(check_within(1.2, 0.9, 1.1).starts_with("missed (1.20× > 1.10×"));
    }

    #[test]
    fn render_without_tessera_says_not_measured_everywhere() {
        let report = Report {
            machine: "Test CPU, 2 CPUs (nproc)".into(),
            date: "2026-11-23 09:00 UTC".into(),
            plugin: "xla-cpu-pjrt 0.0.1".into(),
            jax: fake_jax(),
            tessera: TesseraResults::default(),
            synthetic: Vec::new(),
            llama: crate::llama::LlamaSection {
                rows: Vec::new(),
                ..crate::llama::tests::fake_section()
            },
        };
        let md = render(&report);
        for metric in Metric::ALL {
            let line = row(&md, metric.label());
            // Tessera and ratio cells, and the check cell where the metric has a target.
            let expected = if metric.target().is_some() { 3 } else { 2 };
            assert_eq!(line.matches(NOT_MEASURED).count(), expected, "{line}");
            assert!(!line.contains("met ("), "{line}");
        }
        assert!(row(&md, "every schedule").contains(NOT_MEASURED));
        assert!(row(&md, "Llama train step, 1 device").contains(NOT_MEASURED));
    }

    #[test]
    fn jax_json_is_read() {
        let text = r#"{"versions": {"jax": "0.8.1", "jaxlib": "0.8.1", "python": "3.11.7"},
            "device_count": 8, "platform": "cpu",
            "metrics": {"jit_step": {"median_s": 0.01, "samples": [0.01, 0.011, 0.009]},
                        "trace_lower": {"median_s": 0.05, "samples": [0.05]},
                        "compile": {"median_s": 0.4, "samples": [0.4, 0.41]},
                        "dispatch": {"median_s": 4e-6, "samples": [4e-6]}}}"#;
        let jax = JaxResults::from_json(text).expect("valid JSON");
        assert_eq!(jax.jaxlib, "0.8.1");
        assert_eq!(jax.device_count, 8);
        assert_eq!(
            jax.stat(Metric::JitStep),
            Stat {
                median_s: 0.01,
                samples: 3
            }
        );
        assert_eq!(jax.stat(Metric::Compile).samples, 2);
        assert!(JaxResults::from_json("{}").is_err());
    }

    #[test]
    fn seconds_are_readable() {
        assert_eq!(seconds(1.5), "1.50 s");
        assert_eq!(seconds(0.0123), "12.3 ms");
        assert_eq!(seconds(0.000_003_77), "3.77 µs");
        assert_eq!(seconds(0.449), "449 ms");
    }
}

#[cfg(test)]
mod kept_tests {
    use super::*;

    #[test]
    fn a_file_without_the_marker_is_refused_not_overwritten() {
        assert_eq!(kept_sections(None).unwrap(), "");
        let with = format!("generated\n{KEPT_MARKER}\n## kept\n");
        assert_eq!(
            kept_sections(Some(&with)).unwrap(),
            format!("{KEPT_MARKER}\n## kept\n")
        );
        assert!(kept_sections(Some("generated\n## kept\n")).is_err());
    }
}
