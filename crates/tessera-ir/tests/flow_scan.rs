//! `scan` and `fori_loop` through the tracing API: the same values as the loop written out,
//! programs (and their derivatives) whose size does not grow with the trip count, and errors for
//! malformed loops.

#![allow(clippy::unwrap_used, missing_docs)]

mod prims;

use prims::{Rng, assert_close, index_axis, stack};
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{Tensor, fori_loop, scan, trace};
use tessera_ir::{Array, ClosedJaxpr, DType, Prim, ShapedArray, vjp};

fn f64s(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F64, shape)
}

fn step(w: &Tensor, h: &Tensor, x: &Tensor) -> (Tensor, Tensor) {
    let h1 = (&h.matmul(w) + x).tanh();
    let y = h1.sum(&[1]);
    (h1, y)
}

/// A scan over `n` layers' inputs, forwards or in reverse, and the same loop written out (its
/// results: the final carry, then each step's `y`).
fn scanned_and_unrolled(n: i64, reverse: bool) -> (ClosedJaxpr, ClosedJaxpr) {
    let avals = [f64s(&[3, 3]), f64s(&[2, 3]), f64s(&[n, 2, 3])];
    let scanned = trace(&avals, |a| {
        let (carry, ys) = scan(&[&a[0]], &[&a[1]], &[&a[2]], None, reverse, |c, h, x| {
            let (h1, y) = step(&c[0], &h[0], &x[0]);
            (vec![h1], vec![y])
        });
        vec![carry[0].clone(), ys[0].clone()]
    })
    .unwrap();
    let unrolled = trace(&avals, |a| {
        let mut h = a[1].clone();
        let mut ys: Vec<Option<Tensor>> = vec![None; n as usize];
        let order: Vec<i64> = if reverse {
            (0..n).rev().collect()
        } else {
            (0..n).collect()
        };
        for k in order {
            let x = Tensor::slice_axis(&a[2], 0, k, k + 1).reshape(&[2, 3]);
            let (h1, y) = step(&a[0], &h, &x);
            h = h1;
            ys[k as usize] = Some(y);
        }
        std::iter::once(h).chain(ys.into_iter().flatten()).collect()
    })
    .unwrap();
    (scanned, unrolled)
}

fn eval(p: &ClosedJaxpr, args: &[Array]) -> Vec<Array> {
    eval_closed(p, args).unwrap()
}

#[test]
fn scan_equals_the_loop_written_out_with_its_gradients() {
    for reverse in [false, true] {
        let (scanned, unrolled) = scanned_and_unrolled(4, reverse);
        let mut rng = Rng(5);
        let args: Vec<Array> = scanned
            .jaxpr
            .in_avals()
            .iter()
            .map(|a| rng.array(a))
            .collect();
        let got = eval(&scanned, &args);
        let want = eval(&unrolled, &args);
        assert_close(
            &format!("carry, reverse {reverse}"),
            &got[0],
            &want[0],
            1e-12,
        );
        let ys_aval = scanned.jaxpr.out_avals()[1].clone();
        assert_close(
            &format!("ys, reverse {reverse}"),
            &got[1],
            &stack(&want[1..], 0, &ys_aval),
            1e-12,
        );
        let cts: Vec<Array> = scanned
            .jaxpr
            .out_avals()
            .iter()
            .map(|a| rng.direction(a))
            .collect();
        let all: Vec<Array> = args.iter().chain(&cts).cloned().collect();
        let got = eval(&vjp(&scanned).unwrap(), &all);
        let mut split: Vec<Array> = args
            .iter()
            .chain(std::iter::once(&cts[0]))
            .cloned()
            .collect();
        split.extend((0..4).map(|k| index_axis(&cts[1], 0, k)));
        let want = eval(&vjp(&unrolled).unwrap(), &split);
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("gradient {k}, reverse {reverse}"), a, b, 1e-10);
        }
    }
}

fn eqn_count(p: &ClosedJaxpr) -> usize {
    p.jaxpr.eqns.len()
}

#[test]
fn programs_and_their_derivatives_do_not_grow_with_the_trip_count() {
    let (short, _) = scanned_and_unrolled(4, false);
    let (long, _) = scanned_and_unrolled(32, false);
    assert_eq!(eqn_count(&short), eqn_count(&long));
    assert_eq!(
        short
            .jaxpr
            .eqns
            .iter()
            .filter(|e| e.prim == Prim::Scan)
            .count(),
        1
    );
    let (short_vjp, long_vjp) = (vjp(&short).unwrap(), vjp(&long).unwrap());
    assert_eq!(eqn_count(&short_vjp), eqn_count(&long_vjp));
    assert!(short_vjp.jaxpr.eqns.iter().any(|e| e.prim == Prim::Scan));
    // The loops' bodies are flat (no nested calls), so evaluators that need one flat program
    // per loop body get one.
    for e in short_vjp.jaxpr.eqns.iter().filter(|e| e.prim == Prim::Scan) {
        let body = e.params.jaxpr("scan", "jaxpr").unwrap();
        assert!(body.jaxpr.eqns.iter().all(|b| b.prim != Prim::Jit));
    }
}

#[test]
fn fori_loop_carries_the_counter_like_jax() {
    let program = trace(&[f64s(&[3])], |a| {
        fori_loop(2, 6, &[], &[&a[0]], |_, i, h| {
            vec![&h[0].sin() + &i.astype(DType::F64)]
        })
    })
    .unwrap();
    let x = Array::new(DType::F64, &[3], vec![0.1, 0.2, 0.3]).unwrap();
    let got = eval(&program, std::slice::from_ref(&x))[0].to_vec();
    let want: Vec<f64> = x
        .to_vec()
        .iter()
        .map(|&v| (2..6).fold(v, |h, i| h.sin() + i as f64))
        .collect();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
    }
    let text = tessera_ir::text::print_closed(&program, 0);
    assert!(
        text.contains("num_carry=2") && text.contains("length=4"),
        "{text}"
    );
    assert!(text.contains("] 2:i32[] a"), "{text}");
}

#[test]
fn malformed_loops_are_errors_saying_what_is_wrong() {
    let err = |f: &dyn Fn(&[Tensor]) -> Vec<Tensor>| {
        trace(&[f64s(&[3]), f64s(&[4, 3]), f64s(&[5, 3])], f)
            .unwrap_err()
            .to_string()
    };
    let e = err(&|a| {
        let (c, _) = scan(&[], &[&a[0]], &[&a[1], &a[2]], None, false, |_, h, _| {
            (vec![h[0].clone()], vec![])
        });
        c
    });
    assert!(e.contains("leading dimension of length 4"), "{e}");
    let e = err(&|a| {
        let (c, _) = scan(&[], &[&a[0]], &[&a[1]], None, false, |_, h, _| {
            (vec![h[0].clone(), h[0].clone()], vec![])
        });
        c
    });
    assert!(e.contains("returns 2 carries for 1 initial carries"), "{e}");
    let e = err(&|a| {
        let (c, _) = scan(&[], &[&a[0]], &[&a[1]], None, false, |_, h, _| {
            (vec![h[0].astype(DType::F32)], vec![])
        });
        c
    });
    assert!(e.contains("must be the carries (f64[3])"), "{e}");
    let e = err(&|a| {
        let (c, _) = scan(&[], &[&a[0]], &[], None, false, |_, h, _| {
            (vec![h[0].clone()], vec![])
        });
        c
    });
    assert!(e.contains("needs `length`"), "{e}");
}

/// A scan as JAX versions that print `_split_transpose` and `linear` write it, with an unused
/// stacked result (`_`).
const JAX_SCAN: &str = "{ lambda ; a:f32[]. let
    b:f32[] _:f32[4] = scan[
      _split_transpose=False
      jaxpr={ lambda ; c:f32[]. let
          d:f32[] = mul 0.5:f32[] c
          e:f32[] = add d 1.0:f32[]
        in (e, e) }
      length=4
      linear=(False,)
      num_carry=1
      num_consts=0
      reverse=False
      unroll=1
    ] a
  in (b,) }";

#[test]
fn every_scan_parameter_jax_prints_is_read_and_printed_back() {
    let f = tessera_ir::text::parse_closed(JAX_SCAN).unwrap();
    tessera_ir::verify(&f).unwrap();
    // Printed back as JAX wrote it, but for the name of the unused result (Tessera prints no `_`).
    let printed = tessera_ir::text::print_closed(&f, 0);
    let named = JAX_SCAN
        .replace("_:f32[4]", "c:f32[4]")
        .replace("c:f32[]. let", "d:f32[]. let")
        .replace("0.5:f32[] c", "0.5:f32[] d")
        .replace("d:f32[] = mul", "e:f32[] = mul")
        .replace("add d 1.0", "add e 1.0")
        .replace("e:f32[] = add", "f:f32[] = add")
        .replace("(e, e)", "(f, f)");
    assert_eq!(printed, named);
    assert_eq!(tessera_ir::text::parse_closed(&printed).unwrap(), f);
    let x = Array::scalar(DType::F32, 0.0);
    assert_eq!(eval(&f, std::slice::from_ref(&x))[0].to_vec(), vec![1.875]);
    let d = eval(
        &tessera_ir::jvp(&f).unwrap(),
        &[x, Array::scalar(DType::F32, 1.0)],
    );
    assert_eq!(d[1].to_vec(), vec![0.0625]);
}
