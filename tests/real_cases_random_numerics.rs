//! More programs with special functions, bits, random numbers and sorting, as JAX 0.10.1 prints
//! them (`tests/data/issue20b_cases.json`, beyond `jaxpr_real_cases.json`, which
//! `tests/real_cases.rs` runs whole), with JAX's values and gradients on the interpreter and on
//! PJRT.

/// More programs as JAX 0.10.1 prints them (`tests/data/gen_issue20b_cases.py`): categorical
/// sampling, a top-1 router, keys split and sliced apart, `vmap` of a normal draw over keys,
/// the other special functions, integer argsort, logsumexp and standardize.
#[test]
fn extra_random_and_numeric_cases_match_jax_on_both_backends() {
    let path = tessera_tests::repo_root().join("tests/data/issue20b_cases.json");
    let client = tessera_pjrt::Client::cpu(1).unwrap_or_else(|e| panic!("no PJRT CPU client: {e}"));
    let interp = |p: &tessera_ir::ClosedJaxpr, x: &[tessera_ir::Array]| {
        tessera_ir::interp::eval_closed(p, x).map_err(|e| e.to_string())
    };
    let on_pjrt = |p: &tessera_ir::ClosedJaxpr, x: &[tessera_ir::Array]| {
        tessera::jit::run_on_device(&client, p, x, 0).map_err(|e| e.to_string())
    };
    for evaluate in [&interp as &tessera_ir::oracle::Evaluate<'_>, &on_pjrt] {
        let report = tessera_ir::oracle::run_file_with_grads(&path, evaluate)
            .unwrap_or_else(|e| panic!("{e}"));
        tessera_tests::assert_all_pass(&report, 7);
    }
}
