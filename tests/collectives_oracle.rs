//! The JAX collectives oracle: every `shard_map` case evaluates to JAX's output and gradient on
//! the SPMD interpreter, with JAX's replica groups; the CLI reports the same.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::Command;

use tessera_tests::{shared_dir, tessera_bin};

fn oracle() -> std::path::PathBuf {
    shared_dir().join("oracle").join("collectives_cases.json")
}

fn assert_all_40_pass(report: &tessera_ir::oracle::Report) {
    let failures: Vec<String> = report
        .failures
        .iter()
        .map(|(n, w)| format!("{n}: {w}"))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(report.passed, 40);
}

#[test]
fn every_collective_case_matches_jax_with_gradients_on_the_interpreter() {
    let interp = |program: &tessera_ir::ClosedJaxpr, inputs: &[tessera_ir::Array]| {
        tessera_ir::interp::eval_closed(program, inputs).map_err(|e| e.to_string())
    };
    let report = tessera_ir::oracle_collectives::run_file(&oracle(), &interp, true).unwrap();
    assert_all_40_pass(&report);
}

#[test]
fn the_cli_prints_the_collectives_summary_line() {
    let out = Command::new(tessera_bin())
        .args(["oracle", "collectives"])
        .arg(oracle())
        .arg("--grads")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().last(), Some("40 passed, 0 failed"));
}
