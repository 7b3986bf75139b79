//! `tessera train --model mlp` end to end on 8 CPU devices: pipelined losses equal the
//! unpipelined ones within 1e-4 relative on every step, the loss falls, and each group runs its
//! actions in the schedule's order; bad input is refused before any device work.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_tests::{schedule_names, summary_numbers, tessera_train, train_summary};

fn train(args: &[&str]) -> std::process::Output {
    tessera_train(args)
}

fn summary(args: &[&str]) -> serde_json::Value {
    train_summary(&train(args), &format!("{args:?}"))
}

fn numbers(summary: &serde_json::Value, key: &str) -> Vec<f64> {
    summary_numbers(summary, key)
}

#[test]
fn pipelined_mlp_training_matches_the_unpipelined_run() {
    for (schedule, stages) in [("gpipe", "2"), ("1f1b", "4"), ("zero-bubble", "4")] {
        let s = summary(&[
            "--model",
            "mlp",
            "--schedule",
            schedule,
            "--stages",
            stages,
            "--microbatches",
            "4",
            "--steps",
            "6",
            "--json",
        ]);
        let (losses, reference) = (numbers(&s, "losses"), numbers(&s, "reference_losses"));
        assert_eq!(losses.len(), 6);
        for (a, b) in losses.iter().zip(&reference) {
            assert!(
                (a - b).abs() <= 1e-4 * b.abs(),
                "{schedule}: {a} vs unpipelined {b}"
            );
        }
        assert!(
            losses[5] < losses[0] * 0.5,
            "{schedule}: the loss falls: {losses:?}"
        );
        assert_eq!(s["order_matches_schedule"], true, "{schedule}");
        // Every group (one per stage here) was busy in the last step.
        let busy = numbers(&s, "group_busy_ms");
        assert_eq!(busy.len(), stages.parse::<usize>().unwrap(), "{schedule}");
        assert!(busy.iter().all(|&b| b > 0.0), "{schedule}: {busy:?}");
    }
}

#[test]
fn bad_input_is_refused_before_device_work() {
    let out = train(&["--stages", "4", "--microbatches", "3", "--batch", "64"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not divisible by --microbatches 3"));
    let out = train(&["--stages", "4", "--devices", "6"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a multiple of the 4 MPMD groups"));
    let out = train(&[
        "--schedule",
        "dualpipev",
        "--stages",
        "4",
        "--mpmd-dim",
        "4",
    ]);
    assert!(
        !out.status.success(),
        "DualPipeV needs stages = 2 x mpmd-dim"
    );
    let out = train(&["--model", "bert"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown model `bert`"));
    let out = train(&["--model", "gpt", "--stages", "8"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("8 stages cannot split 4 layers"));
}

#[test]
fn the_byte_level_gpt_trains_pipelined_like_the_unpipelined_run() {
    let s = summary(&[
        "--model",
        "gpt",
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "4",
        "--batch",
        "8",
        "--steps",
        "4",
        "--json",
    ]);
    let (losses, reference) = (numbers(&s, "losses"), numbers(&s, "reference_losses"));
    assert!(
        (losses[0] - 256f64.ln()).abs() < 0.05,
        "an untrained byte model starts near ln 256: {}",
        losses[0]
    );
    for (a, b) in losses.iter().zip(&reference) {
        assert!((a - b).abs() <= 1e-4 * b.abs(), "{a} vs unpipelined {b}");
    }
    assert_eq!(s["order_matches_schedule"], true);
}

/// The model library's decoders (`--model llama`, `--model gpt2`) train pipelined over 4 groups
/// with their stages split at evenly spaced layers, with AdamW (its state kept on the groups
/// with the parameters) or SGD, with or without a warm-up of the learning rate, equal to the
/// unpipelined run, the loss falling from near ln 256.
#[test]
fn library_decoders_train_pipelined_like_the_unpipelined_run() {
    // The Llama warms its learning rate up from 0 over one step, so its first step changes
    // nothing and the second loss equals the first exactly.
    let runs = [
        ("llama", "zero-bubble", "adamw", "0.003", "1"),
        ("gpt2", "1f1b", "sgd", "0.1", "0"),
    ];
    for (model, schedule, optimizer, lr, warmup) in runs {
        let args = [
            "--model",
            model,
            "--schedule",
            schedule,
            "--stages",
            "4",
            "--microbatches",
            "4",
            "--batch",
            "8",
            "--steps",
            "3",
            "--optimizer",
            optimizer,
            "--lr",
            lr,
            "--warmup",
            warmup,
            "--json",
        ];
        let s = summary(&args);
        let (losses, reference) = (numbers(&s, "losses"), numbers(&s, "reference_losses"));
        assert!((losses[0] - 256f64.ln()).abs() < 0.2, "{model}: {losses:?}");
        assert!(losses[2] < losses[0], "{model}: {losses:?}");
        if warmup == "1" {
            // The first step's learning rate is 0: the second loss is that of the initial
            // parameters on the second batch, whatever the peak rate.
            let doubled: Vec<&str> = args
                .iter()
                .zip(std::iter::once(&"").chain(&args))
                .map(|(&arg, &flag)| match flag {
                    "--lr" => "0.006",
                    "--steps" => "2",
                    _ => arg,
                })
                .collect();
            let again = numbers(&summary(&doubled), "losses");
            assert_eq!(again[1], losses[1], "{model}: {losses:?} vs {again:?}");
        }
        for (a, b) in losses.iter().zip(&reference) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs(),
                "{model}: {a} vs unpipelined {b}"
            );
        }
        assert_eq!(s["order_matches_schedule"], true, "{model}");
    }
}

/// `tessera train --model gpt` for one step of 16 micro-batches under `schedule` on `stages`
/// stages over `groups` groups: its memory report.
fn gpt_memory(schedule: &str, stages: &str, groups: &str) -> serde_json::Value {
    let s = summary(&[
        "--model",
        "gpt",
        "--schedule",
        schedule,
        "--stages",
        stages,
        "--mpmd-dim",
        groups,
        "--microbatches",
        "16",
        "--batch",
        "64",
        "--steps",
        "1",
        "--json",
    ]);
    s["memory"].clone()
}

/// Every group's measured peak live bytes is within 10% of the schedule's prediction.
fn assert_bytes_predicted(schedule: &str, memory: &serde_json::Value) {
    for group in memory["groups"].as_array().unwrap() {
        let measured = group["peak_live_bytes"].as_f64().unwrap();
        let predicted = group["predicted_peak_live_bytes"].as_f64().unwrap();
        assert!(
            measured > 0.0 && (measured - predicted).abs() <= 0.1 * measured,
            "{schedule}, group {}: measured {measured} bytes, predicted {predicted}",
            group["group"]
        );
    }
}

#[test]
fn gpt_in_flight_micro_batches_follow_the_schedule_and_bytes_its_prediction() {
    for (schedule, first_stage) in [("1f1b", 4), ("gpipe", 16)] {
        let memory = gpt_memory(schedule, "4", "4");
        let stages = memory["stages"].as_array().unwrap();
        assert_eq!(
            stages[0]["peak_inflight_microbatches"], first_stage,
            "{schedule}"
        );
        for stage in stages {
            assert_eq!(
                stage["peak_inflight_microbatches"], stage["predicted_inflight_microbatches"],
                "{schedule}: {stage}"
            );
        }
        assert_bytes_predicted(schedule, &memory);
    }
}

#[test]
fn gpt_peak_live_bytes_follow_the_prediction_under_split_and_interleaved_schedules() {
    for (schedule, groups) in [
        ("zero-bubble", "4"),
        ("interleaved-1f1b", "2"),
        ("dualpipev", "2"),
    ] {
        assert_bytes_predicted(schedule, &gpt_memory(schedule, "4", groups));
    }
}

#[test]
fn tied_embeddings_and_global_norm_clipping_train_like_the_unpipelined_step_under_every_schedule() {
    for name in &schedule_names() {
        // One stage per group, or two (interleaved and V-shaped schedules).
        let several = ["interleaved", "kimi", "dualpipev"]
            .iter()
            .any(|p| name.starts_with(p));
        let groups = if several { "2" } else { "4" };
        let s = summary(&[
            "--model",
            "gpt",
            "--d-model",
            "16",
            "--heads",
            "2",
            "--seq-len",
            "8",
            "--tie-embeddings",
            "--clip-grad-norm",
            "0.5",
            "--optimizer",
            "adamw",
            "--lr",
            "0.003",
            "--schedule",
            name,
            "--stages",
            "4",
            "--mpmd-dim",
            groups,
            "--microbatches",
            "4",
            "--batch",
            "8",
            "--steps",
            "2",
            "--eval-every",
            "0",
            "--json",
        ]);
        let (losses, reference) = (numbers(&s, "losses"), numbers(&s, "reference_losses"));
        assert_eq!(losses.len(), 2, "{name}");
        for (a, b) in losses.iter().zip(&reference) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs(),
                "{name}: {a} vs unpipelined {b}"
            );
        }
        assert_eq!(s["order_matches_schedule"], true, "{name}");
    }
    // Tied: no head parameter (256 x 16 fewer), so the model is smaller than untied.
    let small = [
        "--model",
        "gpt",
        "--d-model",
        "16",
        "--heads",
        "2",
        "--steps",
        "1",
    ];
    let untied = summary(&[&small[..], &["--json"]].concat());
    let tied = summary(&[&small[..], &["--tie-embeddings", "--json"]].concat());
    assert_eq!(
        untied["parameters"].as_i64().unwrap() - tied["parameters"].as_i64().unwrap(),
        256 * 16
    );
    assert!(
        !train(&["--model", "mlp", "--tie-embeddings"])
            .status
            .success()
    );
    let out = train(&["--clip-grad-norm", "0"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--clip-grad-norm 0"));
}

/// Mixed precision from the command line: 50 steps of the 1M Llama computing in bfloat16
/// (float32 parameters and optimizer state) stay within 2% of float32's loss, pipelined like
/// their unpipelined reference (1e-3 in bfloat16), and the bf16 run is another computation.
#[test]
fn bf16_training_stays_within_2_percent_of_float32() {
    let config = tessera_tests::repo_root().join("examples/data/llama-1m.toml");
    let run = |dtype: &str| {
        summary(&[
            "--config",
            config.to_str().unwrap(),
            "--optimizer",
            "adamw",
            "--lr",
            "0.003",
            "--warmup",
            "5",
            "--steps",
            "50",
            "--batch",
            "16",
            "--eval-every",
            "0",
            "--dtype",
            dtype,
            "--json",
        ])
    };
    let (exact, mixed) = (run("f32"), run("bf16"));
    let last = |s: &serde_json::Value| s["final_loss"].as_f64().unwrap();
    let (exact_loss, mixed_loss) = (last(&exact), last(&mixed));
    assert!(
        (mixed_loss - exact_loss).abs() <= 0.02 * exact_loss,
        "bf16 {mixed_loss} vs f32 {exact_loss}"
    );
    assert!(mixed_loss < numbers(&mixed, "losses")[0] * 0.8, "{mixed}");
    assert_ne!(numbers(&exact, "losses"), numbers(&mixed, "losses"));
    assert!(
        mixed["max_relative_difference"].as_f64().unwrap() <= 1e-3,
        "{mixed}"
    );
}

/// `step_phases_ms` says where the median step's time went, in parts that follow one another:
/// each is non-negative, the tasks and the update take time, and they add up to the step.
#[test]
fn step_phases_add_up_to_the_step() {
    let s = summary(&[
        "--model",
        "gpt",
        "--stages",
        "2",
        "--microbatches",
        "2",
        "--batch",
        "8",
        "--steps",
        "4",
        "--optimizer",
        "adamw",
        "--no-reference",
        "--eval-every",
        "0",
        "--json",
    ]);
    let phases = &s["step_phases_ms"];
    let part = |name: &str| {
        phases[name]
            .as_f64()
            .unwrap_or_else(|| panic!("no `{name}` in {phases}"))
    };
    // The parts measured where they run; `other` is what none of them accounts for, reported
    // as the remainder, so it is left out of the sum: the measured parts alone must make the
    // step's wall time.
    let measured = [
        "batch",
        "arguments",
        "microbatches",
        "tasks",
        "pipeline_rest",
        "results",
        "update",
        "release",
        "loss",
    ];
    let wall = part("wall");
    for name in measured {
        assert!(part(name) >= 0.0, "{name}: {phases}");
    }
    let sum: f64 = measured.iter().map(|n| part(n)).sum();
    assert!(
        (wall - sum).abs() <= 0.05 * wall,
        "the measured parts make {sum} ms of a {wall} ms step: {phases}"
    );
    assert!(
        (part("other") - (wall - sum)).abs() <= 1e-6 * wall.max(1.0),
        "{phases}"
    );
    assert!(part("tasks") > 0.0 && part("update") > 0.0, "{phases}");
}

/// On one MPMD group the step is one program (`--no-fuse`: the schedule's tasks), and both
/// equal the unpipelined reference.
#[test]
fn a_step_on_one_group_is_one_program_unless_asked_for_tasks() {
    let base = [
        "--model",
        "gpt",
        "--stages",
        "2",
        "--mpmd-dim",
        "1",
        "--schedule",
        "interleaved-1f1b",
        "--microbatches",
        "2",
        "--batch",
        "8",
        "--steps",
        "3",
        "--optimizer",
        "adamw",
        "--eval-every",
        "0",
        "--json",
    ];
    let fused = summary(&base);
    assert_eq!(fused["order_matches_schedule"], serde_json::Value::Null);
    assert!(
        fused["max_relative_difference"].as_f64().unwrap() <= 1e-6,
        "{fused}"
    );
    // One program: its run is the `tasks` phase; no loop rest around it.
    let phase = |s: &serde_json::Value, name: &str| s["step_phases_ms"][name].as_f64().unwrap();
    assert!(phase(&fused, "tasks") > 0.0, "{fused}");
    assert_eq!(phase(&fused, "pipeline_rest"), 0.0, "{fused}");
    let mut with_tasks = base.to_vec();
    with_tasks.push("--no-fuse");
    let tasks = summary(&with_tasks);
    assert_eq!(tasks["order_matches_schedule"], true, "{tasks}");
    assert!(phase(&tasks, "update") > 0.0, "{tasks}");
    let (a, b) = (numbers(&fused, "losses"), numbers(&tasks, "losses"));
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-5 * y.abs(), "fused {x} vs tasks {y}");
    }
}

#[test]
fn xla_options_reach_the_compiler_and_bad_ones_are_named() {
    let dump = std::env::temp_dir().join(format!("tessera-train-dump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dump);
    let option = format!("xla_dump_to={}", dump.display());
    let base = [
        "--model",
        "mlp",
        "--stages",
        "2",
        "--schedule",
        "gpipe",
        "--steps",
        "1",
    ];
    let mut args = base.to_vec();
    args.extend(["--xla-option", &option, "--json"]);
    let s = summary(&args);
    assert_eq!(numbers(&s, "losses").len(), 1);
    let dumped = std::fs::read_dir(&dump).map(|d| d.count()).unwrap_or(0);
    assert!(dumped > 0, "XLA wrote nothing to {}", dump.display());
    std::fs::remove_dir_all(&dump).unwrap();

    let mut args = base.to_vec();
    args.extend(["--xla-option", "xla_no_such_option=true"]);
    let out = train(&args);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("xla_no_such_option"), "{err}");
    let mut args = base.to_vec();
    args.extend(["--xla-option", "no-equals-sign"]);
    let err = String::from_utf8_lossy(&train(&args).stderr).into_owned();
    assert!(err.contains("write NAME=VALUE"), "{err}");
    let err = String::from_utf8_lossy(&train(&["--checkpoint-async"]).stderr).into_owned();
    assert!(
        err.contains("--checkpoint-async needs --checkpoint-dir"),
        "{err}"
    );
}
