//! The same programs under both of XLA's SPMD partitioners (`TESSERA_PARTITIONER=shardy|gspmd`):
//! JAX's collectives oracle on 8 devices and a pipelined training step give the same results,
//! and a Shardy run prints no GSPMD deprecation warning (a GSPMD run prints one per compile,
//! which shows the check can fail). The runs are `tessera` processes, so XLA's log on stderr can
//! be read.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::{Command, Output};

use tessera_stablehlo::{PARTITIONER_ENV, Partitioner};
use tessera_tests::{shared_dir, summary_numbers, tessera_bin, train_summary};

/// Runs `tessera args...` with `partitioner`, keeping XLA's warnings on stderr. The persistent
/// compile cache is off: XLA warns while it compiles, and a program an earlier run compiled
/// would be loaded instead.
fn tessera(partitioner: Partitioner, args: &[&str]) -> Output {
    Command::new(tessera_bin())
        .args(args)
        .env(PARTITIONER_ENV, partitioner.name())
        .env("TESSERA_COMPILE_CACHE", "0")
        .env_remove("TF_CPP_MIN_LOG_LEVEL")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", tessera_bin().display()))
}

/// What XLA prints for a GSPMD compile, or when a Shardy compile falls back to GSPMD.
fn gspmd_warnings(out: &Output) -> usize {
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr
        .lines()
        .filter(|l| l.contains("GSPMD") || l.contains("falling back"))
        .count()
}

fn check_warnings(partitioner: Partitioner, out: &Output) {
    let warnings = gspmd_warnings(out);
    match partitioner {
        Partitioner::Shardy => assert_eq!(
            warnings,
            0,
            "a Shardy run warned about GSPMD:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Partitioner::Gspmd => assert!(warnings > 0, "the control run printed no GSPMD warning"),
    }
}

#[test]
fn the_collectives_oracle_passes_under_both_partitioners() {
    let file = shared_dir().join("oracle").join("collectives_cases.json");
    let file = file.to_str().unwrap();
    for partitioner in Partitioner::ALL {
        let args = [
            "oracle",
            "collectives",
            "--backend",
            "pjrt",
            "--grads",
            file,
        ];
        let out = tessera(partitioner, &args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{partitioner}: {stdout}");
        assert_eq!(
            stdout.lines().last(),
            Some("40 passed, 0 failed"),
            "{partitioner}: {stdout}"
        );
        check_warnings(partitioner, &out);
    }
}

#[test]
fn a_pipelined_step_trains_alike_under_both_partitioners() {
    let args = [
        "train",
        "--model",
        "mlp",
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "4",
        "--steps",
        "2",
        "--json",
    ];
    let mut runs = Vec::new();
    for partitioner in Partitioner::ALL {
        let out = tessera(partitioner, &args);
        let summary = train_summary(&out, partitioner.name());
        let losses = summary_numbers(&summary, "losses");
        let reference = summary_numbers(&summary, "reference_losses");
        assert_eq!(losses.len(), 2, "{partitioner}");
        for (a, b) in losses.iter().zip(&reference) {
            assert!(
                (a - b).abs() <= 1e-4 * b.abs(),
                "{partitioner}: pipelined {a} vs unpipelined {b}"
            );
        }
        check_warnings(partitioner, &out);
        runs.push(losses);
    }
    for (shardy, gspmd) in runs[0].iter().zip(&runs[1]) {
        assert!(
            (shardy - gspmd).abs() <= 1e-5 * gspmd.abs(),
            "Shardy {shardy} vs GSPMD {gspmd}"
        );
    }
}

#[test]
fn an_unknown_partitioner_is_refused_with_its_name() {
    let out = Command::new(tessera_bin())
        .args(["schedule", "1f1b", "--stages", "2", "--microbatches", "2"])
        .env(PARTITIONER_ENV, "spmd")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown partitioner `spmd`") && stderr.contains(PARTITIONER_ENV),
        "{stderr}"
    );
}
