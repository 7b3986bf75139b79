//! Flags at the edges of their types (`u64::MAX`, `i64::MAX`, negative, empty entries) given to
//! the `tessera` program: each is refused with a message naming the flag or the size to
//! change, never a panic (debug builds check arithmetic overflow) and never silently altered.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::{Command, Output};

use tessera_tests::{tessera_bin, tessera_train};

fn tessera(args: &[&str]) -> Output {
    Command::new(tessera_bin())
        .args(args)
        .env("TF_CPP_MIN_LOG_LEVEL", "2")
        .env_remove("TESSERA_PJRT_PLUGIN")
        .output()
        .unwrap()
}

/// Asserts that a run failed without a panic and that its error says every one of `words`.
fn assert_refused(out: &Output, words: &[&str], what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what} was accepted: {stderr}");
    assert_ne!(out.status.code(), Some(101), "{what} panicked: {stderr}");
    assert!(!stderr.contains("panicked"), "{what} panicked: {stderr}");
    for word in words {
        assert!(
            stderr.contains(word),
            "{what}: `{word}` missing from: {stderr}"
        );
    }
}

const TINY: &[&str] = &[
    "--model",
    "llama",
    "--steps",
    "1",
    "--stages",
    "2",
    "--devices",
    "2",
    "--microbatches",
    "2",
    "--batch",
    "4",
];

#[test]
fn decoder_sizes_at_the_integer_limits_are_refused() {
    for (extra, words) in [
        (
            &["--d-model", "9223372036854775807", "--heads", "1"][..],
            &["64 bits", "d_model"][..],
        ),
        (&["--layers", "18446744073709551615"], &["fewer layers"]),
        (
            &["--layers", "2", "--stage-layers", "18446744073709551615,3"],
            &["--stage-layers", "the model has 2"],
        ),
    ] {
        let args = [TINY, extra].concat();
        assert_refused(&tessera_train(&args), words, &format!("train {extra:?}"));
    }
}

#[test]
fn an_empty_stage_layers_list_in_a_config_names_the_counts_to_give() {
    let dir = std::env::temp_dir().join(format!("tessera-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("empty-stage-layers.toml");
    std::fs::write(
        &config,
        "model = \"llama\"\nlayers = 2\nd_model = 16\nheads = 2\nseq_len = 8\nstage_layers = []\n",
    )
    .unwrap();
    let args = [TINY, &["--config", config.to_str().unwrap()]].concat();
    let out = tessera_train(&args);
    std::fs::remove_dir_all(&dir).unwrap();
    // Not "pass --stages 0", which no run accepts.
    assert_refused(&out, &["is empty", "e.g. 1,1"], "stage_layers = []");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("--stages 0"));
}

#[test]
fn device_ids_and_shapes_with_holes_or_signs_are_refused() {
    let explain = |extra: &[&str]| {
        let base = ["sharding", "explain", "--mesh", "x=2", "--spec", "P('x')"];
        tessera(&[&base[..], extra].concat())
    };
    for (extra, words) in [
        (&["--shape", "8,,8"][..], &["--shape", "empty entry"][..]),
        (
            &["--shape", "8", "--devices", "1,,0"],
            &["--devices", "empty entry"],
        ),
        (&["--shape", "8", "--devices=-1,5"], &["-1", "start at 0"]),
    ] {
        assert_refused(&explain(extra), words, &format!("{extra:?}"));
    }
    // A scalar's empty shape is still the empty list.
    let out = tessera(&[
        "sharding", "explain", "--mesh", "x=2", "--spec", "P()", "--shape", "",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_empty_mesh_or_an_mpmd_axis_named_like_another_axis_is_refused_plainly() {
    let base = [
        "--steps",
        "1",
        "--stages",
        "2",
        "--devices",
        "4",
        "--microbatches",
        "2",
        "--batch",
        "4",
    ];
    for (extra, words) in [
        (
            &["--mesh", ""][..],
            &["--mesh is empty", "e.g. --mesh stage=2"][..],
        ),
        (
            &["--mesh", "stage=2,data=2", "--mpmd-axis", ""],
            &["--mpmd-axis ''", "of its own"],
        ),
        (
            &["--mesh", "stage=2,data=2", "--mpmd-axis", "data"],
            &["--mpmd-axis 'data'", "of its own"],
        ),
    ] {
        let args = [&base[..], extra].concat();
        let out = tessera_train(&args);
        assert_refused(&out, words, &format!("{extra:?}"));
        // The old messages suggested `--mesh stage=2,,` and `--mesh =2,...`.
        assert!(!String::from_utf8_lossy(&out.stderr).contains(",,"));
        assert!(!String::from_utf8_lossy(&out.stderr).contains("--mesh =2"));
    }
}

#[test]
fn a_batch_that_cannot_fit_in_memory_is_refused_before_it_is_made() {
    // 2^32 - 1 examples of 2 × 16 eight-byte values: about 1.1 TB on the host.
    let out = tessera_train(&[
        "--steps",
        "1",
        "--stages",
        "2",
        "--devices",
        "2",
        "--microbatches",
        "1",
        "--batch",
        "4294967295",
    ]);
    assert_refused(&out, &["--batch 4294967295", "GB"], "a 1 TB batch");
}

#[test]
fn plan_counts_of_zero_are_refused_not_rounded_up() {
    let base = [
        "plan",
        "--model",
        "llama",
        "--layers",
        "2",
        "--d-model",
        "16",
        "--heads",
        "2",
        "--seq-len",
        "8",
        "--batch",
        "4",
        "--devices",
        "2",
    ];
    for (extra, words) in [
        (&["--repeats", "0"][..], &["--repeats 0"][..]),
        (&["--top", "0"], &["--top 0"]),
        (
            &["--max-stages-per-group", "0"],
            &["--max-stages-per-group 0"],
        ),
        (
            &["--microbatches", "2,0"],
            &["--microbatches 0", "start at 1"],
        ),
    ] {
        let out = tessera(&[&base[..], extra].concat());
        assert_refused(&out, words, &format!("{extra:?}"));
    }
}

#[test]
fn a_synthetic_time_unit_below_a_nanosecond_is_refused() {
    let out = tessera(&[
        "schedule",
        "1f1b",
        "--execute-synthetic",
        "--time-unit-ms",
        "1e-300",
    ]);
    assert_refused(&out, &["--time-unit-ms", "1 ns"], "a 1e-300 ms unit");
}

#[test]
fn an_oracle_file_without_cases_is_not_a_pass() {
    let dir = std::env::temp_dir().join(format!("tessera-hostile-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty.json");
    let no_named = dir.join("no-named.json");
    std::fs::write(&empty, "{\"cases\": []}").unwrap();
    std::fs::write(&no_named, "{\"named_sharding\": []}").unwrap();
    let runs = [
        ("jaxpr", &empty),
        ("collectives", &empty),
        ("sharding", &no_named),
    ]
    .map(|(kind, file)| (kind, tessera(&["oracle", kind, file.to_str().unwrap()])));
    std::fs::remove_dir_all(&dir).unwrap();
    for (kind, out) in runs {
        assert_refused(&out, &["no cases"], &format!("oracle {kind} of no cases"));
    }
}

#[test]
fn stop_after_outside_the_run_is_refused_naming_the_steps() {
    let mlp = [
        "--stages",
        "2",
        "--devices",
        "2",
        "--microbatches",
        "2",
        "--batch",
        "4",
        "--eval-every",
        "0",
        "--no-reference",
    ];
    let out = tessera_train(&[&mlp[..], &["--steps", "2", "--stop-after", "3"]].concat());
    assert_refused(
        &out,
        &["--stop-after 3", "--steps 2"],
        "--stop-after past --steps",
    );
    let out = tessera_train(&[&mlp[..], &["--steps", "0"]].concat());
    assert_refused(&out, &["--steps 0"], "--steps 0");
    // A resumed run told to stop at or before its checkpoint's step says so.
    let dir = std::env::temp_dir().join(format!("tessera-hostile-stop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    let saved = tessera_train(
        &[
            &mlp[..],
            &["--steps", "4", "--stop-after", "2", "--checkpoint-dir", d],
        ]
        .concat(),
    );
    assert!(
        saved.status.success(),
        "{}",
        String::from_utf8_lossy(&saved.stderr)
    );
    let out = tessera_train(
        &[
            &mlp[..],
            &["--steps", "4", "--stop-after", "1", "--resume", d],
        ]
        .concat(),
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert_refused(
        &out,
        &["--stop-after 1", "resumes after step 2"],
        "a stop before the resume",
    );
}

/// A plan file for the tiny llama whose `command` text disagrees with its fields (as an edited
/// file's may), in a fresh directory.
fn edited_plan_file(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tessera-hostile-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("plan.json");
    let plan = serde_json::json!({
        "model": "llama", "layers": 2, "d_model": 16, "heads": 2, "seq_len": 8, "dtype": "f32",
        "batch": 4, "devices": 2, "stages": 2, "stage_layers": [1, 1], "mpmd_dim": 2,
        "microbatches": 2, "schedule": "gpipe", "no_fuse": false, "predicted_step_ms": 1.0,
        "predicted_peak_bytes": 1, "predicted_peak_bytes_per_group": [1, 1],
        "command": "tessera train --microbatches 1 --schedule 1f1b",
    });
    std::fs::write(&file, plan.to_string()).unwrap();
    (dir, file)
}

#[test]
fn a_plan_file_is_reported_as_applied_not_as_its_command_text_says() {
    let (dir, file) = edited_plan_file("plan");
    let out = tessera_train(&[
        "--steps",
        "1",
        "--no-reference",
        "--eval-every",
        "0",
        "--plan",
        file.to_str().unwrap(),
    ]);
    std::fs::remove_dir_all(&dir).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().find(|l| l.starts_with("plan (")).unwrap();
    assert!(
        line.contains("--microbatches 2") && line.contains("--schedule gpipe"),
        "{line}"
    );
}

#[test]
fn a_flag_the_plan_sets_given_with_another_value_is_refused_not_replaced() {
    let (dir, file) = edited_plan_file("plan-flags");
    let path = file.to_str().unwrap();
    // `--stages 4` is also the flag's default: given on the command line, it still conflicts.
    let runs = [
        (&["--stages", "4"][..], "--stages 2, not 4"),
        (&["--microbatches", "8"], "--microbatches 2, not 8"),
        (&["--schedule", "1f1b"], "--schedule gpipe, not 1f1b"),
        (&["--mpmd-dim", "1"], "--mpmd-dim 2, not 1"),
        (&["--stage-layers", "2,0"], "--stage-layers 1,1, not 2,0"),
    ]
    .map(|(extra, words)| {
        let args = [&["--steps", "1", "--plan", path][..], extra].concat();
        (extra, words, tessera_train(&args))
    });
    // The plan's own values may be repeated.
    let agreeing = tessera_train(&[
        "--steps",
        "1",
        "--no-reference",
        "--eval-every",
        "0",
        "--plan",
        path,
        "--stages",
        "2",
        "--schedule",
        "gpipe",
    ]);
    std::fs::remove_dir_all(&dir).unwrap();
    for (extra, words, out) in runs {
        assert_refused(&out, &[words, "drop"], &format!("--plan with {extra:?}"));
    }
    assert!(
        agreeing.status.success(),
        "{}",
        String::from_utf8_lossy(&agreeing.stderr)
    );
}

#[test]
fn eval_every_for_the_mlp_is_refused_not_ignored() {
    let mlp = [
        "--steps",
        "1",
        "--stages",
        "2",
        "--devices",
        "2",
        "--microbatches",
        "2",
        "--batch",
        "4",
    ];
    let out = tessera_train(&[&mlp[..], &["--eval-every", "1"]].concat());
    assert_refused(&out, &["--eval-every 1", "mlp"], "--eval-every for the mlp");
    // Its default and 0 stay accepted.
    for extra in [&[][..], &["--eval-every", "0"]] {
        let out = tessera_train(&[&mlp[..], extra, &["--no-reference"]].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_resumed_run_keeps_its_checkpoints_seed_and_refuses_another() {
    let mlp = [
        "--steps",
        "3",
        "--stages",
        "2",
        "--devices",
        "2",
        "--microbatches",
        "2",
        "--batch",
        "4",
        "--no-reference",
    ];
    let dir = std::env::temp_dir().join(format!("tessera-hostile-seed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    let first = tessera_train(
        &[
            &mlp[..],
            &["--seed", "7", "--stop-after", "1", "--checkpoint-dir", d],
        ]
        .concat(),
    );
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let other = tessera_train(&[&mlp[..], &["--seed", "5", "--resume", d]].concat());
    // Without --seed the run goes on, and its checkpoints record the seed its parameters came
    // from (they recorded the default 0).
    let rest = tessera_train(&[&mlp[..], &["--resume", d]].concat());
    let manifest = std::fs::read_to_string(dir.join("step-00000003").join("manifest.json"));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_refused(
        &other,
        &["--seed 7, not 5", "drop --seed"],
        "resume with another seed",
    );
    assert!(
        rest.status.success(),
        "{}",
        String::from_utf8_lossy(&rest.stderr)
    );
    let manifest: serde_json::Value = serde_json::from_str(&manifest.unwrap()).unwrap();
    assert_eq!(manifest["seed"], 7, "{manifest}");
}

#[test]
fn device_memory_with_a_plan_file_is_refused_not_ignored() {
    let (dir, file) = edited_plan_file("plan-memory");
    let out = tessera_train(&[
        "--steps",
        "1",
        "--plan",
        file.to_str().unwrap(),
        "--device-memory",
        "1GiB",
    ]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_refused(
        &out,
        &["--device-memory 1GiB", "--plan auto"],
        "--device-memory with a file",
    );
}

#[test]
fn a_schedule_named_twice_is_planned_once() {
    let cache = std::env::temp_dir().join(format!("tessera-hostile-twice-{}", std::process::id()));
    let out = tessera(&[
        "plan",
        "--model",
        "llama",
        "--layers",
        "1",
        "--d-model",
        "8",
        "--heads",
        "2",
        "--seq-len",
        "4",
        "--batch",
        "2",
        "--devices",
        "1",
        "--microbatches",
        "1",
        "--repeats",
        "1",
        "--schedules",
        "gpipe,gpipe",
        "--remat",
        "nothing_saveable,nothing_saveable",
        "--cache",
        cache.to_str().unwrap(),
        "--json",
    ]);
    let _ = std::fs::remove_dir_all(&cache);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let top = report["top"].as_array().unwrap();
    // A policy named twice is measured and searched once too.
    assert_eq!(top.len(), 1, "{report}");
    assert_eq!(top[0]["remat"], "nothing_saveable", "{report}");
    // Not counted as a second schedule of the same prediction.
    assert_eq!(top[0]["same_prediction"], serde_json::json!([]), "{report}");
}

#[test]
fn a_mesh_too_large_to_list_is_refused_before_listing_it() {
    let out = tessera(&[
        "sharding",
        "explain",
        "--mesh",
        "x=4096,y=4096",
        "--spec",
        "P('x', 'y')",
        "--shape",
        "4096,4096",
        "--json",
    ]);
    assert_refused(
        &out,
        &["16777216 positions", "at most 65536"],
        "a 16M-device mesh",
    );
}

#[test]
fn plan_auto_refuses_a_choice_it_would_make_before_measuring() {
    for (extra, flag) in [
        (&["--stages", "2"][..], "--stages"),
        (&["--schedule", "gpipe"], "--schedule"),
        (&["--mpmd-dim", "2"], "--mpmd-dim"),
    ] {
        let args = [
            &[
                "--model",
                "llama",
                "--steps",
                "1",
                "--plan",
                "auto",
                "--devices",
                "2",
            ][..],
            extra,
        ]
        .concat();
        let out = tessera_train(&args);
        assert_refused(
            &out,
            &[&format!("--plan auto chooses {flag}")],
            &format!("{extra:?}"),
        );
    }
}
