//! Programs with constants: jaxpr text carries no constant values, so the caller gives them
//! (`parse_closed_with_consts`, the oracle's `consts`); a program with constants and no values is
//! an error, never zeros. JAX's closure cases (`closure_constants_*` of `jaxpr_real_cases.json`)
//! run with their values and gradients on the interpreter and on PJRT.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::text::{parse_closed, parse_closed_with_consts};
use tessera_ir::{Array, DType, IrError};
use tessera_tests::named_real_cases;

/// `jax.make_jaxpr(lambda x: jnp.tanh(x @ w) + b)` with `w` and `b` closed over.
const CLOSURE: &str = "{ lambda a:f32[2,2] b:f32[2]; c:f32[1,2]. let
    d:f32[1,2] = dot_general[
      dimension_numbers=(([1], [0]), ([], []))
      preferred_element_type=float32
    ] c a
    e:f32[1,2] = tanh d
    f:f32[1,2] = broadcast_in_dim[broadcast_dimensions=(1,)] b
    g:f32[1,2] = add e f
  in (g,) }";

fn arr(shape: &[i64], values: &[f64]) -> Array {
    Array::new(DType::F32, shape, values.to_vec()).unwrap()
}

#[test]
fn jaxs_closure_cases_use_their_constants_on_both_backends() {
    assert_eq!(
        named_real_cases(&["closure_constants_0", "closure_constants_1"]),
        4
    );
}

#[test]
fn constants_without_values_are_an_error_naming_them() {
    let err = parse_closed(CLOSURE).unwrap_err();
    let IrError::Consts(message) = &err else {
        panic!("expected a constants error, got {err}");
    };
    assert!(
        message.contains("2 constvars (f32[2,2], f32[2]) but 0 values"),
        "{message}"
    );
}

#[test]
fn constants_of_the_wrong_number_or_type_are_refused() {
    let w = arr(&[2, 2], &[1.0, 0.0, 0.0, 1.0]);
    let err = parse_closed_with_consts(CLOSURE, std::slice::from_ref(&w)).unwrap_err();
    assert!(matches!(err, IrError::Consts(_)), "{err}");
    let wrong = arr(&[3], &[0.0; 3]);
    let err = parse_closed_with_consts(CLOSURE, &[w, wrong]).unwrap_err();
    assert!(
        err.to_string().contains("constvar 1 has type f32[2]"),
        "{err}"
    );
}

#[test]
fn given_constants_are_the_ones_evaluated() {
    let w = arr(&[2, 2], &[0.5, -1.0, 2.0, 0.25]);
    let b = arr(&[2], &[10.0, -10.0]);
    let program = parse_closed_with_consts(CLOSURE, &[w, b]).unwrap();
    let x = arr(&[1, 2], &[0.2, 0.4]);
    let got = tessera_ir::interp::eval_closed(&program, std::slice::from_ref(&x)).unwrap();
    // x @ w = [0.2*0.5 + 0.4*2, 0.2*-1 + 0.4*0.25] = [0.9, -0.1].
    let want = [0.9f64.tanh() + 10.0, (-0.1f64).tanh() - 10.0];
    for (g, w) in got[0].to_vec().iter().zip(want) {
        assert!((g - w).abs() < 1e-5, "{g} vs {w}");
    }
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let on_pjrt = tessera::jit::run_on_device(&client, &program, &[x], 0).unwrap();
    for (p, g) in on_pjrt[0].to_vec().iter().zip(got[0].to_vec()) {
        assert!((p - g).abs() < 1e-5, "PJRT {p} vs interpreter {g}");
    }
}

#[test]
fn a_nested_jaxpr_with_constants_is_refused() {
    let text = "{ lambda ; x:f32[2]. let
    y:f32[2] = jit[
      name=f
      jaxpr={ lambda a:f32[2]; b:f32[2]. let c:f32[2] = add a b in (c,) }
    ] x
  in (y,) }";
    let err = parse_closed(text).unwrap_err();
    assert!(
        err.to_string().contains("nested jaxpr has constvars"),
        "{err}"
    );
}

/// `sum(f(x)^2)` with `f` (tanh(x @ w) + b, constants w and b) called as a nested `jit`: the
/// call is kept by inlining (it has constants) and differentiated whole. Its gradient is
/// `(2 y (1 - tanh(x w)^2)) w^T`, checked on the interpreter and PJRT, and its JVP gives the
/// same directional derivative.
#[test]
fn gradients_flow_through_a_nested_jit_with_constants() {
    use tessera_ir::autodiff::{jvp, value_and_grad};
    use tessera_ir::trace::{call_closed, trace};
    let wv = [0.5, -1.0, 2.0, 0.25];
    let bv = [0.3, -0.7];
    let inner = parse_closed_with_consts(CLOSURE, &[arr(&[2, 2], &wv), arr(&[2], &bv)]).unwrap();
    let outer = trace(&[tessera_ir::ShapedArray::new(DType::F32, &[1, 2])], |a| {
        let y = call_closed(&inner, &[&a[0]]).remove(0);
        vec![(&y * &y).sum(&[0, 1])]
    })
    .unwrap();
    let kept = tessera_ir::passes::inline_calls(&outer);
    assert!(
        kept.jaxpr
            .eqns
            .iter()
            .any(|e| e.prim == tessera_ir::Prim::Jit),
        "the call with constants is kept"
    );
    let xv = [0.2, 0.4];
    let x = arr(&[1, 2], &xv);
    // d = x @ w; y = tanh(d) + b; dL/dd = 2 y (1 - tanh(d)^2); dL/dx = dL/dd @ w^T.
    let d = [xv[0] * wv[0] + xv[1] * wv[2], xv[0] * wv[1] + xv[1] * wv[3]];
    let dd: Vec<f64> = (0..2)
        .map(|j| 2.0 * (d[j].tanh() + bv[j]) * (1.0 - d[j].tanh().powi(2)))
        .collect();
    let want = [dd[0] * wv[0] + dd[1] * wv[1], dd[0] * wv[2] + dd[1] * wv[3]];
    let grad = value_and_grad(&outer, &[0]).unwrap();
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let here = tessera_ir::interp::eval_closed(&grad, std::slice::from_ref(&x)).unwrap();
    let there = tessera::jit::run_on_device(&client, &grad, std::slice::from_ref(&x), 0).unwrap();
    for got in [&here[1], &there[1]] {
        for (g, w) in got.to_vec().iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "gradient {g} vs {w}");
        }
    }
    // Forward mode: the tangent along t is grad . t.
    let t = arr(&[1, 2], &[1.0, -2.0]);
    let forward = jvp(&outer).unwrap();
    let out = tessera_ir::interp::eval_closed(&forward, &[x, t]).unwrap();
    let along = want[0] - 2.0 * want[1];
    assert!(
        (out[1].to_vec()[0] - along).abs() < 1e-4,
        "{:?} vs {along}",
        out[1]
    );
}
