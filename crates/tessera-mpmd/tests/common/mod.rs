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
