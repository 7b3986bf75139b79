//! Every case of the JAX jaxpr oracle: parse, print and parse again, verify, evaluate.

use tessera_ir::oracle::{Backend, run_file};

#[test]
fn every_jaxpr_case_matches_jax() {
    let path = tessera_tests::shared_dir()
        .join("oracle")
        .join("jaxpr_cases.json");
    let report = match run_file(&path, Backend::Interp) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(report.failures, Vec::<String>::new());
    assert_eq!(report.passed, 36);
}
