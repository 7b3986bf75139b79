//! Helpers shared by the partitioning tests.

use tessera_ir::trace::trace;
use tessera_ir::{ClosedJaxpr, DType, ShapedArray};

/// `x, w_0..w_{n-1}, y -> mean((tanh(... tanh(x w_0) ...) - y)^2)` on `[4, 6]` inputs, with a
/// stage marker before each layer after the first.
pub fn loss(stages: usize) -> ClosedJaxpr {
    let f = |s: &[i64]| ShapedArray::new(DType::F32, s);
    let mut avals = vec![f(&[4, 6])];
    avals.extend((0..stages).map(|_| f(&[6, 6])));
    avals.push(f(&[4, 6]));
    trace(&avals, |a| {
        let mut h = a[0].clone();
        for s in 0..stages {
            if s > 0 {
                h = h.enter_stage(s as i64);
            }
            h = h.matmul(&a[1 + s]).tanh();
        }
        vec![(&h - &a[stages + 1]).integer_pow(2).mean(&[0, 1])]
    })
    .unwrap()
}

/// As [`loss`], with skip connections: the output of stage `s` is added again to the output of
/// stage `s + 2`, so each stage's output is read by the next two stages (directly, not through
/// the stage between).
#[allow(dead_code)]
pub fn loss_with_skips(stages: usize) -> ClosedJaxpr {
    let f = |s: &[i64]| ShapedArray::new(DType::F32, s);
    let mut avals = vec![f(&[4, 6])];
    avals.extend((0..stages).map(|_| f(&[6, 6])));
    avals.push(f(&[4, 6]));
    trace(&avals, |a| {
        let mut before = a[0].clone();
        let mut h = a[0].matmul(&a[1]).tanh();
        for s in 1..stages {
            let x = h.enter_stage(s as i64);
            let next = &x.matmul(&a[1 + s]).tanh() + &(&before * 0.5);
            before = h;
            h = next;
        }
        vec![(&h - &a[stages + 1]).integer_pow(2).mean(&[0, 1])]
    })
    .unwrap()
}

/// As [`loss`], carrying two values from stage to stage: `h` and `g = sin(h)`, which each
/// stage mixes.
#[allow(dead_code)]
pub fn loss_two_streams(stages: usize) -> ClosedJaxpr {
    let f = |s: &[i64]| ShapedArray::new(DType::F32, s);
    let mut avals = vec![f(&[4, 6])];
    avals.extend((0..stages).map(|_| f(&[6, 6])));
    avals.push(f(&[4, 6]));
    trace(&avals, |a| {
        let mut h = a[0].matmul(&a[1]).tanh();
        let mut g = h.sin();
        for s in 1..stages {
            let (x, y) = (h.enter_stage(s as i64), g.enter_stage(s as i64));
            h = (&x.matmul(&a[1 + s]) + &y).tanh();
            g = &(&y * 0.5) + &x.cos();
        }
        vec![(&(&h + &g) - &a[stages + 1]).integer_pow(2).mean(&[0, 1])]
    })
    .unwrap()
}
