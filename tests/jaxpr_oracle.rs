//! The JAX jaxpr oracle: every case parses, verifies, survives print -> parse, and evaluates to
//! JAX's outputs in the reference interpreter; the CLI reports the same.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_tests::{assert_all_pass, shared_dir, tessera_last_line};

fn oracle() -> std::path::PathBuf {
    shared_dir().join("oracle").join("jaxpr_cases.json")
}

#[test]
fn every_jaxpr_case_evaluates_to_jaxs_outputs() {
    let report = tessera_ir::oracle::run_file(&oracle()).unwrap();
    assert_all_pass(&report, 36);
}

#[test]
fn the_cli_prints_the_summary_line() {
    let line = tessera_last_line(&["oracle".as_ref(), "jaxpr".as_ref(), oracle().as_os_str()]);
    assert_eq!(line, "36 passed, 0 failed");
}

#[test]
fn every_jaxpr_case_compiles_and_runs_on_pjrt() {
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let evaluate = |program: &tessera_ir::ClosedJaxpr, inputs: &[tessera_ir::Array]| {
        tessera::jit::run_on_device(&client, program, inputs, 0).map_err(|e| e.to_string())
    };
    let report = tessera_ir::oracle::run_file_with(&oracle(), &evaluate).unwrap();
    assert_all_pass(&report, 36);
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
        assert_all_pass(&report, 36);
    }
}

#[test]
fn the_cli_checks_gradients_on_pjrt() {
    let path = oracle();
    let args = ["oracle", "jaxpr", "--backend", "pjrt", "--grads"];
    let mut all: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    all.push(path.as_os_str());
    assert_eq!(tessera_last_line(&all), "36 passed, 0 failed");
}
