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
