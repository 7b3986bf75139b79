//! The JAX jaxpr oracle: every case parses, verifies, survives print -> parse, and evaluates to
//! JAX's outputs in the reference interpreter; the CLI reports the same.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::Command;

use tessera_tests::{shared_dir, tessera_bin};

/// Every case passed, or the failures are listed.
fn assert_all_36_pass(report: &tessera_ir::oracle::Report) {
    let failures: Vec<String> = report
        .failures
        .iter()
        .map(|(n, w)| format!("{n}: {w}"))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(report.passed, 36);
}

fn oracle() -> std::path::PathBuf {
    shared_dir().join("oracle").join("jaxpr_cases.json")
}

#[test]
fn every_jaxpr_case_evaluates_to_jaxs_outputs() {
    let report = tessera_ir::oracle::run_file(&oracle()).unwrap();
    assert_all_36_pass(&report);
}

#[test]
fn the_cli_prints_the_summary_line() {
    let out = Command::new(tessera_bin())
        .args(["oracle", "jaxpr"])
        .arg(oracle())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().last(), Some("36 passed, 0 failed"));
}

#[test]
fn every_jaxpr_case_compiles_and_runs_on_pjrt() {
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let evaluate = |program: &tessera_ir::ClosedJaxpr, inputs: &[tessera_ir::Array]| {
        tessera::jit::run_on_device(&client, program, inputs, 0).map_err(|e| e.to_string())
    };
    let report = tessera_ir::oracle::run_file_with(&oracle(), &evaluate).unwrap();
    assert_all_36_pass(&report);
}

#[test]
fn gradients_match_jax_on_the_interpreter_and_on_pjrt() {
    let interp = |program: &tessera_ir::ClosedJaxpr, inputs: &[tessera_ir::Array]| {
        tessera_ir::interp::eval_closed(program, inputs).map_err(|e| e.to_string())
    };
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let pjrt = |program: &tessera_ir::ClosedJaxpr, inputs: &[tessera_ir::Array]| {
        tessera::jit::run_on_device(&client, program, inputs, 0).map_err(|e| e.to_string())
    };
    let backends: [&tessera_ir::oracle::Evaluate<'_>; 2] = [&interp, &pjrt];
    for evaluate in backends {
        let report = tessera_ir::oracle::run_file_with_grads(&oracle(), evaluate).unwrap();
        assert_all_36_pass(&report);
    }
}

#[test]
fn the_cli_checks_gradients_on_pjrt() {
    let out = Command::new(tessera_bin())
        .args(["oracle", "jaxpr", "--backend", "pjrt", "--grads"])
        .arg(oracle())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().last(), Some("36 passed, 0 failed"));
}
