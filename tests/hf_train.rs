//! `tessera train --model-dir` on the Hugging Face folders of `tests/data/hf` (see
//! tests/hf_import.rs): the pipelined run starts from the folder's weights and tokenizer, equals
//! its unpipelined reference, exports (`--export-hf`, and `tessera export` from its checkpoint,
//! byte for byte the same) and generates from the export; the data forms (text, JSON Lines,
//! `.bin` with and without a header) of the same tokens train alike; a 2-rank MPI job reads only
//! each rank's share of the weights and exports the same model as one process.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::time::Duration;

use tessera::nn::data::token_files::{self, TokenWidth};
use tessera::nn::hf::HfModel;
use tessera_tests::mpi_launch::{mpirun, run_alone, scratch};
use tessera_tests::{tessera_bin, tessera_last_line};

fn case_dir(name: &str) -> PathBuf {
    tessera_tests::repo_root().join("tests/data/hf").join(name)
}

fn train_args(model: &str, extra: &[&str]) -> Vec<String> {
    let dir = case_dir(model);
    let mut args: Vec<String> = [
        "train",
        "--model-dir",
        dir.to_str().unwrap(),
        "--seq-len",
        "16",
        "--batch",
        "8",
        "--microbatches",
        "4",
        "--stages",
        "2",
        "--devices",
        "2",
        "--steps",
        "3",
        "--optimizer",
        "adamw",
        "--lr",
        "0.001",
        "--json",
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// `args` with `flag`'s value replaced by `value`.
fn with(mut args: Vec<String>, flag: &str, value: &str) -> Vec<String> {
    let at = args.iter().position(|a| a == flag).unwrap();
    args[at + 1] = value.into();
    args
}

fn summary(stdout: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(stdout);
    serde_json::from_str(text.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no JSON summary ({e}): {text}"))
}

fn train(args: &[String]) -> serde_json::Value {
    let out = run_alone(args);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    summary(&out.stdout)
}

fn generate(source: &[&str]) -> Vec<i64> {
    let mut args = vec!["generate"];
    args.extend(source);
    args.extend([
        "--prompt",
        "The quick brown",
        "--max-new-tokens",
        "8",
        "--json",
    ]);
    let line = tessera_last_line(&args);
    let got: serde_json::Value = serde_json::from_str(&line).unwrap();
    got["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect()
}

fn same_files(a: &Path, b: &Path, names: &[&str]) {
    for name in names {
        let (x, y) = (
            std::fs::read(a.join(name)).unwrap(),
            std::fs::read(b.join(name)).unwrap(),
        );
        assert!(
            x == y,
            "{name} differs between {} and {}",
            a.display(),
            b.display()
        );
    }
}

#[test]
fn a_folder_trains_pipelined_exports_and_generates_from_the_export() {
    let (out, ckpt) = (scratch("hf-export"), scratch("hf-ckpt"));
    let args = train_args(
        "llama3_tied",
        &[
            "--export-hf",
            out.to_str().unwrap(),
            "--checkpoint-dir",
            ckpt.to_str().unwrap(),
        ],
    );
    let s = train(&args);
    // The pipelined steps equal the unpipelined reference (the run's own verdict, exit 0) and
    // the loss starts near the random model's (ln 320 = 5.8 for a uniform guess; its weights
    // are far from uniform).
    let losses: Vec<f64> = s["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_f64().unwrap())
        .collect();
    assert_eq!(losses.len(), 3);
    assert!(losses[0] > 3.0 && losses[0] < 12.0, "{losses:?}");
    assert_eq!(s["import"]["params_read"], s["import"]["params"], "{s}");
    assert!(s["import"]["weights_bytes_read"].as_u64().unwrap() > 0);
    // The export is a folder that loads, of trained (changed) weights and the same config.
    let exported = HfModel::open(&out, 16).unwrap();
    let original = HfModel::open(&case_dir("llama3_tied"), 16).unwrap();
    assert_eq!(exported.config.decoder, original.config.decoder);
    let (a, b) = (exported.load_all().unwrap(), original.load_all().unwrap());
    assert_ne!(
        a.leaf("embed.tokens.table").unwrap().to_vec(),
        b.leaf("embed.tokens.table").unwrap().to_vec()
    );
    // `tessera export` of the checkpoint writes the same files; both generate alike.
    let again = scratch("hf-export-again");
    tessera_last_line(&[
        "export",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--hf",
        again.to_str().unwrap(),
    ]);
    same_files(
        &out,
        &again,
        &["model.safetensors", "config.json", "tokenizer.json"],
    );
    let from_export = generate(&["--model-dir", out.to_str().unwrap()]);
    assert_eq!(
        from_export,
        generate(&["--checkpoint", ckpt.to_str().unwrap()])
    );
    assert_eq!(from_export.len(), 8);
}

#[test]
fn text_json_lines_and_token_files_of_the_same_tokens_train_alike() {
    let model = HfModel::open(&case_dir("llama_gqa"), 16).unwrap();
    let text = std::fs::read_to_string(tessera_tests::repo_root().join("README.md")).unwrap();
    let ids = model.tokenizer().unwrap().encode(&text).unwrap();
    let (plain, jsonl, bin, raw) = (
        scratch("data.txt"),
        scratch("data.jsonl"),
        scratch("data.bin"),
        scratch("raw.bin"),
    );
    std::fs::write(&plain, &text).unwrap();
    std::fs::write(&jsonl, format!("{}\n", serde_json::json!({ "text": text }))).unwrap();
    token_files::write_bin(&bin, &ids, TokenWidth::U16).unwrap();
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    std::fs::write(&raw, bytes).unwrap();
    let first_loss = |extra: &[&str]| {
        let mut args = with(
            train_args("llama_gqa", &["--eval-every", "1"]),
            "--steps",
            "1",
        );
        args.extend(extra.iter().map(|s| s.to_string()));
        let s = train(&args);
        (
            s["losses"][0].as_f64().unwrap(),
            s["eval_losses"][0][1].as_f64().unwrap(),
        )
    };
    let want = first_loss(&["--data", plain.to_str().unwrap()]);
    assert_eq!(first_loss(&["--data", jsonl.to_str().unwrap()]), want);
    assert_eq!(first_loss(&["--data", bin.to_str().unwrap()]), want);
    assert_eq!(
        first_loss(&["--data", raw.to_str().unwrap(), "--data-dtype", "u32"]),
        want
    );
    // Ids beyond the model's vocabulary are refused, naming both.
    let mut bad = ids[..40].to_vec();
    bad[5] = 400;
    token_files::write_bin(&bin, &bad, TokenWidth::U16).unwrap();
    let mut args = train_args("llama_gqa", &["--data", bin.to_str().unwrap()]);
    args.push("--no-reference".into());
    let out = run_alone(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("400") && err.contains("320"),
        "{err}"
    );
}

#[test]
fn an_mpi_job_reads_its_share_of_the_weights_and_exports_what_one_process_does() {
    let (one_ckpt, job_ckpt) = (scratch("hf-one"), scratch("hf-job"));
    let base = train_args("llama_gqa", &["--mpmd-dim", "2", "--no-reference"]);
    let mut alone = base.clone();
    alone.extend(["--checkpoint-dir".into(), one_ckpt.to_str().unwrap().into()]);
    let one = train(&alone);
    let mut args = base.clone();
    args.extend(["--checkpoint-dir".into(), job_ckpt.to_str().unwrap().into()]);
    let bin = tessera_bin();
    let mut launch = vec!["-n", "2", bin.to_str().unwrap()];
    launch.extend(args.iter().map(String::as_str));
    let job = mpirun(&launch, &[], Duration::from_secs(300), None);
    assert!(job.status.success(), "{}", job.stderr);
    let many = summary(job.stdout.as_bytes());
    assert_eq!(many["losses"], one["losses"], "bit for bit");
    // Each rank read only the tensors of its group's stage: together the whole model, each
    // less than it.
    let ranks = many["import_per_rank"].as_array().unwrap();
    assert_eq!(ranks.len(), 2, "{many}");
    let total = one["import"]["weights_bytes_read"].as_u64().unwrap();
    let read: Vec<u64> = ranks
        .iter()
        .map(|r| r["weights_bytes_read"].as_u64().unwrap())
        .collect();
    assert!(
        read.iter().all(|&r| r > 0 && r < total),
        "{read:?} of {total}"
    );
    assert_eq!(read.iter().sum::<u64>(), total, "{read:?}");
    // Its checkpoint exports the same model as the one process's, and generates the same.
    let (a, b) = (scratch("hf-one-out"), scratch("hf-job-out"));
    for (ckpt, out) in [(&one_ckpt, &a), (&job_ckpt, &b)] {
        tessera_last_line(&[
            "export",
            "--checkpoint",
            ckpt.to_str().unwrap(),
            "--hf",
            out.to_str().unwrap(),
        ]);
    }
    same_files(&a, &b, &["model.safetensors", "config.json"]);
    assert_eq!(
        generate(&["--model-dir", a.to_str().unwrap()]),
        generate(&["--model-dir", b.to_str().unwrap()])
    );
}

#[test]
fn an_imported_model_trains_with_tensor_parallelism_fsdp_and_in_one_program() {
    // Grouped-query heads split by key/value group over the `model` axis, parameters over
    // `data`; and Qwen2 (q/k/v biases) on one device, where the step is one program.
    let plain = train(&train_args("llama_gqa", &[]));
    let sharded = train(&with(
        train_args("llama_gqa", &["--mesh", "stage=2,data=2,model=2", "--fsdp"]),
        "--devices",
        "8",
    ));
    let first = |s: &serde_json::Value| s["losses"][0].as_f64().unwrap();
    assert!(
        (first(&plain) - first(&sharded)).abs() < 1e-5,
        "{plain} {sharded}"
    );
    let args = with(
        with(train_args("qwen2", &[]), "--stages", "1"),
        "--devices",
        "1",
    );
    let one = train(&args);
    assert_eq!(one["losses"], one["reference_losses"], "{one}");
}
