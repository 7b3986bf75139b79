//! Each equation's parameters are read into their typed value once, when the equation is built
//! (traced) or parsed, and kept with it: the later rules read that value's fields.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::interp::eval_closed;
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::trace;
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};

fn program() -> ClosedJaxpr {
    let aval = ShapedArray::new(DType::F32, &[2, 3]);
    trace(&[aval], |x| {
        let t = x[0].transpose(&[1, 0]).reshape(&[3, 2]);
        vec![t.sum(&[1]).cumsum(0, true)]
    })
    .unwrap()
}

fn assert_every_equation_holds_its_typed_value(closed: &ClosedJaxpr) {
    for eqn in &closed.jaxpr.eqns {
        assert!(
            eqn.params.holds_typed(),
            "{} kept no typed value",
            eqn.prim.name()
        );
    }
}

#[test]
fn traced_equations_keep_the_typed_value_their_shape_rule_read() {
    let closed = program();
    assert_eq!(closed.jaxpr.eqns.len(), 4);
    assert_every_equation_holds_its_typed_value(&closed);
    let x = Array::new(DType::F32, &[2, 3], (0..6).map(f64::from).collect()).unwrap();
    let out = eval_closed(&closed, &[x]).unwrap();
    // Rows of the transpose are (0, 3), (1, 4), (2, 5); their sums 3, 5, 7, summed from the end.
    assert_eq!(out[0].to_vec(), [15.0, 12.0, 7.0]);
}

#[test]
fn parsed_equations_keep_it_too_and_a_malformed_one_fails_the_parse() {
    let text = print_closed(&program(), 0);
    let parsed = parse_closed(&text).unwrap();
    assert_every_equation_holds_its_typed_value(&parsed);
    let malformed = text.replace("reverse=True", "reverse=1");
    assert_ne!(malformed, text);
    let err = parse_closed(&malformed).unwrap_err().to_string();
    assert!(err.contains("reverse"), "{err}");
}

#[test]
fn convert_element_type_needs_a_boolean_weak_type_and_integer_pow_an_integer_y() {
    let convert = |params: &str| {
        parse_closed(&format!(
            "{{ lambda ; a:f32[2]. let b:f64[2] = convert_element_type[{params}] a in (b,) }}"
        ))
    };
    let ok = convert("new_dtype=float64 sharding=None weak_type=False").unwrap();
    assert!(!ok.jaxpr.out_avals()[0].weak_type);
    for bad in [
        "new_dtype=float64 sharding=None",
        "new_dtype=float64 weak_type=1",
    ] {
        let err = convert(bad).unwrap_err().to_string();
        assert!(err.contains("weak_type"), "{bad}: {err}");
    }
    let err = parse_closed("{ lambda ; a:f32[2]. let b:f32[2] = integer_pow[y=2.0] a in (b,) }")
        .unwrap_err()
        .to_string();
    assert!(err.contains("`y`"), "{err}");
}
