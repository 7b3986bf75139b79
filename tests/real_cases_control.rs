//! The control-flow and custom-derivative cases of `jaxpr_real_cases.json` (issue 20, part A),
//! with JAX's values and gradients on the interpreter and on PJRT.

use tessera_tests::named_real_cases;

#[test]
fn jax_nn_custom_jvp_cases_match_on_both_backends() {
    let names = [
        "nn_relu_mlp_0",
        "nn_relu_mlp_1",
        "nn_silu_softplus_0",
        "nn_silu_softplus_1",
    ];
    assert_eq!(named_real_cases(&names), 2 * names.len());
}

#[test]
fn jax_scan_and_fori_loop_cases_match_on_both_backends() {
    let names = [
        "fori_loop_0",
        "fori_loop_1",
        "scan_layers_0",
        "scan_layers_1",
    ];
    assert_eq!(named_real_cases(&names), 2 * names.len());
}

#[test]
fn jax_cond_checkpoint_and_closure_cases_match_on_both_backends() {
    let names = [
        "cond_0",
        "cond_1",
        "checkpoint_block_0",
        "checkpoint_block_1",
        "closure_constants_0",
        "closure_constants_1",
    ];
    assert_eq!(named_real_cases(&names), 2 * names.len());
}
