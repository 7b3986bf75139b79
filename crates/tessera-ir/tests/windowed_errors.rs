//! Bad input to the primitives of issue 20 C fails with an error naming the primitive and what
//! was wrong, never a panic or a wrong program.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::text::parse_closed;
use tessera_ir::vjp;

/// The error of parsing and verifying `text` (the verifier runs each equation's shape rule).
fn parse_error(text: &str) -> String {
    parse_closed(text)
        .and_then(|p| tessera_ir::verify(&p))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

#[test]
fn a_convolution_whose_groups_do_not_divide_its_features_is_refused() {
    let err = parse_error(
        "{ lambda ; a:f32[1,3,5] b:f32[4,2,3]. let c:f32[1,4,3] = conv_general_dilated[batch_group_count=1 dimension_numbers=ConvDimensionNumbers(lhs_spec=(0, 1, 2), rhs_spec=(0, 1, 2), out_spec=(0, 1, 2)) feature_group_count=2 lhs_dilation=(1,) padding=((0, 0),) precision=None preferred_element_type=None rhs_dilation=(1,) window_strides=(1,)] a b in (c,) }",
    );
    assert!(
        err.contains("conv_general_dilated") && err.contains("feature_group_count 2"),
        "{err}"
    );
}

#[test]
fn a_window_of_the_wrong_rank_is_refused() {
    let err = parse_error(
        "{ lambda ; a:f32[4,4]. let b:f32[2,2] = reduce_window_max[base_dilation=(1, 1) padding=((0, 0), (0, 0)) window_dilation=(1, 1) window_dimensions=(2,) window_strides=(2, 2)] a in (b,) }",
    );
    assert!(
        err.contains("reduce_window_max") && err.contains("rank 2"),
        "{err}"
    );
}

#[test]
fn select_and_scatter_add_needs_ge_or_le() {
    let err = parse_error(
        "{ lambda ; s:f32[2] a:f32[4]. let b:f32[4] = select_and_scatter_add[padding=((0, 0),) select_prim=gt window_dimensions=(2,) window_strides=(2,)] s a in (b,) }",
    );
    assert!(
        err.contains("select_prim") && err.contains("ge or le"),
        "{err}"
    );
}

#[test]
fn the_vjp_of_max_pooling_with_window_dilation_is_refused_as_in_jax() {
    let program = parse_closed(
        "{ lambda ; a:f32[5]. let b:f32[3] = reduce_window_max[base_dilation=(1,) padding=((0, 0),) window_dilation=(2,) window_dimensions=(2,) window_strides=(1,)] a in (b,) }",
    )
    .unwrap();
    let err = vjp(&program)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("reduce_window_max") && err.contains("window dilation"),
        "{err}"
    );
    // Its forward mode works.
    tessera_ir::jvp(&program).unwrap();
}

#[test]
fn a_cumulative_reduction_needs_an_axis_of_its_operand() {
    let err = parse_error(
        "{ lambda ; a:f32[3]. let b:f32[3] = cumprod[axis=1 reverse=False] a in (b,) }",
    );
    assert!(err.contains("cumprod") && err.contains("axis 1"), "{err}");
}
