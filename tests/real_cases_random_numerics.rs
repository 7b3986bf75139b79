//! Issue 20 B's cases of `jaxpr_real_cases.json`: exact GELU (`erfc`), `erf`/`erf_inv`/
//! `atan2`/`lgamma`, int32 edge cases (shifts), `jax.random` dropout and normal draws (typed
//! keys, `random_wrap`, `random_bits`, a wrapped operand line), a top-k router, sort and
//! argsort, with JAX's values and gradients on the interpreter and on PJRT.

use tessera_tests::named_real_cases;

#[test]
fn jaxs_special_function_bit_random_and_sort_cases_match_on_both_backends() {
    let names = [
        "nn_gelu_exact_0",
        "nn_gelu_exact_1",
        "erf_atan2_lgamma_0",
        "erf_atan2_lgamma_1",
        "int32_edges_0",
        "int32_edges_1",
        "random_dropout_0",
        "random_dropout_1",
        "random_normal_0",
        "random_normal_1",
        "top_k_router_0",
        "top_k_router_1",
        "sort_argsort_0",
        "sort_argsort_1",
    ];
    assert_eq!(named_real_cases(&names), 2 * names.len());
}

/// More programs as JAX 0.10.1 prints them (`tests/data/gen_issue20b_cases.py`): categorical
/// sampling, a top-1 router, keys split and sliced apart, `vmap` of a normal draw over keys,
/// the other special functions, integer argsort, logsumexp and standardize.
#[test]
fn issue_20b_extra_cases_match_jax_on_both_backends() {
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
