//! Data-parallel stages reduce once per step (`tessera train --grad-reduce per-step`, the
//! default): the collectives a step executes, counted in XLA's optimized programs
//! (`collectives_per_step` of `--json`), do not grow with the micro-batches, each group
//! all-reduces once, and the losses equal those of reducing every micro-batch's gradient
//! (`--grad-reduce per-microbatch`) within 1e-5, for GPT and Llama, with AdamW, with and
//! without FSDP. FSDP stages gather each parameter once per step (`--fsdp-gather per-step`,
//! the default), or in every task and within less memory than plain data parallelism
//! (`--fsdp-gather per-microbatch`).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;

use tessera_tests::{summary_numbers, tessera_train, train_summary};

/// A small decoder over `--mesh stage=2,data=4` (two groups of four data-parallel devices).
fn run(model: &str, microbatches: &str, reduce: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "--model",
        model,
        "--d-model",
        "32",
        "--heads",
        "2",
        "--layers",
        "2",
        "--seq-len",
        "16",
        "--batch",
        "64",
        "--mesh",
        "stage=2,data=4",
        "--stages",
        "2",
        "--microbatches",
        microbatches,
        "--optimizer",
        "adamw",
        "--lr",
        "0.003",
        "--eval-every",
        "0",
        "--grad-reduce",
        reduce,
        "--json",
    ];
    args.extend(extra);
    train_summary(&tessera_train(&args), &args.join(" "))
}

/// `collectives_per_step`: one map of kind → count per group.
fn collectives(s: &serde_json::Value) -> Vec<BTreeMap<String, u64>> {
    serde_json::from_value(s["collectives_per_step"].clone()).unwrap()
}

#[test]
fn reducing_once_per_step_keeps_the_collectives_from_growing_with_the_micro_batches() {
    let steps = ["--steps", "2"];
    for model in ["gpt", "llama"] {
        let eight_run = run(model, "8", "per-step", &steps);
        let eight = collectives(&eight_run);
        let sixteen = collectives(&run(model, "16", "per-step", &steps));
        assert_eq!(eight.len(), 2, "{model}: {eight:?}");
        assert_eq!(
            eight, sixteen,
            "{model}: 8 micro-batches {eight:?}, 16 {sixteen:?}"
        );
        for group in &eight {
            // The gradients, losses and metrics together: one combined all-reduce, and
            // nothing else (a residual of parameters alone is not split, so never gathered).
            let all_reduce = [("all-reduce".to_owned(), 1)].into_iter().collect();
            assert_eq!(group, &all_reduce, "{model}: {eight:?}");
        }
        // Each group's exposed transfer wait is reported, and is part of the step.
        let waits = summary_numbers(&eight_run, "transfer_wait_ms");
        let makespan = eight_run["makespan_ms"].as_f64().unwrap();
        assert_eq!(waits.len(), 2, "{model}: {eight_run}");
        assert!(
            waits.iter().all(|w| (0.0..makespan).contains(w)),
            "{waits:?} {makespan}"
        );
    }
    let steps = ["--steps", "2"];
    // The count sees a reduction per micro-batch where there is one.
    let before = collectives(&run("gpt", "8", "per-microbatch", &steps));
    let after = collectives(&run("gpt", "16", "per-microbatch", &steps));
    for (b, a) in before.iter().zip(&after) {
        assert!(a["all-reduce"] > b["all-reduce"], "{before:?} {after:?}");
        assert!(b["all-reduce"] >= 8, "{before:?}");
    }
}

#[test]
fn reducing_once_per_step_trains_like_reducing_every_micro_batch() {
    for model in ["gpt", "llama"] {
        let lean = ["--fsdp", "--fsdp-gather", "per-microbatch"];
        for fsdp in [&[][..], &["--fsdp"][..], &lean[..]] {
            let mut extra = vec!["--steps", "10"];
            extra.extend(fsdp);
            let what = format!("{model} {fsdp:?}");
            let per_mb = run(model, "8", "per-microbatch", &extra);
            let per_step = run(model, "8", "per-step", &extra);
            assert_eq!(per_step["grad_reduce"], "per-step", "{what}");
            let (want, got) = (
                summary_numbers(&per_mb, "losses"),
                summary_numbers(&per_step, "losses"),
            );
            assert_eq!(got.len(), 10, "{what}");
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-5 * w.abs(),
                    "{what}: {got:?} vs {want:?}"
                );
            }
            // Both still equal the unpipelined step (the run checks it every step).
            assert!(
                per_step["max_relative_difference"].as_f64().unwrap() <= 1e-4,
                "{what}"
            );
        }
    }
}

#[test]
fn fsdp_stages_gather_each_parameter_once_per_step() {
    let steps = ["--steps", "2", "--fsdp"];
    let eight = collectives(&run("gpt", "8", "per-step", &steps));
    let sixteen = collectives(&run("gpt", "16", "per-step", &steps));
    assert_eq!(eight, sixteen, "8 micro-batches {eight:?}, 16 {sixteen:?}");
    // GPT-2 of 2 layers has 29 parameter arrays: the token and position embeddings, 12 per
    // layer (two layer norms, the attention's qkv and output projections, the MLP's two
    // layers, each a weight and a bias), the final layer norm's two and the untied head.
    let count = |g: &BTreeMap<String, u64>, kind: &str| g.get(kind).copied().unwrap_or(0);
    let gathers: u64 = eight.iter().map(|g| count(g, "all-gather")).sum();
    assert!(gathers <= 29, "{eight:?}");
    for group in &eight {
        // Each gradient reduce-scattered once, as its parameter was gathered once; the only
        // all-reduce is the loss's, on the last group.
        assert_eq!(
            count(group, "reduce-scatter"),
            count(group, "all-gather"),
            "{eight:?}"
        );
    }
    assert_eq!(count(&eight[0], "all-reduce"), 0, "{eight:?}");
    assert_eq!(count(&eight[1], "all-reduce"), 1, "{eight:?}");
}

#[test]
fn fsdp_gathered_per_micro_batch_holds_less_than_data_parallelism() {
    let peaks = |s: &serde_json::Value| -> Vec<(f64, f64)> {
        let groups = s["memory"]["groups"].as_array().unwrap();
        let peak = |g: &serde_json::Value, k: &str| g[k].as_f64().unwrap();
        let both = |g| {
            (
                peak(g, "peak_live_bytes"),
                peak(g, "predicted_peak_live_bytes"),
            )
        };
        groups.iter().map(both).collect()
    };
    let steps = ["--steps", "2"];
    let plain = peaks(&run("gpt", "8", "per-step", &steps));
    let lean = ["--steps", "2", "--fsdp", "--fsdp-gather", "per-microbatch"];
    let fsdp = peaks(&run("gpt", "8", "per-step", &lean));
    for ((measured, predicted), (plain, _)) in fsdp.iter().zip(&plain) {
        assert!(measured < plain, "FSDP {fsdp:?}, data parallel {plain:?}");
        assert!((measured - predicted).abs() <= 0.1 * measured, "{fsdp:?}");
    }
}
