//! Checkpoints of multi-process and sharded runs: a 4-rank job saved (in the background) and
//! resumed gives the uninterrupted job's losses bit for bit; its checkpoint resumes in one
//! process on another number of stages, and a sharded one-process checkpoint resumes under 2
//! ranks; a rank killed with SIGKILL in the middle of a save leaves the previous checkpoint
//! complete, and resuming from it gives the uninterrupted losses.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tessera_tests::mpi_launch::{Ended, mpirun, run_alone};
use tessera_tests::tessera_bin;

const LIMIT: Duration = Duration::from_secs(300);

/// `tessera train` of the GPT preset over 8 devices, with `extra` options.
fn gpt(stages: &str, extra: &[&str]) -> Vec<String> {
    let base = [
        "train",
        "--model",
        "gpt",
        "--schedule",
        "1f1b",
        "--stages",
        stages,
        "--microbatches",
        "8",
        "--devices",
        "8",
        "--json",
    ];
    base.iter().chain(extra).map(|s| s.to_string()).collect()
}

/// Runs `args` as a job of `ranks` ranks, with `env`.
fn job(ranks: usize, args: &[String], env: &[(&str, &str)]) -> Ended {
    let bin = tessera_bin();
    let n = ranks.to_string();
    let mut launch = vec!["-n", &n, bin.to_str().unwrap()];
    launch.extend(args.iter().map(String::as_str));
    mpirun(&launch, env, LIMIT, None)
}

/// Runs `args` in one process; its `--json` summary.
fn alone(args: &[String]) -> serde_json::Value {
    let out = run_alone(args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    summary(&stdout)
}

fn summary(stdout: &str) -> serde_json::Value {
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("the last line is not the JSON summary ({e}): {stdout}"))
}

/// The `losses` of a successful job.
fn losses_of(job: &Ended) -> Vec<f64> {
    assert!(job.status.success(), "{}{}", job.stdout, job.stderr);
    numbers(&summary(&job.stdout)["losses"])
}

fn numbers(value: &serde_json::Value) -> Vec<f64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_f64().unwrap())
        .collect()
}

/// A fresh scratch directory for checkpoints.
fn fresh(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-mpi-ckpt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn manifest(folder: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(folder.join("manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-r")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

fn assert_close(got: f64, want: f64, what: &str) {
    let relative = (got - want).abs() / want.abs().max(1e-30);
    assert!(
        relative <= 1e-5,
        "{what}: {got} against {want} ({relative:e})"
    );
}

#[test]
fn a_four_rank_run_saved_in_the_background_resumes_bit_for_bit_and_on_two_stages() {
    // AdamW: its moments are in the checkpoint, and a resume that lost them would change every
    // loss after the first resumed one.
    let gpt = |stages: &str, extra: &[&str]| {
        let mut with_adam = vec!["--optimizer", "adamw"];
        with_adam.extend(extra);
        gpt(stages, &with_adam)
    };
    let full = losses_of(&job(4, &gpt("4", &["--steps", "10"]), &[]));
    assert_eq!(full.len(), 10);
    let dir = fresh("four");
    let d = dir.to_str().unwrap();
    let first = job(
        4,
        &gpt(
            "4",
            &[
                "--steps",
                "10",
                "--checkpoint-dir",
                d,
                "--checkpoint-every",
                "5",
                "--stop-after",
                "5",
                "--checkpoint-async",
            ],
        ),
        &[],
    );
    assert_eq!(losses_of(&first), full[..5]);
    // Every rank wrote its own blocks; the manifest lists every tensor and file.
    let folder = dir.join("step-00000005");
    let m = manifest(&folder);
    let files: Vec<&String> = m["files"].as_object().unwrap().keys().collect();
    for rank in 0..4 {
        let name = format!("params.rank-{rank:05}-of-00004.safetensors");
        assert!(files.iter().any(|f| **f == name), "{files:?}");
    }
    let tensors = m["tensors"].as_object().unwrap();
    assert!(
        tensors.contains_key("params/embed.tokens.table"),
        "{:?}",
        tensors.keys()
    );
    for (name, t) in tensors {
        assert!(!t["blocks"].as_array().unwrap().is_empty(), "{name}");
    }
    let one_process_copy = fresh("four-copy");
    copy_dir(&dir, &one_process_copy);

    let resumed = job(4, &gpt("4", &["--steps", "10", "--resume", d]), &[]);
    assert_eq!(losses_of(&resumed), full[5..], "{}", resumed.stderr);

    // The same checkpoint in one process, pipelined over 2 stages instead of 4.
    let two = alone(&gpt(
        "2",
        &[
            "--steps",
            "10",
            "--resume",
            one_process_copy.to_str().unwrap(),
        ],
    ));
    let two = numbers(&two["losses"]);
    assert_eq!(two.len(), 5);
    // Another split sums in another order: close, not bit for bit, at every resumed step.
    for (k, (&got, &want)) in two.iter().zip(&full[5..]).enumerate() {
        assert_close(got, want, &format!("resumed step {} on 2 stages", 6 + k));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&one_process_copy);
}

#[test]
fn a_sharded_one_process_checkpoint_resumes_under_two_ranks() {
    let mesh = ["--mesh", "stage=2,data=2,model=2", "--steps", "6"];
    let full = numbers(&alone(&gpt("2", &mesh))["losses"]);
    let dir = fresh("sharded");
    let d = dir.to_str().unwrap();
    let mut first = mesh.to_vec();
    first.extend(["--checkpoint-dir", d, "--stop-after", "3"]);
    let saved = numbers(&alone(&gpt("2", &first))["losses"]);
    assert_eq!(saved, full[..3]);
    // Sharded tensors are stored as their distinct blocks, not gathered whole.
    let m = manifest(&dir.join("step-00000003"));
    let split = m["tensors"]
        .as_object()
        .unwrap()
        .values()
        .filter(|t| t["blocks"].as_array().unwrap().len() > 1)
        .count();
    assert!(split > 0, "no tensor was written as blocks: {m}");

    let mut again = mesh.to_vec();
    again.extend(["--resume", d]);
    let resumed = losses_of(&job(2, &gpt("2", &again), &[]));
    assert_eq!(resumed.len(), 3);
    for (k, (got, want)) in resumed.iter().zip(&full[3..]).enumerate() {
        assert_close(*got, *want, &format!("resumed step {}", k + 4));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_rank_killed_during_a_save_leaves_the_previous_checkpoint_to_resume_from() {
    let full = losses_of(&job(4, &gpt("4", &["--steps", "6"]), &[]));
    let dir = fresh("killed");
    let d = dir.to_str().unwrap();
    let saving = [
        "--steps",
        "6",
        "--checkpoint-dir",
        d,
        "--checkpoint-every",
        "2",
    ];
    let killed = job(
        4,
        &gpt("4", &saving),
        &[("TESSERA_CHECKPOINT_FAULT", "kill@1:4")],
    );
    assert!(!killed.status.success(), "{}", killed.stderr);
    assert!(killed.stderr.contains("saving step 4"), "{}", killed.stderr);
    // Step 2 is complete; step 4 is a torn temporary folder.
    let names = entries(&dir);
    assert!(names.contains(&"step-00000002".to_owned()), "{names:?}");
    assert!(
        names.contains(&".step-00000004.partial".to_owned()),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n == "step-00000004"), "{names:?}");

    let resumed = job(4, &gpt("4", &["--steps", "6", "--resume", d]), &[]);
    assert_eq!(losses_of(&resumed), full[2..], "{}", resumed.stderr);
    let names = entries(&dir);
    assert!(
        !names.iter().any(|n| n.contains(".partial")),
        "the torn checkpoint is still there: {names:?}"
    );
    assert!(names.contains(&"step-00000006".to_owned()), "{names:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ranks_resuming_without_the_reference_read_their_part_and_train_on_bit_for_bit() {
    // AdamW (parameters and two moments), the token table tied between the first and the last
    // stage; without --no-reference every rank but 0 reads only the tensors its groups use.
    let common = [
        "--steps",
        "6",
        "--optimizer",
        "adamw",
        "--tie-embeddings",
        "--no-reference",
    ];
    let full = losses_of(&job(4, &gpt("4", &common), &[]));
    let dir = fresh("partial");
    let d = dir.to_str().unwrap();
    let mut first = common.to_vec();
    first.extend(["--checkpoint-dir", d, "--stop-after", "3"]);
    assert_eq!(losses_of(&job(4, &gpt("4", &first), &[])), full[..3]);
    let mut again = common.to_vec();
    again.extend(["--resume", d]);
    let resumed = job(4, &gpt("4", &again), &[]);
    assert_eq!(losses_of(&resumed), full[3..], "{}", resumed.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_job_of_one_rank_saves_and_resumes_too() {
    let full = losses_of(&job(1, &gpt("1", &["--steps", "4"]), &[]));
    let dir = fresh("one-rank");
    let d = dir.to_str().unwrap();
    for mode in [None, Some("--checkpoint-async")] {
        let _ = std::fs::remove_dir_all(&dir);
        let mut first = vec!["--steps", "4", "--checkpoint-dir", d, "--stop-after", "2"];
        first.extend(mode);
        assert_eq!(losses_of(&job(1, &gpt("1", &first), &[])), full[..2]);
        let resumed = job(1, &gpt("1", &["--steps", "4", "--resume", d]), &[]);
        assert_eq!(
            losses_of(&resumed),
            full[2..],
            "{mode:?}: {}",
            resumed.stderr
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
