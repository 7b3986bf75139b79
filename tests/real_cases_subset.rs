//! The cases of `jaxpr_real_cases.json` (a file another issue brings into the oracle runners
//! whole) that Tessera handles today beyond those the other tests run (`take_modes_*`,
//! `closure_constants_*`, `bf16_sum_*`): `jax.checkpoint` regions (which lower without a `name`
//! parameter) and a log-softmax cross-entropy, with JAX's values and gradients on the
//! interpreter and on PJRT.

use tessera_tests::named_real_cases;

#[test]
fn jaxs_checkpoint_and_log_softmax_cases_match_on_both_backends() {
    let names = [
        "checkpoint_block_0",
        "checkpoint_block_1",
        "nn_log_softmax_xent_0",
        "nn_log_softmax_xent_1",
    ];
    assert_eq!(named_real_cases(&names), 2 * names.len());
}
