//! Hostile but realistic use of the `tessera` program (issue 34): closed pipes and full disks,
//! absurd sizes, damaged or contested checkpoint directories, and options that make no sense.
//! Each is refused at once with a message naming the problem, or ends quietly where a closed
//! pipe asks for it; none panics.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tessera_tests::{tessera_bin, tessera_train};

fn tessera(args: &[&str]) -> Command {
    let mut command = Command::new(tessera_bin());
    command
        .args(args)
        .env("TF_CPP_MIN_LOG_LEVEL", "2")
        .env_remove("TESSERA_PJRT_PLUGIN");
    command
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

fn refused_train(args: &[&str], words: &[&str]) {
    assert_refused(&tessera_train(args), words, &format!("train {args:?}"));
}

/// Every subcommand ends quietly (status 141, as a process ended by SIGPIPE) when its reader
/// has gone, and names standard output when the disk is full.
#[test]
fn a_closed_pipe_ends_quietly_and_a_full_disk_is_an_error() {
    let commands: &[&[&str]] = &[
        &[
            "schedule",
            "1f1b",
            "--stages",
            "4",
            "--microbatches",
            "64",
            "--json",
        ],
        &["schedule", "--list"],
        &["devices"],
        &[
            "sharding",
            "explain",
            "--mesh",
            "x=2,y=4",
            "--spec",
            "P('x','y')",
            "--shape",
            "8,16",
        ],
        &[
            "train",
            "--steps",
            "1",
            "--stages",
            "2",
            "--microbatches",
            "2",
            "--batch",
            "4",
        ],
    ];
    for args in commands {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader); // the reader is gone before the first line is written
        let out = tessera(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        if Path::new("/dev/full").exists() {
            let full = std::fs::File::create("/dev/full").unwrap();
            let out = tessera(args).stdout(full).output().unwrap();
            assert_refused(
                &out,
                &["standard output", "No space left"],
                &format!("{args:?}"),
            );
        }
    }
}

#[test]
fn device_counts_a_client_cannot_make_are_refused_at_once() {
    for count in ["0", "1000000"] {
        let out = tessera(&["devices", "--cpu-devices", count])
            .output()
            .unwrap();
        assert_refused(
            &out,
            &[&format!("cannot make {count} devices"), "4096"],
            count,
        );
    }
    refused_train(
        &["--devices", "1000000", "--steps", "1"],
        &["--devices 1000000", "4096"],
    );
    refused_train(&["--devices", "0"], &["--devices 0"]);
    refused_train(&["--stages", "100000"], &["--stages 100000", "--devices 8"]);
}

#[test]
fn nonsense_sizes_are_refused_before_any_work() {
    refused_train(&["--batch", "0"], &["--batch 0"]);
    // Negative numbers reach the checks as values instead of being read as flags.
    refused_train(&["--lr", "-0.1"], &["--lr -0.1", "learning rate"]);
    refused_train(&["--model", "gpt", "--d-model", "-64"], &["at least 1"]);
    // 51.6e9 parameters: refused with the memory they need, before any is allocated.
    let huge = [
        "--model",
        "gpt",
        "--d-model",
        "65536",
        "--heads",
        "1",
        "--layers",
        "1",
        "--stages",
        "1",
        "--mpmd-dim",
        "1",
        "--steps",
        "1",
    ];
    refused_train(&huge, &["GB", "available", "--d-model"]);
    refused_train(
        &["--model", "gpt", "--data", "/dev/zero"],
        &["/dev/zero", "not a regular file"],
    );
    refused_train(
        &["--trace", "/nonexistent-dir/t.json"],
        &["--trace", "/nonexistent-dir"],
    );
    refused_train(
        &["--plot", "/nonexistent-dir/l.svg"],
        &["--plot", "/nonexistent-dir"],
    );
}

/// A fresh directory for one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tessera-hard-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const SMALL_MLP: &[&str] = &[
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

fn train_in(dir: &Path, steps: &str, extra: &[&str]) -> Output {
    let dir = dir.to_string_lossy();
    let mut args: Vec<&str> = SMALL_MLP.to_vec();
    args.extend(["--steps", steps, "--checkpoint-every", "1"]);
    args.extend(extra);
    if !extra.contains(&"--resume") {
        args.extend(["--checkpoint-dir", &dir]);
    }
    tessera_train(&args)
}

/// A damaged manifest is refused naming its file; one whose step is not its folder's (which
/// would train a step twice) too.
#[test]
fn damaged_manifests_are_refused_naming_the_file() {
    let scratch = Scratch::new("manifest");
    let out = train_in(&scratch.0, "2", &["--stop-after", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest = scratch.0.join("step-00000002").join("manifest.json");
    let good = std::fs::read_to_string(&manifest).unwrap();
    let damaged: Vec<(&str, Vec<u8>)> = vec![
        ("malformed", b"{ not json".to_vec()),
        ("empty", Vec::new()),
        ("binary", vec![0xff, 0x00, 0x13, 0x37]),
        (
            "step as a word",
            good.replace("\"step\": 2", "\"step\": \"two\"")
                .into_bytes(),
        ),
        (
            "negative step",
            good.replace("\"step\": 2", "\"step\": -1").into_bytes(),
        ),
        (
            "no model",
            good.replace("\"model\"", "\"mode1\"").into_bytes(),
        ),
        (
            "another step",
            good.replace("\"step\": 2", "\"step\": 1").into_bytes(),
        ),
    ];
    let dir = scratch.0.to_string_lossy().into_owned();
    for (what, bytes) in damaged {
        std::fs::write(&manifest, bytes).unwrap();
        let out = train_in(&scratch.0, "4", &["--resume", &dir]);
        assert_refused(&out, &["manifest.json"], what);
    }
    std::fs::write(&manifest, good).unwrap();
    let out = train_in(&scratch.0, "3", &["--resume", &dir]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A checkpoint directory a live process is saving into is refused, naming that process; a lock
/// left by a process that has ended is taken over.
#[test]
fn a_checkpoint_directory_in_use_is_refused() {
    let scratch = Scratch::new("lock");
    let lock = scratch.0.join(".tessera.lock");
    std::fs::write(&lock, std::process::id().to_string()).unwrap();
    let out = train_in(&scratch.0, "1", &[]);
    assert_refused(
        &out,
        &["in use", &std::process::id().to_string()],
        "a held lock",
    );
    std::fs::write(&lock, "4294967295").unwrap();
    let out = train_in(&scratch.0, "1", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!lock.exists(), "the run left its lock behind");
}

/// A program called with another number of arguments than it takes says so (it advised a
/// dtype conversion before).
#[test]
fn a_wrong_argument_count_is_named_as_such() {
    let text = "{ lambda ; a:f32[2] b:f32[2]. let c:f32[2] = add a b in (c,) }";
    let program = tessera_ir::text::parse_closed(text).unwrap();
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let x = tessera_ir::Array::new(tessera_ir::DType::F32, &[2], vec![1.0, 2.0]).unwrap();
    let err = tessera::jit::run_on_device(&client, &program, &[x], 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("takes 2 arguments, got 1"), "{err}");
    assert!(!err.contains("convert"), "{err}");
}

/// A long pipelined run against an independent unpipelined one, neither restarting from the
/// other: the pipelined run's own reference restarts from its parameters every 10 steps, so it
/// cannot see an error that grows a little each step. The two runs' different orders of sums
/// round differently, and training amplifies that (on this machine: 2.8e-7 at step 100, 1.2e-5
/// at 150, 3.6e-2 at 300), so the steps are compared where rounding is still small (the first
/// `EXACT_STEPS` within `EXACT_TOLERANCE`) and the whole run by the mean loss of each
/// `WINDOW` steps (7.8e-4 at most here). A learning rate off by 1e-4 in the unpipelined run
/// (`--lr 0.10001`) fails the step check (2.3e-5 by step 25); the windows catch a run that
/// trains elsewhere altogether.
#[test]
fn a_300_step_pipelined_run_does_not_drift_from_an_unpipelined_one() {
    const EXACT_STEPS: usize = 100;
    const EXACT_TOLERANCE: f64 = 1e-5;
    const WINDOW: usize = 50;
    const WINDOW_TOLERANCE: f64 = 5e-3;
    let base = [
        "--model",
        "gpt",
        "--steps",
        "300",
        "--eval-every",
        "0",
        "--json",
    ];
    let run = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let out = tessera_train(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let summary: serde_json::Value =
            serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
        summary
    };
    // The pipelined run keeps its own restarted reference on (the per-step check).
    let (pipelined, unpipelined) = std::thread::scope(|s| {
        let p = s.spawn(|| run(&[]));
        let u = s.spawn(|| run(&["--stages", "1", "--mpmd-dim", "1", "--no-reference"]));
        (p.join().unwrap(), u.join().unwrap())
    });
    assert_eq!(pipelined["reference_losses"].as_array().unwrap().len(), 300);
    let diff = pipelined["max_relative_difference"].as_f64().unwrap();
    assert!(diff <= 1e-4, "{diff}");
    assert!(pipelined["stages"].as_u64().unwrap() > 1, "{pipelined}");
    let losses = |s: &serde_json::Value| -> Vec<f64> {
        let l: Vec<f64> = s["losses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(l.len(), 300);
        l
    };
    let (p, u) = (losses(&pipelined), losses(&unpipelined));
    let relative = |a: f64, b: f64| (a - b).abs() / b.abs();
    for (step, (a, b)) in p.iter().zip(&u).take(EXACT_STEPS).enumerate() {
        assert!(
            relative(*a, *b) <= EXACT_TOLERANCE,
            "step {}: pipelined loss {a}, unpipelined {b}",
            step + 1
        );
    }
    for (w, (a, b)) in p.chunks(WINDOW).zip(u.chunks(WINDOW)).enumerate() {
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let (a, b) = (mean(a), mean(b));
        assert!(
            relative(a, b) <= WINDOW_TOLERANCE,
            "steps {}-{}: mean pipelined loss {a}, unpipelined {b}",
            w * WINDOW + 1,
            (w + 1) * WINDOW
        );
    }
}

#[test]
fn schedules_with_absurd_costs_or_time_units_are_drawn_or_refused_without_a_panic() {
    // Costs whose sum overflows to infinity: no timeline, no panic.
    let out = tessera(&["schedule", "1f1b", "--costs", "1e308,1e308,1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("no timeline"), "{stdout}");
    // Huge but finite costs draw a bounded timeline.
    let out = tessera(&["schedule", "1f1b", "--costs", "1e9,2,1"])
        .output()
        .unwrap();
    let widest = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(
        out.status.success() && widest < 10_000,
        "a line of {widest} characters"
    );
    // A synthetic run that would sleep for days is refused at once.
    let out = tessera(&[
        "schedule",
        "1f1b",
        "--stages",
        "2",
        "--microbatches",
        "1",
        "--execute-synthetic",
        "--time-unit-ms",
        "1e9",
    ])
    .output()
    .unwrap();
    assert_refused(
        &out,
        &["would sleep", "--time-unit-ms"],
        "a days-long synthetic run",
    );
}
