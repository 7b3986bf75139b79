//! `cargo xtask demo`: the main job, as a user would run it.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, bail};

use crate::{cmd, setup};

/// The main job: a Llama-style decoder of about a million parameters trained pipelined over 4 MPMD
/// groups x 2 devices, checkpointed, resumed and plotted; before it, the devices of the PJRT CPU plugin,
/// JAX's programs lowered, compiled and differentiated on PJRT, JAX's collectives inside
/// shard_map and its programs with sharding constraints on 8 devices, and the sharding oracle.
/// Every `tessera` process it starts reports its compiles and cache loads (`compile_count.rs`);
/// the counts are printed at the end.
pub fn run() -> anyhow::Result<ExitCode> {
    setup::run()?;
    crate::compile_count::start()?;
    let result = run_demos();
    // The demo's own failure first; then a count that cannot be made.
    let counted = crate::compile_count::report();
    let code = result?;
    counted?;
    Ok(code)
}

fn run_demos() -> anyhow::Result<ExitCode> {
    let shared = cmd::workspace_root()
        .join("..")
        .join("shared")
        .join("oracle");
    let tessera = |args: &[&str]| {
        let mut all = vec!["run", "--quiet", "--package", "tessera", "--"];
        all.extend_from_slice(args);
        cmd::cargo(&all)
    };
    cmd::step("demo: the devices of the PJRT CPU plugin");
    tessera(&["devices", "--cpu-devices", "8"])?;
    if shared.is_dir() {
        let runs = [
            (
                "demo: JAX's jaxprs, lowered to StableHLO, compiled by XLA and differentiated, on PJRT",
                "jaxpr",
                "jaxpr_cases.json",
            ),
            (
                "demo: JAX's shard_map collectives with gradients, SPMD on 8 PJRT devices",
                "collectives",
                "collectives_cases.json",
            ),
            (
                "demo: JAX's programs with sharding constraints, each compiled for its mesh on 8 \
                 PJRT devices, with gradients",
                "jaxpr",
                "jaxpr_sharded_cases.json",
            ),
        ];
        for (what, kind, file) in runs {
            cmd::step(what);
            let file = shared.join(file);
            tessera(&[
                "oracle",
                kind,
                "--backend",
                "pjrt",
                "--grads",
                &file.to_string_lossy(),
            ])?;
        }
        let sharding = shared.join("sharding_cases.json");
        cmd::step("demo: the sharding algebra against JAX");
        tessera(&["oracle", "sharding", &sharding.to_string_lossy()])?;
    } else {
        cmd::step(&format!(
            "demo: {} is missing; skipping the oracle runs",
            shared.display()
        ));
    }
    cmd::step(
        "demo: the model library (examples/nn.rs): a Llama-style decoder with AdamW and warm-up + \
         cosine under jit, a checkpoint halfway, a resumed run equal to the uninterrupted one, \
         the loss curve as SVG",
    );
    cmd::cargo(&[
        "run",
        "--quiet",
        "--package",
        "tessera-examples",
        "--example",
        "nn",
    ])?;
    train_llama()?;
    crate::mpi_demo::run()?;
    Ok(ExitCode::SUCCESS)
}

/// The training run of the demo: `tessera train` with the config of examples/data/llama-1m.toml.
pub(crate) const TRAIN: &[&str] = &[
    "train",
    "--config",
    "examples/data/llama-1m.toml",
    "--schedule",
    "1f1b",
    "--stages",
    "4",
    "--devices",
    "8",
    "--microbatches",
    "8",
    "--batch",
    "16",
    "--optimizer",
    "adamw",
    "--lr",
    "0.003",
    "--warmup",
    "5",
    "--steps",
    "30",
    "--eval-every",
    "5",
];

/// Trains the Llama pipelined for 20 of its 30 steps with checkpoints (the progress bar and each
/// step's loss next to the unpipelined one shown), resumes it from the checkpoint for the last
/// 10, and checks that those losses equal an uninterrupted run's bit for bit.
fn train_llama() -> anyhow::Result<()> {
    let root = cmd::workspace_root();
    let dir = root.join("target").join("demo-checkpoints");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    let dir_arg = dir.to_string_lossy().into_owned();
    cmd::step(
        "demo: training a Llama-style decoder (1.06M parameters, examples/data/llama-1m.toml) \
         pipelined over 4 MPMD groups x 2 devices under 1F1B, AdamW with warm-up and cosine; \
         20 of its 30 steps, a checkpoint every 10 and the loss curve as SVG",
    );
    let mut first = TRAIN.to_vec();
    first.extend([
        "--checkpoint-dir",
        &dir_arg,
        "--checkpoint-every",
        "10",
        "--stop-after",
        "20",
    ]);
    tessera_debug(&root, &first)?;
    cmd::step("demo: resuming from the step-20 checkpoint for steps 21 to 30");
    let mut resumed = TRAIN.to_vec();
    resumed.extend(["--resume", &dir_arg, "--no-reference", "--json"]);
    let resumed = tessera_debug_json(&root, &resumed)?;
    cmd::step("demo: the same 30 steps uninterrupted, to compare");
    let mut whole = TRAIN.to_vec();
    whole.extend(["--no-reference", "--json"]);
    let whole = tessera_debug_json(&root, &whole)?;
    let losses = |v: &serde_json::Value| -> Vec<f64> {
        v["losses"].as_array().map_or(Vec::new(), |a| {
            a.iter().filter_map(|x| x.as_f64()).collect()
        })
    };
    let (after, all) = (losses(&resumed), losses(&whole));
    if after.len() != 10 || all.len() != 30 || after[..] != all[20..] {
        bail!(
            "the resumed losses {after:?} differ from the uninterrupted run's {:?}",
            all.get(20..)
        );
    }
    println!(
        "resumed steps 21-30 equal the uninterrupted run bit for bit: {:?}",
        after.iter().map(|l| format!("{l:.6}")).collect::<Vec<_>>()
    );
    println!(
        "checkpoints and the loss curve: {} (loss.svg); the resumed run's eval losses: {}",
        dir.display(),
        resumed["eval_losses"]
    );
    Ok(())
}

fn tessera_command(root: &Path, args: &[&str]) -> Command {
    let mut all = vec!["run", "--quiet", "--package", "tessera", "--"];
    all.extend_from_slice(args);
    let mut command = cmd::cargo_command(&all);
    command.current_dir(root).stdin(Stdio::null());
    command
}

/// Runs the debug `tessera` with the terminal as its output (so its progress bar shows).
fn tessera_debug(root: &Path, args: &[&str]) -> anyhow::Result<()> {
    cmd::run(&mut tessera_command(root, args))
}

/// Runs the debug `tessera` and reads the JSON summary of its last line.
fn tessera_debug_json(root: &Path, args: &[&str]) -> anyhow::Result<serde_json::Value> {
    let mut command = tessera_command(root, args);
    command.stderr(Stdio::inherit());
    let out = command
        .output()
        .with_context(|| format!("could not start {command:?}"))?;
    if !out.status.success() {
        bail!("{command:?} failed ({})", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or_default())
        .with_context(|| format!("{command:?} printed no JSON summary"))
}
