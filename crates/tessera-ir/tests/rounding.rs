//! `round`'s `rounding_method`: JAX's integer and enum spellings read into one
//! `RoundingMethod`, honoured by the interpreter, refused when malformed or missing, and what
//! the tracing API's `round` (JAX's `jnp.round`) and `round_with` (`lax.round`) print.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::interp::eval_closed;
use tessera_ir::prim::RoundingMethod;
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::trace;
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};

const HALVES: [f64; 8] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, -2.6];
const AWAY: [f64; 8] = [1.0, 2.0, 3.0, -1.0, -2.0, -3.0, 2.0, -3.0];
const EVEN: [f64; 8] = [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 2.0, -3.0];

fn round_program(method: &str) -> tessera_ir::Result<ClosedJaxpr> {
    parse_closed(&format!(
        "{{ lambda ; a:f32[8]. let b:f32[8] = round[rounding_method={method}] a in (b,) }}"
    ))
}

fn run(program: &ClosedJaxpr) -> Vec<f64> {
    let x = Array::new(DType::F32, &[8], HALVES.to_vec()).unwrap();
    eval_closed(program, &[x]).unwrap()[0].to_vec()
}

/// Equal values with equal signs (so `-0.0` and `0.0` differ).
fn assert_same(got: &[f64], want: &[f64], what: &str) {
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(got), bits(want), "{what}: {got:?} vs {want:?}");
}

#[test]
fn the_interpreter_rounds_halves_by_the_equations_method() {
    for (method, want) in [
        ("0", AWAY),
        ("1", EVEN),
        ("RoundingMethod.AWAY_FROM_ZERO", AWAY),
        ("RoundingMethod.TO_NEAREST_EVEN", EVEN),
        ("TO_NEAREST_EVEN", EVEN),
    ] {
        let program = round_program(method).unwrap();
        tessera_ir::verify(&program).unwrap();
        assert_same(&run(&program), &want, method);
    }
}

#[test]
fn a_malformed_or_missing_method_is_an_error() {
    for method in ["2", "-1", "True", "RoundingMethod.UP", "(1,)"] {
        let err = round_program(method)
            .and_then(|p| tessera_ir::verify(&p).map(|()| p))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("rounding_method"), "{method}: {err:?}");
    }
    let bare = parse_closed("{ lambda ; a:f32[8]. let b:f32[8] = round a in (b,) }");
    let err = bare
        .and_then(|p| tessera_ir::verify(&p).map(|()| p))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("rounding_method"), "{err:?}");
}

#[test]
fn tensor_round_is_jnp_round_and_round_with_is_lax_round() {
    let even = trace(&[ShapedArray::new(DType::F32, &[8])], |a| {
        vec![a[0].round()]
    })
    .unwrap();
    let text = print_closed(&even, 0);
    assert!(text.contains("round[rounding_method=1]"), "{text}");
    assert_same(&run(&even), &EVEN, "jnp.round");
    let away = trace(&[ShapedArray::new(DType::F32, &[8])], |a| {
        vec![a[0].round_with(RoundingMethod::AwayFromZero)]
    })
    .unwrap();
    assert!(print_closed(&away, 0).contains("round[rounding_method=0]"));
    assert_same(&run(&away), &AWAY, "lax.round");
    // Printed text parses back to the same method.
    assert_same(&run(&parse_closed(&text).unwrap()), &EVEN, "reparsed");
}

#[test]
fn tensor_round_leaves_integers_as_they_are() {
    let program = trace(&[ShapedArray::new(DType::I32, &[3])], |a| {
        vec![a[0].round()]
    })
    .unwrap();
    assert!(!print_closed(&program, 0).contains("round"));
    let x = Array::new(DType::I32, &[3], vec![-3.0, 0.0, 7.0]).unwrap();
    assert_eq!(
        eval_closed(&program, &[x]).unwrap()[0].to_vec(),
        vec![-3.0, 0.0, 7.0]
    );
}
