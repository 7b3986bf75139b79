//! `treduce`: the interpreter's sequential loop, the unrolled program (what `jit` lowers) and
//! JAXPP's definition agree for every operation; misuse is refused.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::interp::eval_closed;
use tessera_ir::passes::unroll_treduce;
use tessera_ir::prim::ReduceOp;
use tessera_ir::trace::{trace, treduce, treduce_i};
use tessera_ir::{Array, DType, Prim, ShapedArray};

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

fn values(shape: &[i64]) -> Array {
    let n: i64 = shape.iter().product();
    Array::new(
        DType::F32,
        shape,
        (0..n).map(|i| ((i * 7 % 11) as f64) - 5.0).collect(),
    )
    .unwrap()
}

#[test]
fn treduce_is_the_sequential_loop_for_concat_add_and_max() {
    // xs: 3 micro-batches along axis 1 of a [2, 3, 4] array; w is loop-invariant.
    let program = trace(&[f32(&[4]), f32(&[2, 3, 4])], |a| {
        let ops = [ReduceOp::Concat(1), ReduceOp::Add, ReduceOp::Max];
        treduce(&[&a[0]], &[&a[1]], 1, "gpipe", &ops, |w, x| {
            let y = &x[0] * &w[0];
            vec![y.clone(), y.sum(&[1]), x[0].clone()]
        })
    })
    .unwrap();
    assert_eq!(program.jaxpr.eqns.len(), 1);
    assert_eq!(program.jaxpr.eqns[0].prim, Prim::Treduce);
    let (w, xs) = (values(&[4]), values(&[2, 3, 4]));
    let got = eval_closed(&program, &[w.clone(), xs.clone()]).unwrap();
    // JAXPP's definition, by hand.
    let x = xs.to_vec();
    let wv = w.to_vec();
    let at = |r: usize, i: usize, c: usize| x[r * 12 + i * 4 + c];
    let mut concat = vec![0.0; 24];
    let mut add = [0.0; 2];
    let mut max = vec![f64::NEG_INFINITY; 8];
    for i in 0..3 {
        for r in 0..2 {
            for c in 0..4 {
                let y = at(r, i, c) * wv[c];
                concat[r * 12 + i * 4 + c] = y;
                add[r] += y;
                max[r * 4 + c] = max[r * 4 + c].max(at(r, i, c));
            }
        }
    }
    assert_eq!(got[0].shape(), vec![2, 3, 4]);
    assert_eq!(got[0].to_vec(), concat);
    assert_eq!(got[1].to_vec(), add.to_vec());
    assert_eq!(got[2].to_vec(), max);
    let unrolled = unroll_treduce(&program).unwrap();
    assert!(unrolled.jaxpr.eqns.iter().all(|e| e.prim != Prim::Treduce));
    assert_eq!(eval_closed(&unrolled, &[w, xs]).unwrap(), got);
}

#[test]
fn treduce_i_passes_the_micro_batch_index() {
    let program = trace(&[f32(&[2])], |a| {
        treduce_i(&a[0], &[&a[0]], 4, "1f1b", &[], |w, i| {
            vec![&w[0] * &i.astype(DType::F32), i.astype(DType::F32)]
        })
    })
    .unwrap();
    let got = eval_closed(
        &program,
        &[Array::new(DType::F32, &[2], vec![1.0, 2.0]).unwrap()],
    )
    .unwrap();
    // Default operations: the first result concatenated, the second summed.
    assert_eq!(
        got[0].to_vec(),
        vec![0.0, 0.0, 1.0, 2.0, 2.0, 4.0, 3.0, 6.0]
    );
    assert_eq!(got[1].to_vec(), vec![6.0]);
}

#[test]
fn arrays_of_different_lengths_are_refused() {
    let err = trace(&[f32(&[3, 2]), f32(&[4, 2])], |a| {
        treduce(&[], &[&a[0], &a[1]], 0, "1f1b", &[], |_, x| {
            vec![&x[0] + 1.0]
        })
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("every array must have 3 micro-batches"),
        "{err}"
    );
}

#[test]
fn the_vjp_of_a_loop_is_a_loop_with_the_unrolled_gradients() {
    use tessera_ir::autodiff::vjp;
    // Micro-batches along axis 1; one result summed, one stacked at dimension 1.
    let program = trace(&[f32(&[4]), f32(&[2, 3, 4])], |a| {
        let ops = [ReduceOp::Add, ReduceOp::Concat(1)];
        treduce(&[&a[0]], &[&a[1]], 1, "1f1b", &ops, |w, x| {
            let y = (&x[0] * &w[0]).tanh();
            vec![y.sum(&[0, 1]), &y * 2.0]
        })
    })
    .unwrap();
    let looped = vjp(&program).unwrap();
    let treduces = looped
        .jaxpr
        .eqns
        .iter()
        .filter(|e| e.prim == Prim::Treduce)
        .count();
    // The backward loop recomputes each micro-batch's forward, so the forward loop (whose
    // results the VJP does not return) is dead code and removed.
    assert_eq!(treduces, 1, "one backward loop");
    let unrolled = vjp(&unroll_treduce(&program).unwrap()).unwrap();
    assert!(unrolled.jaxpr.eqns.iter().all(|e| e.prim != Prim::Treduce));
    let args = [
        values(&[4]),
        values(&[2, 3, 4]),
        values(&[]),
        values(&[2, 3, 4]),
    ];
    let got = eval_closed(&looped, &args).unwrap();
    let want = eval_closed(&unrolled, &args).unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.shape(), w.shape());
        for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
}

#[test]
fn combining_micro_batches_with_a_bad_axis_or_unequal_shapes_is_an_error() {
    use tessera_ir::prim::combine_micro_batches;
    let two = || vec![values(&[2, 3]), values(&[2, 3])];
    for a in [-1, -3, 3, i64::MAX] {
        let err = combine_micro_batches(two(), ReduceOp::Concat(a))
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains(&format!("Concat axis {a}"))),
            "Concat({a}): {err:?}"
        );
    }
    let stacked = combine_micro_batches(two(), ReduceOp::Concat(2)).unwrap();
    assert_eq!(stacked.dims(), [2, 3, 2]);
    for op in [ReduceOp::Add, ReduceOp::Max, ReduceOp::Concat(0)] {
        let err = combine_micro_batches(vec![values(&[2, 3]), values(&[3])], op)
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref().is_some_and(|e| e.contains("micro-batch 1")),
            "{op:?}: {err:?}"
        );
    }
}
