//! The demo's multi-process step: the byte-level GPT trained by `mpirun -n 4` (one rank per MPMD
//! group, 2 devices each) and by one process, their losses compared bit for bit. The job saves
//! a checkpoint after step 5 (each rank writing its group's blocks, in the background) and stops,
//! then a second job resumes from it for steps 6 to 10.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

use crate::cmd::{self, step};

/// The training run both sides make.
const TRAIN: &[&str] = &[
    "train",
    "--model",
    "gpt",
    "--schedule",
    "1f1b",
    "--stages",
    "4",
    "--microbatches",
    "8",
    "--devices",
    "8",
    "--steps",
    "10",
    "--json",
];

fn tessera_bin() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| cmd::workspace_root().join("target"))
        .join("debug")
        .join("tessera")
}

/// The `losses` of the JSON summary a run prints as its last line.
fn losses(command: &mut Command, what: &str) -> anyhow::Result<Vec<f64>> {
    command
        .current_dir(cmd::workspace_root())
        .env("TF_CPP_MIN_LOG_LEVEL", "2")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    let out = command
        .output()
        .with_context(|| format!("could not start {what}"))?;
    if !out.status.success() {
        bail!("{what} failed ({})", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: serde_json::Value = serde_json::from_str(text.lines().last().unwrap_or_default())
        .with_context(|| format!("{what} printed no JSON summary"))?;
    summary["losses"]
        .as_array()
        .context("the summary has no losses")?
        .iter()
        .map(|l| l.as_f64().context("a loss is not a number"))
        .collect()
}

/// Trains the GPT under `mpirun` with 4 ranks x 2 devices and in one process, and checks that
/// the losses are equal bit for bit.
pub fn run() -> anyhow::Result<()> {
    step(
        "demo: the same GPT training as an MPI job, `mpirun -n 4 tessera train ...` (one process per MPMD group, 2 devices each), against one process",
    );
    cmd::cargo(&["build", "--quiet", "--package", "tessera"])?;
    let bin = tessera_bin();
    let mut one = Command::new(&bin);
    one.args(TRAIN);
    crate::compile_count::attach(&mut one);
    let alone = losses(&mut one, "the one-process run")?;
    let dir = cmd::workspace_root().join("target/demo-mpi-checkpoints");
    let _ = std::fs::remove_dir_all(&dir);
    let job_run = |extra: &[&str], what: &str| {
        let mut mpirun = Command::new("mpirun");
        crate::compile_count::attach(&mut mpirun);
        mpirun
            .args(["--allow-run-as-root", "--oversubscribe", "-n", "4"])
            .arg(&bin)
            .args(TRAIN)
            .args(extra);
        losses(&mut mpirun, what)
    };
    let d = dir.to_string_lossy().into_owned();
    let save = [
        "--checkpoint-dir",
        &d,
        "--checkpoint-every",
        "5",
        "--stop-after",
        "5",
    ];
    let mut job = job_run(
        &[&save[..], &["--checkpoint-async"]].concat(),
        "the 4-rank MPI job's first 5 steps",
    )?;
    let saved = dir.join("step-00000005");
    let files = std::fs::read_dir(&saved)
        .with_context(|| format!("the job saved no checkpoint {}", saved.display()))?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".safetensors"))
        .count();
    println!(
        "the job saved {} after step 5: {files} files, each rank writing the blocks its group holds",
        saved.display()
    );
    job.extend(job_run(
        &["--resume", &d],
        "the 4-rank MPI job resumed for steps 6 to 10",
    )?);
    for (step, (a, b)) in alone.iter().zip(&job).enumerate() {
        println!(
            "step {:>3}  one process {a:.9}  4 MPI ranks {b:.9}",
            step + 1
        );
    }
    let same = alone.len() == job.len()
        && alone
            .iter()
            .zip(&job)
            .all(|(a, b)| a.to_bits() == b.to_bits());
    if !same {
        bail!("the 4-rank MPI job's losses differ from the one-process run's");
    }
    println!(
        "the 4-rank MPI job's losses (saved after step 5 and resumed) equal the one-process run's \
         bit for bit"
    );
    Ok(())
}
