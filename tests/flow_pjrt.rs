//! Control flow and custom derivatives built with the tracing API, differentiated, lowered to
//! StableHLO and run on PJRT: the same values as the reference interpreter.

#![allow(clippy::unwrap_used)]

use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{custom_jvp, custom_vjp, trace};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray, vjp};

fn f32s(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

/// Runs `program` on the interpreter and on PJRT and compares.
fn agree(what: &str, program: &ClosedJaxpr, args: &[Array]) {
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let want = eval_closed(program, args).unwrap();
    let got = tessera::jit::run_on_device(&client, program, args, 0)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.shape(), w.shape(), "{what}");
        for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                "{what}: PJRT {:?} vs interpreter {:?}",
                g.to_vec(),
                w.to_vec()
            );
        }
    }
}

fn ramp(shape: &[i64], scale: f64) -> Array {
    let n: i64 = shape.iter().product();
    let values = (0..n)
        .map(|i| (i as f64 - n as f64 / 2.0) * scale)
        .collect();
    Array::new(DType::F32, shape, values).unwrap()
}

#[test]
fn custom_rules_and_their_gradients_run_on_pjrt() {
    let jvp_rule = trace(&[f32s(&[2, 3])], |a| {
        custom_jvp(
            "softish",
            &[&a[0]],
            |p| vec![p[0].tanh()],
            |p, t| {
                let y = p[0].tanh();
                let dy = &t[0] * &(1.0 - &y * &y);
                (vec![y], vec![dy])
            },
        )
    })
    .unwrap();
    let vjp_rule = trace(&[f32s(&[2, 3])], |a| {
        custom_vjp(
            "clip_grad",
            &[&a[0]],
            |p| (vec![p[0].sin()], vec![p[0].cos()]),
            |res, ct| {
                let g = &res[0] * &ct[0];
                let half = &(&g * 0.0) + 0.5;
                vec![g.minimum(&half)]
            },
        )
    })
    .unwrap();
    for (name, f) in [("custom_jvp", jvp_rule), ("custom_vjp", vjp_rule)] {
        let x = ramp(&[2, 3], 0.4);
        agree(name, &f, std::slice::from_ref(&x));
        agree(
            &format!("{name} vjp"),
            &vjp(&f).unwrap(),
            &[x, ramp(&[2, 3], 0.7)],
        );
    }
}
