//! `tessera train` as a user runs it for real: checkpoints, resuming, config files and the eval
//! loss, on the model library's Llama-style decoder over 8 CPU devices. A run stopped after a
//! checkpoint and resumed gives the uninterrupted run's losses bit for bit; bad checkpoint
//! directories, configs and resumes are refused naming the file and the fix.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera_tests::{summary_numbers, tessera_bin, tessera_train, train_summary};

/// A small Llama trained with AdamW and warm-up, quick enough for a test.
const SMALL: &[&str] = &[
    "--model",
    "llama",
    "--layers",
    "2",
    "--heads",
    "2",
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

/// Runs the small model of width 32 over 16-token windows, unless `args` give a width or a
/// config file.
fn train(args: &[&str]) -> std::process::Output {
    let mut sizes = vec![];
    if !args.contains(&"--d-model") && !args.contains(&"--config") {
        sizes.extend(["--d-model", "32", "--seq-len", "16"]);
    }
    let all: Vec<&str> = SMALL
        .iter()
        .copied()
        .chain(sizes)
        .chain(args.iter().copied())
        .collect();
    tessera_train(&all)
}

fn summary(args: &[&str]) -> serde_json::Value {
    train_summary(&train(args), &format!("{args:?}"))
}

/// The error of a run that must fail.
fn refusal(args: &[&str]) -> String {
    let out = train(args);
    assert!(!out.status.success(), "{args:?} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
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

fn numbers(summary: &serde_json::Value, key: &str) -> Vec<f64> {
    summary_numbers(summary, key)
}

#[test]
fn a_resumed_run_gives_the_uninterrupted_losses_bit_for_bit() {
    let scratch = Scratch::new("resume");
    let dir = scratch.path("ckpt");
    let whole = summary(&[]);
    let first = summary(&["--checkpoint-dir", &dir, "--stop-after", "3"]);
    assert_eq!(numbers(&first, "steps"), vec![1.0, 2.0, 3.0]);
    assert!(
        Path::new(&dir)
            .join("step-00000003/params.safetensors")
            .is_file()
    );
    assert!(Path::new(&dir).join("loss.svg").is_file());
    let rest = summary(&["--resume", &dir]);
    assert_eq!(numbers(&rest, "steps"), vec![4.0, 5.0]);
    let losses = numbers(&whole, "losses");
    assert_eq!(numbers(&first, "losses"), losses[..3]);
    assert_eq!(numbers(&rest, "losses"), losses[3..]);
    // The eval loss of the last step is the uninterrupted run's too.
    assert_eq!(
        rest["eval_losses"].as_array().unwrap().last(),
        whole["eval_losses"].as_array().unwrap().last()
    );
    // The resumed run saved its own last step into the same directory.
    assert!(
        Path::new(&dir)
            .join("step-00000005/manifest.json")
            .is_file()
    );
    // Its history covers the whole run from step 1, as the uninterrupted run's does; so does
    // the manifest it wrote.
    assert_eq!(rest["history"]["losses"], whole["history"]["losses"]);
    // Every evaluation of the uninterrupted run is there (the first part also evaluated at
    // the step it stopped after).
    let evals = rest["history"]["eval_losses"].as_array().unwrap();
    for eval in whole["history"]["eval_losses"].as_array().unwrap() {
        assert!(evals.contains(eval), "{eval} missing from {evals:?}");
    }
    let history = rest["history"]["losses"].as_array().unwrap();
    let steps: Vec<f64> = history.iter().map(|p| p[0].as_f64().unwrap()).collect();
    assert_eq!(steps, vec![1.0, 2.0, 3.0, 4.0, 5.0]);
    let kept =
        std::fs::read_to_string(Path::new(&dir).join("step-00000005/manifest.json")).unwrap();
    let kept: serde_json::Value = serde_json::from_str(&kept).unwrap();
    assert_eq!(kept["history"], rest["history"]);
}

#[test]
fn checkpoints_of_another_model_or_none_at_all_are_refused() {
    let scratch = Scratch::new("refuse");
    let empty = scratch.path("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let err = refusal(&["--resume", &empty]);
    assert!(
        err.contains("no checkpoint there") && err.contains(&empty),
        "{err}"
    );

    let dir = scratch.path("ckpt");
    summary(&["--checkpoint-dir", &dir, "--stop-after", "1"]);
    // A new run would overwrite that run's checkpoints.
    let err = refusal(&["--checkpoint-dir", &dir]);
    assert!(
        err.contains("already holds checkpoints") && err.contains("--resume"),
        "{err}"
    );
    let err = refusal(&["--resume", &dir, "--d-model", "64", "--seq-len", "16"]);
    assert!(
        err.contains("holds a run of") && err.contains("d_model=32"),
        "{err}"
    );

    // Same description, other tensors: the manifest is edited to claim the wider model.
    let manifest = Path::new(&dir).join("step-00000001/manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("d_model=32", "d_model=64")
            .replace("ffn=88", "ffn=176"),
    )
    .unwrap();
    let err = refusal(&["--resume", &dir, "--d-model", "64", "--seq-len", "16"]);
    assert!(
        err.contains("does not fit this model") && err.contains("embed"),
        "{err}"
    );
}

#[test]
fn an_unwritable_checkpoint_directory_is_refused_before_training() {
    let scratch = Scratch::new("unwritable");
    let file = scratch.path("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let below = format!("{file}/ckpt");
    let err = refusal(&["--checkpoint-dir", &below]);
    assert!(
        err.contains("cannot write checkpoints to") && err.contains(&below),
        "{err}"
    );
    assert!(!err.contains("step 1"), "it trained first: {err}");
}

#[test]
fn a_config_file_sets_the_sizes_and_a_bad_one_is_named() {
    let scratch = Scratch::new("config");
    let good = scratch.path("model.toml");
    std::fs::write(
        &good,
        "model = \"gpt2\"\nlayers = 2\nd_model = 48\nheads = 3\nseq_len = 8\n",
    )
    .unwrap();
    // The file sets d_model 48 and seq_len 8; the flags of SMALL win over its heads (2) and
    // model (llama).
    let s = summary(&["--config", &good]);
    // Llama with d 48, ffn 128, 2 layers, vocab 256: embeddings, blocks, final norm and head.
    let (d, f, v) = (48, 128, 256);
    let block = 2 * d + 4 * d * d + 3 * d * f;
    assert_eq!(
        s["parameters"].as_i64().unwrap(),
        v * d + 2 * block + d + d * v
    );

    let bad = scratch.path("bad.toml");
    std::fs::write(&bad, "model = \"llama\"\nd_model = 64\nheads = 5\n").unwrap();
    let out = Command::new(tessera_bin())
        .args(["train", "--config", &bad])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains(&bad) && err.contains("must divide"),
        "{err}"
    );
}
