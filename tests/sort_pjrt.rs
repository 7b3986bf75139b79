//! `sort`, `argsort` and `top_k` give JAX's answers on the interpreter and on PJRT: NaN last
//! (first for `top_k`), `-0.0` equal to `0.0` (ties keep their order), several keys compared
//! lexicographically, any axis. Values from JAX 0.10.1 on CPU.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::ir::trace;
use tessera_ir::interp::eval_closed;
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};

const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;

fn both(program: &ClosedJaxpr, args: &[Array]) -> [Vec<Array>; 2] {
    tessera_ir::verify(program).unwrap();
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let here = eval_closed(program, args).unwrap();
    let there = tessera::jit::run_on_device(&client, program, args, 0).unwrap();
    [here, there]
}

/// Equal element by element, NaN equal to NaN and the sign of zero significant.
fn same(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits())
}

#[test]
fn sort_argsort_and_top_k_are_jaxs() {
    let x = [
        3.0, NAN, -0.0, 1.0, 0.0, -INF, 2.0, 2.0, -1.0, 2.0, INF, -5.0,
    ];
    let program = trace::trace(&[ShapedArray::new(DType::F32, &[2, 6])], |a| {
        let (values, indices) = a[0].top_k(3);
        vec![
            a[0].sort(1),
            a[0].argsort(1),
            a[0].argsort(0),
            values,
            indices,
        ]
    })
    .unwrap();
    let args = [Array::new(DType::F32, &[2, 6], x.to_vec()).unwrap()];
    let want: [&[f64]; 5] = [
        &[
            -INF, -0.0, 0.0, 1.0, 3.0, NAN, -5.0, -1.0, 2.0, 2.0, 2.0, INF,
        ],
        &[5.0, 2.0, 4.0, 3.0, 0.0, 1.0, 5.0, 2.0, 0.0, 1.0, 3.0, 4.0],
        &[1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0],
        &[NAN, 3.0, 1.0, INF, 2.0, 2.0],
        &[1.0, 0.0, 3.0, 4.0, 0.0, 1.0],
    ];
    for (backend, outs) in ["interpreter", "PJRT"].iter().zip(both(&program, &args)) {
        for (k, w) in want.iter().enumerate() {
            assert!(
                same(&outs[k].to_vec(), w),
                "{backend}, output {k}: {:?}",
                outs[k]
            );
        }
    }
}

#[test]
fn several_keys_sort_lexicographically() {
    // lax.sort((k, v, arange(6)), num_keys=2)
    let program = trace::trace(
        &[
            ShapedArray::new(DType::I32, &[6]),
            ShapedArray::new(DType::F32, &[6]),
        ],
        |a| {
            let iota = a[0].iota_along(&[6], 0);
            trace::sort(&[&a[0], &a[1], &iota], 0, 2, true)
        },
    )
    .unwrap();
    let args = [
        Array::new(DType::I32, &[6], vec![1.0, 0.0, 1.0, 0.0, 1.0, 0.0]).unwrap(),
        Array::new(DType::F32, &[6], vec![5.0, 4.0, 3.0, 2.0, 1.0, 0.0]).unwrap(),
    ];
    let want: [&[f64]; 3] = [
        &[0.0, 0.0, 0.0, 1.0, 1.0, 1.0],
        &[0.0, 2.0, 4.0, 1.0, 3.0, 5.0],
        &[5.0, 3.0, 1.0, 4.0, 2.0, 0.0],
    ];
    for (backend, outs) in ["interpreter", "PJRT"].iter().zip(both(&program, &args)) {
        for (k, w) in want.iter().enumerate() {
            assert_eq!(outs[k].to_vec(), *w, "{backend}, output {k}");
        }
    }
}

#[test]
fn gradients_flow_back_through_the_sorting_permutation() {
    // d/dx sum(sort(x) * w) puts w[j] where the j-th smallest element came from; the same
    // through top_k, whose unpicked elements get nothing.
    let f32s = |s: &[i64]| ShapedArray::new(DType::F32, s);
    let program = trace::trace(&[f32s(&[4]), f32s(&[4]), f32s(&[2])], |a| {
        let (top, _) = a[0].top_k(2);
        let sorted = &a[0].sort(0) * &a[1];
        let loss = &sorted.sum(&[0]) + &(&top * &a[2]).sum(&[0]);
        vec![loss]
    })
    .unwrap();
    let grad = tessera_ir::value_and_grad(&program, &[0]).unwrap();
    let args = [
        Array::new(DType::F32, &[4], vec![0.5, -2.0, 3.0, 1.0]).unwrap(),
        Array::new(DType::F32, &[4], vec![10.0, 20.0, 30.0, 40.0]).unwrap(),
        Array::new(DType::F32, &[2], vec![100.0, 200.0]).unwrap(),
    ];
    // Sorted order: -2.0 (1), 0.5 (0), 1.0 (3), 3.0 (2); top two: 3.0 (2), 1.0 (3).
    let want = [20.0, 10.0, 40.0 + 100.0, 30.0 + 200.0];
    for (backend, outs) in ["interpreter", "PJRT"].iter().zip(both(&grad, &args)) {
        assert_eq!(outs[1].to_vec(), want, "{backend}");
    }
}
