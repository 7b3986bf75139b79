//! JAX's `jax.checkpoint` cases of `jaxpr_real_cases.json` (a file another issue brings into
//! the oracle runners whole): the `checkpoint` region lowers (it has no `name` parameter) and
//! differentiates, with JAX's values and gradients on the interpreter and on PJRT.

use tessera_tests::named_real_cases;

#[test]
fn jaxs_checkpoint_cases_lower_and_differentiate() {
    assert_eq!(
        named_real_cases(&["checkpoint_block_0", "checkpoint_block_1"]),
        4
    );
}
