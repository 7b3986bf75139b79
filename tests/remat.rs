//! Saved residuals and remat policies (`tessera train --remat POLICY`): under every built-in
//! schedule (zero-bubble's split backward included), with tied embeddings, a step whose
//! backward reads its forward's residuals trains like one that recomputes its forward
//! (`nothing_saveable`), within 1e-5, and every stage reports the policy it applied; each
//! policy's peak live bytes follow the memory prediction, recomputing's the least.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_tests::{schedule_names, summary_numbers, tessera_train, train_summary};

fn summary(args: &[&str]) -> serde_json::Value {
    train_summary(&tessera_train(args), &args.join(" "))
}

/// A small tied GPT over 4 stages under `schedule`, with `--remat policy`.
fn run(schedule: &str, policy: &str) -> serde_json::Value {
    run_with(schedule, policy, &[])
}

/// [`run`] with more flags.
fn run_with(schedule: &str, policy: &str, extra: &[&str]) -> serde_json::Value {
    let several = ["interleaved", "kimi", "dualpipev"]
        .iter()
        .any(|p| schedule.starts_with(p));
    let groups = if several { "2" } else { "4" };
    let mut args = vec![
        "--model",
        "gpt",
        "--d-model",
        "16",
        "--heads",
        "2",
        "--seq-len",
        "8",
        "--tie-embeddings",
        "--optimizer",
        "adamw",
        "--lr",
        "0.003",
        "--schedule",
        schedule,
        "--stages",
        "4",
        "--mpmd-dim",
        groups,
        "--microbatches",
        "4",
        "--batch",
        "8",
        "--steps",
        "3",
        "--eval-every",
        "0",
        "--no-reference",
        "--remat",
        policy,
        "--json",
    ];
    args.extend_from_slice(extra);
    summary(&args)
}

/// Every stage applied `policy` (none fell back to recomputing).
fn assert_policy(s: &serde_json::Value, policy: &str, what: &str) {
    let stages = s["remat"].as_array().unwrap();
    assert_eq!(stages.len(), 4, "{what}: {s}");
    for stage in stages {
        assert_eq!(stage["policy"], policy, "{what}: {stage}");
        assert!(stage["fallback"].is_null(), "{what}: {stage}");
    }
}

#[test]
fn every_schedule_saving_residuals_trains_like_recomputing() {
    for name in schedule_names() {
        let recomputing = run(&name, "nothing_saveable");
        assert_policy(&recomputing, "nothing_saveable", &name);
        let want = summary_numbers(&recomputing, "losses");
        // The default saves everything; the dots policies on two schedules (one with the
        // split backward).
        let mut policies = vec!["everything_saveable"];
        if name == "1f1b" || name == "zero-bubble" {
            policies.extend(["dots_saveable", "dots_with_no_batch_dims_saveable"]);
        }
        for policy in policies {
            let s = run(&name, policy);
            assert_policy(&s, policy, &name);
            let got = summary_numbers(&s, "losses");
            assert_eq!(got.len(), 3, "{name}");
            for (a, b) in got.iter().zip(&want) {
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs(),
                    "{name} under {policy}: {a}, recomputing {b}"
                );
            }
            assert_eq!(s["order_matches_schedule"], true, "{name}");
        }
    }
}

/// Under every policy each group peaks within 10% of the prediction, and recomputing
/// (`nothing_saveable`) peaks below saving everything on the busiest group.
#[test]
fn each_policy_peaks_where_predicted_and_recomputing_peaks_lowest() {
    let mut busiest = Vec::new();
    for policy in [
        "everything_saveable",
        "dots_saveable",
        "dots_with_no_batch_dims_saveable",
        "nothing_saveable",
    ] {
        let s = run("1f1b", policy);
        let groups = s["memory"]["groups"].as_array().unwrap();
        assert_eq!(groups.len(), 4, "{policy}: {s}");
        let mut peaks = Vec::new();
        for g in groups {
            let measured = g["peak_live_bytes"].as_f64().unwrap();
            let predicted = g["predicted_peak_live_bytes"].as_f64().unwrap();
            assert!(
                (measured / predicted - 1.0).abs() <= 0.10,
                "{policy}: group {g}: measured {measured}, predicted {predicted}"
            );
            peaks.push(measured);
        }
        busiest.push((policy, peaks.iter().copied().fold(0.0, f64::max)));
    }
    let peak = |name: &str| busiest.iter().find(|(p, _)| *p == name).unwrap().1;
    assert!(
        peak("nothing_saveable") < peak("everything_saveable"),
        "{busiest:?}"
    );
}

/// One group, fused into one program: the policy is a `checkpoint` region around each decoder
/// block, so the module XLA receives holds one `optimization_barrier` per block in the loop
/// (none when saving everything), and the losses equal saving everything's.
#[test]
fn a_step_run_as_one_program_checkpoints_each_block() {
    let layers = 3;
    let mut want: Option<Vec<f64>> = None;
    for policy in ["everything_saveable", "nothing_saveable", "dots_saveable"] {
        let dump = std::env::temp_dir().join(format!(
            "tessera-remat-one-program-{policy}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dump);
        let option = format!("xla_dump_to={}", dump.display());
        let layers_arg = layers.to_string();
        let s = summary(&[
            "--model",
            "llama",
            "--layers",
            &layers_arg,
            "--d-model",
            "32",
            "--heads",
            "2",
            "--seq-len",
            "16",
            "--batch",
            "8",
            "--stages",
            "1",
            "--devices",
            "1",
            "--microbatches",
            "2",
            "--steps",
            "3",
            "--eval-every",
            "0",
            "--no-reference",
            "--remat",
            policy,
            "--xla-option",
            &option,
            "--json",
        ]);
        let barriers: usize = std::fs::read_dir(&dump)
            .unwrap()
            .flatten()
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.ends_with("before_optimizations.txt")
            })
            .map(|e| {
                let text = std::fs::read_to_string(e.path()).unwrap();
                text.matches(" opt-barrier(").count()
            })
            .sum();
        std::fs::remove_dir_all(&dump).unwrap();
        let expected = if policy == "everything_saveable" {
            0
        } else {
            layers
        };
        assert_eq!(barriers, expected, "{policy}");
        let losses = summary_numbers(&s, "losses");
        match &want {
            None => want = Some(losses),
            Some(want) => {
                for (a, b) in losses.iter().zip(want) {
                    assert!((a - b).abs() <= 1e-5 * b.abs(), "{policy}: {a} vs {b}");
                }
            }
        }
    }
}

/// Saved residuals waiting in `pinned_host` memory (`--remat-offload`): the same losses, every
/// group's device peak below keeping them on the device and within 10% of its prediction; a
/// memory the plugin lacks, and offloading in a step run as one program, are refused.
#[test]
fn residuals_offloaded_to_pinned_host_train_alike_and_leave_the_device() {
    let kept = run("1f1b", "everything_saveable");
    let offloaded = run_with(
        "1f1b",
        "everything_saveable",
        &["--remat-offload", "pinned_host"],
    );
    assert_eq!(offloaded["remat_offload"], "pinned_host");
    assert_eq!(
        summary_numbers(&offloaded, "losses"),
        summary_numbers(&kept, "losses")
    );
    let groups = |s: &serde_json::Value| s["memory"]["groups"].as_array().unwrap().clone();
    for (k, o) in groups(&kept).iter().zip(groups(&offloaded).iter()) {
        let peak = |g: &serde_json::Value| g["peak_live_bytes"].as_f64().unwrap();
        let predicted = o["predicted_peak_live_bytes"].as_f64().unwrap();
        assert!(peak(o) < peak(k), "offloaded {o} vs kept {k}");
        assert!((peak(o) / predicted - 1.0).abs() <= 0.10, "{o}");
    }
    let out = tessera_train(&["--stages", "4", "--mpmd-dim", "4", "--remat-offload", "hbm"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("pinned_host"),
        "{err}"
    );
    let out = tessera_train(&[
        "--stages",
        "1",
        "--devices",
        "1",
        "--remat-offload",
        "pinned_host",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--no-fuse"), "{err}");
}

/// `task_ms` names every task kind of every stage with its median time (zero-bubble: the
/// forward `F`, the input-gradient `I` and the weight-gradient `W` backward).
#[test]
fn task_times_are_reported_per_task_name() {
    let s = run("zero-bubble", "everything_saveable");
    let tasks = s["task_ms"].as_object().unwrap();
    for stage in 0..4 {
        for kind in ["F", "I", "W"] {
            let name = format!("{kind} s{stage}");
            let ms = tasks.get(&name).and_then(serde_json::Value::as_f64);
            assert!(ms.is_some_and(|t| t > 0.0), "{name}: {tasks:?}");
        }
    }
}

#[test]
fn an_unknown_policy_is_refused_with_the_names() {
    let out = tessera_train(&["--remat", "all"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("dots_with_no_batch_dims_saveable"), "{err}");
}
