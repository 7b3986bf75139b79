//! Layers against their formulas, evaluated by the interpreter.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::interp::eval_closed;
use tessera_ir::trace::trace;
use tessera_ir::{Array, DType, ShapedArray};
use tessera_nn::Tree;
use tessera_nn::layers::{RmsNorm, rotary};

#[test]
fn rotary_rotates_each_pair_of_halves_by_position_times_frequency() {
    let (t, dh, base) = (3i64, 4i64, 100.0f64);
    let values: Vec<f64> = (0..t * dh).map(|i| (i as f64 * 0.7).sin()).collect();
    let program = trace(&[ShapedArray::new(DType::F32, &[1, 1, t, dh])], |a| {
        vec![rotary(&a[0], base)]
    })
    .unwrap();
    let x = Array::new(DType::F32, &[1, 1, t, dh], values.clone()).unwrap();
    let out = eval_closed(&program, &[x]).unwrap()[0].to_vec();
    let half = (dh / 2) as usize;
    for p in 0..t as usize {
        let row = &values[p * dh as usize..(p + 1) * dh as usize];
        for j in 0..half {
            let angle = p as f64 * base.powf(-2.0 * j as f64 / dh as f64);
            let (c, s) = (angle.cos(), angle.sin());
            let first = row[j] * c - row[j + half] * s;
            let second = row[j + half] * c + row[j] * s;
            let got = (out[p * dh as usize + j], out[p * dh as usize + j + half]);
            assert!(
                (got.0 - first).abs() < 1e-5 && (got.1 - second).abs() < 1e-5,
                "{p} {j}"
            );
        }
    }
}

#[test]
fn rms_norm_divides_by_the_root_mean_square() {
    let norm = RmsNorm { d: 2, eps: 0.0 };
    let program = trace(
        &[
            ShapedArray::new(DType::F32, &[2]),
            ShapedArray::new(DType::F32, &[2]),
        ],
        |a| {
            let p = Tree::node([("gain", Tree::Leaf(a[1].clone()))]);
            vec![norm.apply(&p, &a[0]).unwrap()]
        },
    )
    .unwrap();
    let x = Array::new(DType::F32, &[2], vec![3.0, 4.0]).unwrap();
    let gain = Array::new(DType::F32, &[2], vec![1.0, 2.0]).unwrap();
    let out = eval_closed(&program, &[x, gain]).unwrap()[0].to_vec();
    let rms = (12.5f64).sqrt();
    assert!(
        (out[0] - 3.0 / rms).abs() < 1e-6 && (out[1] - 8.0 / rms).abs() < 1e-6,
        "{out:?}"
    );
}
