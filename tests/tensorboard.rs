//! `tessera train --tensorboard DIR`: a run stopped after a checkpoint and resumed writes two
//! event files into DIR that TensorBoard's own reader (`EventAccumulator`, from the pinned
//! `tensorboard` that `cargo xtask test` installs in `target/tb-venv`) reads as one run: the
//! steps 1..N with `--json`'s losses, the eval losses, the learning rate, and the peak bytes per
//! group.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera_tests::{repo_root, summary_numbers, tessera_train, train_summary};

/// The environment variable `cargo xtask test` sets to the Python that has `tensorboard`.
const PYTHON_VAR: &str = "TESSERA_TENSORBOARD_PYTHON";

/// A small Llama on two groups (so the step runs the schedule's tasks and reports memory per
/// group), as in tests/train_checkpoints.rs.
const SMALL: &[&str] = &[
    "--model",
    "llama",
    "--layers",
    "2",
    "--heads",
    "2",
    "--d-model",
    "32",
    "--seq-len",
    "16",
    "--stages",
    "2",
    "--microbatches",
    "2",
    "--batch",
    "4",
    "--optimizer",
    "adamw",
    "--lr",
    "0.01",
    "--warmup",
    "2",
    "--steps",
    "5",
    "--eval-every",
    "2",
    "--no-reference",
    "--json",
];

fn summary(args: &[&str]) -> serde_json::Value {
    let all: Vec<&str> = SMALL.iter().chain(args).copied().collect();
    train_summary(&tessera_train(&all), &format!("{args:?}"))
}

/// A fresh directory for one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tessera-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The Python with `tensorboard` installed: `$TESSERA_TENSORBOARD_PYTHON` (set by
/// `cargo xtask test`), else `target/tb-venv/bin/python` (made by `cargo xtask setup`).
fn tensorboard_python() -> PathBuf {
    if let Some(python) = std::env::var_os(PYTHON_VAR) {
        return PathBuf::from(python);
    }
    let venv = repo_root().join("target/tb-venv/bin/python");
    assert!(
        venv.is_file(),
        "this test reads event files with TensorBoard's own reader, and finds no Python with \
         tensorboard: {PYTHON_VAR} is unset and {} is missing. Run `cargo xtask setup` (it \
         installs the pinned tensorboard there) or `cargo xtask test`",
        venv.display()
    );
    venv
}

/// Every scalar series in `dir` as TensorBoard reads it: `{tag: [[step, value], ...]}`.
fn read_with_tensorboard(dir: &str) -> serde_json::Value {
    const SCRIPT: &str = r#"
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
print(json.dumps({tag: [[e.step, e.value] for e in acc.Scalars(tag)]
                  for tag in acc.Tags()["scalars"]}))
"#;
    let python = tensorboard_python();
    let out = Command::new(&python)
        .args(["-c", SCRIPT, dir])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    assert!(
        out.status.success(),
        "TensorBoard's reader failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("TensorBoard's reader printed no JSON ({e}): {stdout}"))
}

/// The `(step, value)` pairs of one series.
fn series(scalars: &serde_json::Value, tag: &str) -> Vec<(u64, f64)> {
    scalars[tag]
        .as_array()
        .unwrap_or_else(|| panic!("no scalar `{tag}` in {scalars}"))
        .iter()
        .map(|p| (p[0].as_u64().unwrap(), p[1].as_f64().unwrap()))
        .collect()
}

/// `values` as TensorBoard stores them (float32).
fn as_f32(values: impl IntoIterator<Item = f64>) -> Vec<f64> {
    values.into_iter().map(|v| f64::from(v as f32)).collect()
}

/// The `(step, loss)` pairs of a summary's `eval_losses`.
fn eval_losses(summary: &serde_json::Value) -> Vec<(u64, f64)> {
    summary["eval_losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_u64().unwrap(), p[1].as_f64().unwrap()))
        .collect()
}

#[test]
fn a_resumed_run_writes_the_whole_run_for_tensorboard() {
    let scratch = Scratch::new("tensorboard");
    let (ckpt, board) = (scratch.path("ckpt"), scratch.path("board"));
    let first = summary(&[
        "--checkpoint-dir",
        &ckpt,
        "--stop-after",
        "3",
        "--tensorboard",
        &board,
    ]);
    let rest = summary(&["--resume", &ckpt, "--tensorboard", &board]);
    let files: Vec<_> = std::fs::read_dir(&board)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files.len(), 2, "one event file per invocation: {files:?}");
    assert!(
        files
            .iter()
            .all(|f| f.starts_with("events.out.tfevents.") && f.ends_with(".tessera")),
        "{files:?}"
    );

    let scalars = read_with_tensorboard(&board);
    let loss = series(&scalars, "train/loss");
    let steps: Vec<u64> = loss.iter().map(|&(s, _)| s).collect();
    assert_eq!(steps, vec![1, 2, 3, 4, 5]);
    let json_losses = summary_numbers(&first, "losses")
        .into_iter()
        .chain(summary_numbers(&rest, "losses"));
    assert_eq!(
        loss.iter().map(|&(_, l)| l).collect::<Vec<_>>(),
        as_f32(json_losses)
    );

    let evals: Vec<(u64, f64)> = eval_losses(&first)
        .into_iter()
        .chain(eval_losses(&rest))
        .map(|(s, l)| (s, f64::from(l as f32)))
        .collect();
    assert!(!evals.is_empty());
    assert_eq!(series(&scalars, "eval/loss"), evals);

    for tag in [
        "train/learning_rate",
        "train/tokens_per_second",
        "train/step_ms",
    ] {
        let got = series(&scalars, tag);
        assert_eq!(
            got.iter().map(|&(s, _)| s).collect::<Vec<_>>(),
            steps,
            "{tag}"
        );
        assert!(
            got.iter().all(|&(_, v)| v.is_finite() && v >= 0.0),
            "{tag}: {got:?}"
        );
    }
    // Warm-up over 2 steps, from 0 up to --lr 0.01: the first step's rate is 0, then it rises.
    let lr = series(&scalars, "train/learning_rate");
    assert_eq!(lr[0].1, 0.0);
    assert!(lr[1].1 > 0.0 && lr[1].1 <= f64::from(0.01f32), "{lr:?}");

    // Each invocation's last step carries the peak bytes per group that --json reports.
    for (summary, step) in [(&first, 3), (&rest, 5)] {
        let groups = summary["memory"]["groups"].as_array().unwrap();
        assert_eq!(groups.len(), 2, "two MPMD groups: {}", summary["memory"]);
        for group in groups {
            let g = group["group"].as_u64().unwrap();
            let bytes = group["peak_live_bytes"].as_f64().unwrap();
            let got = series(&scalars, &format!("memory/group_{g}_peak_bytes"));
            assert!(got.contains(&(step, f64::from(bytes as f32))), "{got:?}");
        }
    }
}

#[test]
fn an_unwritable_directory_is_refused_before_training() {
    let scratch = Scratch::new("tensorboard-refused");
    let file = scratch.path("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let board = Path::new(&file).join("board");
    let all: Vec<&str> = SMALL
        .iter()
        .copied()
        .chain(["--tensorboard", board.to_str().unwrap()])
        .collect();
    let out = tessera_train(&all);
    assert!(
        !out.status.success(),
        "a directory inside a file was accepted"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--tensorboard") && stderr.contains("cannot write event files there"),
        "{stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("\"losses\""),
        "it trained before refusing"
    );
}
