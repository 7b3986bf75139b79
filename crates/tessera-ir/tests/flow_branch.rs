//! `cond`/`switch` and `while_loop`/`fori_loop_dynamic` through the tracing API: values, the
//! index clamped as JAX's `switch` does, forward-mode derivatives of loops and the refusal of
//! their reverse mode, errors for malformed branches, and JAX's printed form.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::interp::eval_closed;
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::{Branch, Tensor, cond, fori_loop_dynamic, switch, trace, while_loop};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray, jvp, vjp};

fn aval(dtype: DType, shape: &[i64]) -> ShapedArray {
    ShapedArray::new(dtype, shape)
}

fn scalar(dtype: DType, v: f64) -> Array {
    Array::scalar(dtype, v)
}

fn three_way() -> ClosedJaxpr {
    trace(&[aval(DType::I32, &[]), aval(DType::F64, &[2])], |a| {
        let branches: Vec<Branch<'_>> = vec![
            Box::new(|x: &[Tensor]| vec![x[0].sin()]),
            Box::new(|x: &[Tensor]| vec![&x[0] * 2.0]),
            Box::new(|x: &[Tensor]| vec![x[0].exp()]),
        ];
        switch(&a[0], &[&a[1]], branches)
    })
    .unwrap()
}

#[test]
fn switch_runs_the_indexed_branch_with_the_index_clamped() {
    let f = three_way();
    let x = Array::new(DType::F64, &[2], vec![0.5, -1.0]).unwrap();
    for (index, want) in [
        (-4.0, [0.5f64.sin(), (-1.0f64).sin()]),
        (0.0, [0.5f64.sin(), (-1.0f64).sin()]),
        (1.0, [1.0, -2.0]),
        (2.0, [0.5f64.exp(), (-1.0f64).exp()]),
        (9.0, [0.5f64.exp(), (-1.0f64).exp()]),
    ] {
        let got = eval_closed(&f, &[scalar(DType::I32, index), x.clone()]).unwrap();
        assert_eq!(got[0].to_vec(), want.to_vec(), "index {index}");
    }
    // Gradients flow through the branch taken; the index gets none.
    let g = eval_closed(
        &vjp(&f).unwrap(),
        &[
            scalar(DType::I32, 1.0),
            x,
            Array::new(DType::F64, &[2], vec![1.0, 3.0]).unwrap(),
        ],
    )
    .unwrap();
    assert_eq!(g[1].to_vec(), vec![2.0, 6.0]);
}

#[test]
fn cond_prints_like_jax_and_parses_back() {
    let f = trace(&[aval(DType::F64, &[]), aval(DType::F64, &[3])], |a| {
        let pred = a[0].lt(&a[0].full_like_scalar(0.0));
        cond(&pred, &[&a[1]], |x| vec![x[0].cos()], |x| vec![x[0].sin()])
    })
    .unwrap();
    let text = print_closed(&f, 0);
    assert!(
        text.contains("      branches=(\n        { lambda ; "),
        "{text}"
    );
    assert!(
        text.contains("in (g,) }\n        { lambda ; h:f64[3]. let"),
        "{text}"
    );
    assert!(text.contains("      )\n    ] d b\n"), "{text}");
    assert_eq!(parse_closed(&text).unwrap(), f);
    let x = Array::new(DType::F64, &[3], vec![0.0, 1.0, 2.0]).unwrap();
    let neg = eval_closed(&f, &[scalar(DType::F64, -1.0), x.clone()]).unwrap();
    assert_eq!(neg[0].to_vec(), vec![1.0, 1.0f64.cos(), 2.0f64.cos()]);
    let pos = eval_closed(&f, &[scalar(DType::F64, 1.0), x]).unwrap();
    assert_eq!(pos[0].to_vec(), vec![0.0, 1.0f64.sin(), 2.0f64.sin()]);
}

/// Newton's iteration for sqrt(c) until converged: a trip count known only at run time.
fn newton() -> ClosedJaxpr {
    trace(&[aval(DType::F64, &[])], |a| {
        let init = &a[0] * 1.0;
        while_loop(
            &[&a[0]],
            &[&init],
            |c, h| {
                let err = (&(&h[0] * &h[0]) - &c[0]).abs();
                err.ge(&(&c[0] * 1e-12))
            },
            |c, h| vec![&(&h[0] + &(&c[0] / &h[0])) * 0.5],
        )
    })
    .unwrap()
}

#[test]
fn while_loops_run_until_the_condition_fails_and_differentiate_forward() {
    let f = newton();
    let got = eval_closed(&f, &[scalar(DType::F64, 9.0)]).unwrap();
    assert!((got[0].to_vec()[0] - 3.0).abs() < 1e-9, "{:?}", got[0]);
    // d sqrt(c) / dc = 1 / (2 sqrt(c)), through the converged iteration.
    let d = eval_closed(
        &jvp(&f).unwrap(),
        &[scalar(DType::F64, 9.0), scalar(DType::F64, 1.0)],
    )
    .unwrap();
    assert!((d[1].to_vec()[0] - 1.0 / 6.0).abs() < 1e-6, "{:?}", d[1]);
    let err = vjp(&f).unwrap_err().to_string();
    assert!(
        err.contains("reverse-mode differentiation of a while loop is not supported"),
        "{err}"
    );
    assert!(
        err.contains("use scan or fori_loop with a static trip count"),
        "{err}"
    );
}

#[test]
fn fori_loop_dynamic_takes_its_bounds_at_run_time() {
    let f = trace(
        &[
            aval(DType::I32, &[]),
            aval(DType::I32, &[]),
            aval(DType::F64, &[2]),
        ],
        |a| {
            fori_loop_dynamic(&a[0], &a[1], &[], &[&a[2]], |_, i, h| {
                vec![&h[0] + &i.astype(DType::F64)]
            })
        },
    )
    .unwrap();
    let x = Array::new(DType::F64, &[2], vec![0.0, 1.0]).unwrap();
    for (lo, hi, add) in [(0.0, 4.0, 6.0), (2.0, 5.0, 9.0), (3.0, 1.0, 0.0)] {
        let got = eval_closed(
            &f,
            &[scalar(DType::I32, lo), scalar(DType::I32, hi), x.clone()],
        )
        .unwrap();
        assert_eq!(got[0].to_vec(), vec![add, 1.0 + add], "{lo}..{hi}");
    }
}

#[test]
fn malformed_branches_and_conditions_are_errors() {
    let e = trace(&[aval(DType::I32, &[]), aval(DType::F64, &[2])], |a| {
        let branches: Vec<Branch<'_>> = vec![
            Box::new(|x: &[Tensor]| vec![x[0].sin()]),
            Box::new(|x: &[Tensor]| vec![x[0].sum(&[0])]),
        ];
        switch(&a[0], &[&a[1]], branches)
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("branch 1 returns (f64[]) but branch 0 returns (f64[2])"),
        "{e}"
    );
    let e = trace(&[aval(DType::F64, &[]), aval(DType::F64, &[2])], |a| {
        cond(&a[0], &[&a[1]], |x| vec![x[0].sin()], |x| vec![x[0].cos()])
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("the predicate must be a bool scalar, got f64[]"),
        "{e}"
    );
    let e = trace(&[aval(DType::F64, &[2])], |a| {
        while_loop(
            &[],
            &[&a[0]],
            |_, h| h[0].sum(&[0]),
            |_, h| vec![h[0].sin()],
        )
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("the condition is (f64[2]) -> (f64[])"), "{e}");
}

/// `lax.fori_loop` with a trip count known at run time, in JAX's printed form.
const JAX_WHILE: &str = "{ lambda ; a:i32[] b:f64[3]. let
    c:i32[] d:i32[] e:f64[3] = while[
      body_jaxpr={ lambda ; f:i32[] g:i32[] h:f64[3]. let
          i:i32[] = add f 1:i32[]
          j:f64[3] = sin h
        in (i, g, j) }
      body_nconsts=0
      cond_jaxpr={ lambda ; k:i32[] l:i32[] m:f64[3]. let
          n:bool[] = lt k l
        in (n,) }
      cond_nconsts=0
    ] 0:i32[] a b
  in (e,) }";

#[test]
fn a_while_loop_printed_by_jax_runs_and_differentiates_forward() {
    let f = parse_closed(JAX_WHILE).unwrap();
    tessera_ir::verify(&f).unwrap();
    assert_eq!(print_closed(&f, 0), JAX_WHILE);
    let x = Array::new(DType::F64, &[3], vec![0.5, 1.0, 2.0]).unwrap();
    let out = eval_closed(&f, &[scalar(DType::I32, 3.0), x.clone()]).unwrap();
    let want: Vec<f64> = x.to_vec().iter().map(|v| v.sin().sin().sin()).collect();
    assert_eq!(out[0].to_vec(), want);
    let t = Array::new(DType::F64, &[3], vec![1.0, 1.0, 1.0]).unwrap();
    let d = eval_closed(
        &jvp(&f).unwrap(),
        &[
            scalar(DType::I32, 2.0),
            x.clone(),
            scalar(DType::I32, 0.0),
            t,
        ],
    )
    .unwrap();
    let want: Vec<f64> = x.to_vec().iter().map(|v| v.sin().cos() * v.cos()).collect();
    for (g, w) in d[1].to_vec().iter().zip(&want) {
        assert!((g - w).abs() < 1e-12, "{:?} vs {want:?}", d[1]);
    }
    assert!(vjp(&f).is_err());
}
