//! Transformations called inside traces compose: per-example gradients (`vmap` of `grad`), the
//! gradient of a batched loss (`grad` of `vmap`), and `jvp` inside a trace, each against the
//! same quantity computed by hand from the untransformed program.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::autodiff::value_and_grad;
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{grad_call, jvp_call, trace, vmap_call};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};

fn f64s(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F64, shape)
}

fn values(shape: &[i64], seed: f64) -> Array {
    let n: i64 = shape.iter().product();
    Array::new(
        DType::F64,
        shape,
        (0..n).map(|i| (i as f64 * 0.7 + seed).sin()).collect(),
    )
    .unwrap()
}

/// `loss(w, x) = sum(tanh(x @ w)^2)` for one example `x: [3]`, `w: [3, 2]`.
fn loss() -> ClosedJaxpr {
    trace(&[f64s(&[3, 2]), f64s(&[3])], |a| {
        let h = a[1].reshape(&[1, 3]).matmul(&a[0]).tanh();
        vec![(&h * &h).sum(&[0, 1])]
    })
    .unwrap()
}

fn row(x: &Array, i: usize) -> Array {
    Array::new(DType::F64, &[3], x.to_vec()[i * 3..i * 3 + 3].to_vec()).unwrap()
}

#[test]
fn vmap_of_grad_gives_per_example_gradients() {
    let grad = trace(&[f64s(&[3, 2]), f64s(&[3])], |a| {
        grad_call(&loss(), &[0], &[&a[0], &a[1]])
    })
    .unwrap();
    let per_example = trace(&[f64s(&[3, 2]), f64s(&[4, 3])], |a| {
        vmap_call(&grad, &[None, Some(0)], &[0], &[&a[0], &a[1]])
    })
    .unwrap();
    let (w, xs) = (values(&[3, 2], 0.1), values(&[4, 3], 0.5));
    let got = eval_closed(&per_example, &[w.clone(), xs.clone()]).unwrap();
    assert_eq!(got[0].shape(), vec![4, 3, 2]);
    let vag = value_and_grad(&loss(), &[0]).unwrap();
    for i in 0..4 {
        let want = eval_closed(&vag, &[w.clone(), row(&xs, i)]).unwrap();
        let got_i = &got[0].to_vec()[i * 6..i * 6 + 6];
        for (a, b) in got_i.iter().zip(want[1].to_vec()) {
            assert!((a - b).abs() < 1e-12, "example {i}: {a} vs {b}");
        }
    }
}

#[test]
fn grad_of_vmap_sums_the_examples_gradients() {
    let batched = trace(&[f64s(&[3, 2]), f64s(&[4, 3])], |a| {
        let per = vmap_call(&loss(), &[None, Some(0)], &[0], &[&a[0], &a[1]]);
        vec![per[0].sum(&[0])]
    })
    .unwrap();
    let g = value_and_grad(&batched, &[0]).unwrap();
    let (w, xs) = (values(&[3, 2], 0.2), values(&[4, 3], 0.9));
    let got = eval_closed(&g, &[w.clone(), xs.clone()]).unwrap();
    let vag = value_and_grad(&loss(), &[0]).unwrap();
    let mut want = vec![0.0; 6];
    for i in 0..4 {
        let gi = eval_closed(&vag, &[w.clone(), row(&xs, i)]).unwrap();
        for (s, v) in want.iter_mut().zip(gi[1].to_vec()) {
            *s += v;
        }
    }
    for (a, b) in got[1].to_vec().iter().zip(&want) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
}

#[test]
fn jvp_inside_a_trace_matches_finite_differences() {
    let program = trace(&[f64s(&[3, 2]), f64s(&[3]), f64s(&[3, 2])], |a| {
        let outs = jvp_call(&loss(), &[&a[0], &a[1]], &[&a[2], &(&a[1] * 0.0)]);
        vec![outs[1].clone()]
    })
    .unwrap();
    let (w, x, t) = (
        values(&[3, 2], 0.3),
        values(&[3], 0.4),
        values(&[3, 2], 0.8),
    );
    let got = eval_closed(&program, &[w.clone(), x.clone(), t.clone()]).unwrap()[0].to_vec()[0];
    let eps = 1e-6;
    let shifted = |s: f64| {
        let wv: Vec<f64> = w
            .to_vec()
            .iter()
            .zip(t.to_vec())
            .map(|(a, b)| a + s * b)
            .collect();
        let w2 = Array::new(DType::F64, &[3, 2], wv).unwrap();
        eval_closed(&loss(), &[w2, x.clone()]).unwrap()[0].to_vec()[0]
    };
    let fd = (shifted(eps) - shifted(-eps)) / (2.0 * eps);
    assert!((got - fd).abs() < 1e-6, "{got} vs {fd}");
}
