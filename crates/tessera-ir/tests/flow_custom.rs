//! Custom derivatives through the tracing API: the user's rule is what `jvp`, `vjp` and `vmap`
//! use (shown with rules that differ from the body's true derivative), a rule with wrong result
//! types is an error naming it, forward mode of a custom VJP is refused as in JAX, and a custom
//! call parsed from JAX's text (rules printed as Python functions) prints back and parses.

#![allow(clippy::unwrap_used, missing_docs)]

mod prims;

use prims::{Rng, assert_close, index_axis, stack};
use tessera_ir::interp::eval_closed;
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::{custom_jvp, custom_vjp, trace};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray, jvp, vjp, vmap};

fn f64s(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F64, shape)
}

fn eval(p: &ClosedJaxpr, args: &[Array]) -> Vec<Array> {
    eval_closed(p, args).unwrap()
}

fn scale(a: &Array, s: f64) -> Array {
    Array::from_values(a.dtype(), &a.values() * s)
}

/// `y = sin(x)` whose JVP rule claims `dy = 3 t` (not the true `cos(x) t`).
fn three_t() -> ClosedJaxpr {
    trace(&[f64s(&[2, 3])], |a| {
        custom_jvp(
            "three",
            &[&a[0]],
            |p| vec![p[0].sin()],
            |p, t| (vec![p[0].sin()], vec![&t[0] * 3.0]),
        )
    })
    .unwrap()
}

#[test]
fn jvp_and_vjp_use_the_custom_jvp_rule() {
    let f = three_t();
    let mut rng = Rng(7);
    let x = rng.array(&f64s(&[2, 3]));
    let t = rng.direction(&f64s(&[2, 3]));
    let out = eval(&jvp(&f).unwrap(), &[x.clone(), t.clone()]);
    assert_close(
        "primal",
        &out[0],
        &eval(&f, std::slice::from_ref(&x))[0],
        1e-12,
    );
    assert_close("tangent", &out[1], &scale(&t, 3.0), 1e-12);
    let g = eval(&vjp(&f).unwrap(), &[x, t.clone()]);
    assert_close(
        "cotangent (the rule transposed)",
        &g[0],
        &scale(&t, 3.0),
        1e-12,
    );
}

/// `y = x * x` whose backward rule returns `ct * residual` with residual `x` (half the true
/// derivative `2 x ct`).
fn half_square() -> ClosedJaxpr {
    trace(&[f64s(&[3])], |a| {
        custom_vjp(
            "half",
            &[&a[0]],
            |p| (vec![&p[0] * &p[0]], vec![p[0].clone()]),
            |res, ct| vec![&res[0] * &ct[0]],
        )
    })
    .unwrap()
}

#[test]
fn vjp_uses_the_custom_vjp_rule_and_jvp_is_refused() {
    let f = half_square();
    let x = Array::new(DType::F64, &[3], vec![1.0, 2.0, -3.0]).unwrap();
    let ct = Array::new(DType::F64, &[3], vec![1.0, 10.0, 100.0]).unwrap();
    assert_eq!(
        eval(&f, std::slice::from_ref(&x))[0].to_vec(),
        vec![1.0, 4.0, 9.0]
    );
    let g = eval(&vjp(&f).unwrap(), &[x, ct]);
    assert_eq!(g[0].to_vec(), vec![1.0, 20.0, -300.0]);
    let err = jvp(&f).unwrap_err().to_string();
    assert!(err.contains("`half` has a custom VJP rule"), "{err}");
}

#[test]
fn vmap_batches_the_rules_with_the_body() {
    for f in [three_t(), half_square()] {
        let aval = f.jaxpr.in_avals()[0].clone();
        let batched = vmap(&f, &[Some(0)], &[0], 4).unwrap();
        let b_vjp = vjp(&batched).unwrap();
        let one_vjp = vjp(&f).unwrap();
        let mut rng = Rng(11);
        let mut shape = aval.shape.clone();
        shape.insert(0, 4);
        let xs = rng.array(&f64s(&shape));
        let cts = rng.direction(&f64s(&shape));
        let got = eval(&b_vjp, &[xs.clone(), cts.clone()]);
        let parts: Vec<Array> = (0..4)
            .map(|b| eval(&one_vjp, &[index_axis(&xs, 0, b), index_axis(&cts, 0, b)]).remove(0))
            .collect();
        assert_close(
            "batched cotangents",
            &got[0],
            &stack(&parts, 0, &aval),
            1e-12,
        );
    }
}

#[test]
fn a_rule_with_wrong_result_types_is_an_error_naming_it() {
    let err = trace(&[f64s(&[2, 3])], |a| {
        custom_jvp(
            "bad_rule",
            &[&a[0]],
            |p| vec![p[0].sin()],
            |p, t| (vec![p[0].sin()], vec![t[0].sum(&[0])]),
        )
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("the JVP rule of `bad_rule` returns"), "{err}");
    assert!(err.contains("f64[3]") && err.contains("f64[2,3]"), "{err}");
    let err = trace(&[f64s(&[3])], |a| {
        custom_vjp(
            "bad_bwd",
            &[&a[0]],
            |p| (vec![p[0].sin()], vec![p[0].clone()]),
            |res, _ct| vec![res[0].astype(DType::F32)],
        )
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("the backward rule of `bad_bwd` returns"),
        "{err}"
    );
}

#[test]
fn traced_rules_print_and_parse_back() {
    for f in [three_t(), half_square()] {
        let text = print_closed(&f, 0);
        assert_eq!(parse_closed(&text).unwrap(), f, "{text}");
    }
}

/// `jax.make_jaxpr` of a `jax.custom_vjp` function as JAX prints it (its own pretty-print test):
/// the rules are Python functions, shown by name.
const JAX_CUSTOM_VJP: &str = "{ lambda ; a:f32[1]. let
    b:f32[1] = custom_vjp_call[
      name=f
      bwd=f_bwd
      call_jaxpr={ lambda ; c:f32[1]. let d:f32[1] = add c 1.0:f32[] in (d,) }
      fwd=f_fwd
      symbolic_zeros=False
    ] a
  in (b,) }";

#[test]
fn a_custom_vjp_call_printed_by_jax_runs_and_is_differentiated_through_its_body() {
    let f = parse_closed(JAX_CUSTOM_VJP).unwrap();
    tessera_ir::verify(&f).unwrap();
    let x = Array::new(DType::F32, &[1], vec![4.25]).unwrap();
    assert_eq!(eval(&f, std::slice::from_ref(&x))[0].to_vec(), vec![5.25]);
    let ct = Array::new(DType::F32, &[1], vec![3.0]).unwrap();
    assert_eq!(eval(&vjp(&f).unwrap(), &[x, ct])[0].to_vec(), vec![3.0]);
    assert_eq!(parse_closed(&print_closed(&f, 0)).unwrap(), f);
}
