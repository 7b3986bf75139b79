//! End-to-end checks of the `tessera` program: device listing on the PJRT CPU plugin and the
//! errors a user sees for a bad plugin.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::Command;

use tessera_tests::tessera_bin;

fn tessera(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut command = Command::new(tessera_bin());
    command.args(args).env_remove("TESSERA_PJRT_PLUGIN");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap_or_else(|e| {
        panic!(
            "cannot run {}: {e} (build it with `cargo build -p tessera`)",
            tessera_bin().display()
        )
    })
}

#[test]
fn devices_json_lists_the_eight_cpu_devices() {
    let out = tessera(&["devices", "--json"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["platform"], "cpu");
    let (major, minor) = tessera::pjrt::DEFAULT_CPU_PLUGIN.api;
    assert_eq!(report["pjrt_api_version"], format!("{major}.{minor}"));
    let devices = report["devices"].as_array().unwrap();
    let ids: Vec<i64> = devices.iter().map(|d| d["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, (0..8).collect::<Vec<_>>());
    assert!(devices.iter().all(|d| d["kind"] == "cpu"), "{devices:?}");
}

/// `--plugin` (before or after the subcommand) and `TESSERA_PJRT_PLUGIN` pick another plugin by
/// name; an unknown name is refused with the known ones listed.
#[test]
fn the_plugin_is_chosen_by_name() {
    let api = |args: &[&str], env: &[(&str, &str)]| {
        let out = tessera(args, env);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        report["pjrt_api_version"].as_str().unwrap().to_owned()
    };
    assert_eq!(
        api(&["--plugin", "xla-cpu-pjrt", "devices", "--json"], &[]),
        "0.81"
    );
    assert_eq!(
        api(&["devices", "--json", "--plugin", "xla-cpu-pjrt"], &[]),
        "0.81"
    );
    let env = [("TESSERA_PJRT_PLUGIN", "xla-cpu-pjrt")];
    assert_eq!(api(&["devices", "--json"], &env), "0.81");
    let out = tessera(&["devices", "--plugin", "tpu-v9"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("unknown PJRT plugin `tpu-v9`") && stderr.contains("zml-cpu"),
        "{stderr}"
    );
}

#[test]
fn devices_count_follows_the_create_option() {
    let out = tessera(&["devices", "--json", "--cpu-devices", "3"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["devices"].as_array().unwrap().len(), 3);
}

#[test]
fn a_missing_plugin_names_the_path_and_the_fix() {
    let out = tessera(
        &["devices"],
        &[("TESSERA_PJRT_PLUGIN", "/nonexistent/pjrt.so")],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/pjrt.so") && stderr.contains("cargo xtask setup"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_file_that_is_not_a_library_names_the_file() {
    let dir = std::env::temp_dir().join(format!("tessera-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("not-a-plugin.so");
    std::fs::write(&bad, b"not an ELF file").unwrap();
    let out = tessera(&["devices", "--plugin", bad.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("could not be loaded") && stderr.contains("not-a-plugin.so"),
        "{stderr}"
    );
}

#[test]
fn a_library_without_the_pjrt_entry_point_is_refused() {
    let libc = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .expect("libc.so.6");
    let out = tessera(&["devices", "--plugin", libc], &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is not a PJRT plugin") && stderr.contains("GetPjrtApi"),
        "{stderr}"
    );
}

/// Sizes that start at 0, a learning rate that is not one, and pipelines too large to build are
/// refused at once, saying why; a loss that becomes NaN stops the run naming the step.
#[test]
fn bad_training_input_is_refused_with_the_reason() {
    let refused = |args: &[&str], expected: &str| {
        let out = tessera(args, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    };
    refused(
        &["train", "--microbatches", "0"],
        "micro-batches start at 1",
    );
    refused(&["train", "--lr", "nan"], "--lr NaN is not a learning rate");
    refused(&["train", "--lr=-1"], "give a finite number above 0");
    refused(&["schedule", "gpipe", "--stages", "0"], "at least 1 stage");
    let tiny = std::env::temp_dir().join(format!("tessera-tiny-{}.txt", std::process::id()));
    std::fs::write(&tiny, b"tiny").unwrap();
    let tiny_arg = tiny.to_string_lossy().into_owned();
    refused(
        &["train", "--model", "llama", "--data", &tiny_arg],
        &format!("the data file {tiny_arg} has 4 bytes"),
    );
    refused(
        &["train", "--model", "mlp", "--data", &tiny_arg],
        "--data trains --model llama",
    );
    std::fs::remove_file(&tiny).unwrap();
    refused(
        &["train", "--warmup", "20", "--steps", "5"],
        "longer than the run's 5 --steps",
    );
    refused(
        &[
            "schedule",
            "1f1b",
            "--stages",
            "100000",
            "--microbatches",
            "100000",
        ],
        "above the limit of 262144",
    );
    let diverged = [
        "train",
        "--model",
        "gpt",
        "--stages",
        "2",
        "--microbatches",
        "2",
        "--devices",
        "2",
        "--lr",
        "1e30",
        "--steps",
        "4",
    ];
    refused(&diverged, "the loss of step 2 is NaN");
}

/// `TESSERA_LOG_COMPILES=1` names every XLA compile on stderr (`compile: @NAME (T ms, D
/// devices)`); without it nothing is said. The persistent compile cache is off
/// (`TESSERA_COMPILE_CACHE=0`), so each run compiles (tests/compile_cache.rs has the cache on).
/// `TESSERA_COMPILE_CACHE` other than on or off is refused.
#[test]
fn compiles_are_logged_when_asked() {
    let args = [
        "train",
        "--model",
        "mlp",
        "--steps",
        "1",
        "--stages",
        "2",
        "--microbatches",
        "2",
        "--batch",
        "4",
        "--no-reference",
        "--eval-every",
        "0",
    ];
    let out = tessera(
        &args,
        &[
            ("TESSERA_LOG_COMPILES", "1"),
            ("TESSERA_COMPILE_CACHE", "0"),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let compiles: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("compile: @"))
        .collect();
    assert!(compiles.len() >= 2, "{stderr}");
    assert!(compiles.iter().all(|l| l.contains(" ms, ")), "{compiles:?}");
    let quiet = tessera(&args, &[("TESSERA_COMPILE_CACHE", "0")]);
    assert!(quiet.status.success());
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("compile: "));
    let bad = tessera(&args, &[("TESSERA_COMPILE_CACHE", "sometimes")]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("TESSERA_COMPILE_CACHE=\"sometimes\""),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// The program runs on jemalloc with `oversize_threshold:0` (`tessera::use_jemalloc!`): its
/// statistics, printed at exit when asked through `MALLOC_CONF`, show the option in force.
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[test]
fn the_program_runs_on_jemalloc_keeping_large_blocks() {
    let out = tessera(&["--version"], &[("MALLOC_CONF", "stats_print:true")]);
    assert!(out.status.success());
    let stats = String::from_utf8_lossy(&out.stderr);
    assert!(stats.contains("opt.oversize_threshold: 0\n"), "{stats}");
}

#[test]
fn check_collectives_runs_what_the_plugin_has_and_names_what_it_lacks() {
    let out = tessera(&["check", "collectives", "--devices", "4"], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    let (checks, summary) = lines.split_at(lines.len() - 1);
    assert_eq!(checks.len(), 6, "{stdout}");
    let mut unsupported = 0;
    for line in checks {
        match line.split_whitespace().next() {
            Some("ok") => {}
            // XLA's CPU backend has no ragged_all_to_all or send/recv: the plugin's error is
            // passed on, naming the operation.
            Some("unsupported") => {
                unsupported += 1;
                assert!(line.contains("not supported"), "{line}");
            }
            _ => panic!("a check neither passed nor was unsupported: {line}"),
        }
    }
    let passed = checks.len() - unsupported;
    assert!(passed >= 2, "{stdout}");
    assert_eq!(
        summary[0],
        format!(
            "{passed} passed, {unsupported} unsupported by the plugin, 0 skipped (too few \
             devices), 0 failed"
        )
    );
    // One device has no pair of devices for psend/precv: skipped, not failed.
    let alone = tessera(
        &["check", "collectives", "--devices", "1", "--only", "psend"],
        &[],
    );
    let text = String::from_utf8_lossy(&alone.stdout);
    assert!(alone.status.success(), "{text}");
    assert!(
        text.starts_with("skipped      psend/precv: needs 2 devices"),
        "{text}"
    );
    // --require-all counts an unsupported operation as a failure.
    let strict = tessera(
        &["check", "collectives", "--devices", "2", "--require-all"],
        &[],
    );
    assert_eq!(strict.status.success(), unsupported == 0, "{stdout}");
    let none = tessera(&["check", "collectives", "--devices", "0"], &[]);
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("at least 1 device"));
}

/// `tessera check attention` on the CPU plugin runs each shape's decomposed values and
/// gradients and reports its cuDNN side unsupported (only CUDA plugins run cuDNN); with
/// `--require-all` that is a failure, as it is on a GPU machine where cuDNN must run.
#[test]
fn check_attention_runs_the_decomposition_and_names_cudnn_unsupported_on_the_cpu() {
    let out = tessera(&["check", "attention", "--only", "window"], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    for line in &lines[..2] {
        assert!(
            line.starts_with("unsupported") && line.contains("window") && line.contains("CUDA"),
            "{line}"
        );
    }
    assert_eq!(
        lines[2],
        "0 passed, 2 unsupported by the plugin, 0 skipped, 0 failed"
    );
    let strict = tessera(
        &["check", "attention", "--only", "window", "--require-all"],
        &[],
    );
    assert!(!strict.status.success());
    let none = tessera(&["check", "attention", "--only", "no such shape"], &[]);
    assert!(!none.status.success());
    let err = String::from_utf8_lossy(&none.stderr);
    assert!(
        err.contains("names none of the shapes") && err.contains("f16 padding"),
        "{err}"
    );
}

/// The guide's list of `tessera train`'s options (docs/training.md) is the program's own
/// `--help`, so the two cannot drift apart: a changed option fails here until the block is
/// pasted again.
#[test]
fn the_guide_lists_train_options_as_the_program_prints_them() {
    let out = tessera(&["train", "--help"], &[]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let guide =
        std::fs::read_to_string(tessera_tests::repo_root().join("docs").join("training.md"))
            .unwrap();
    let heading = "## Every option (tessera train --help)";
    let after = guide
        .split_once(heading)
        .unwrap_or_else(|| panic!("docs/training.md lacks '{heading}'"))
        .1;
    let block = after
        .split_once("```text\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .map(|(block, _)| block)
        .unwrap_or_else(|| panic!("no ```text block under '{heading}'"));
    assert_eq!(
        block.trim_end(),
        help.trim_end(),
        "paste `tessera train --help` under '{heading}' in docs/training.md again"
    );
}

#[test]
fn an_xla_profile_runs_on_the_cpu_plugin_and_an_unknown_one_is_refused() {
    let base = [
        "train",
        "--model",
        "llama",
        "--layers",
        "2",
        "--d-model",
        "32",
        "--heads",
        "4",
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
        "1",
        "--json",
    ];
    // The CPU plugin accepts MaxText's GPU options and ignores them, so
    // the losses are those of XLA's defaults.
    let run = |profile: &str| {
        let mut args = base.to_vec();
        args.extend(["--xla-profile", profile]);
        let out = tessera(&args, &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let summary: serde_json::Value =
            serde_json::from_str(text.lines().last().unwrap_or_default()).unwrap();
        assert_eq!(summary["xla_profile"], profile);
        summary["losses"].clone()
    };
    assert_eq!(run("maxtext-gpu"), run("xla"));
    let mut args = base.to_vec();
    args.extend(["--xla-profile", "fastest"]);
    let out = tessera(&args, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("xla, maxtext-gpu"),
        "{err}"
    );
}
