//! Control flow and custom derivatives built with the tracing API, differentiated, lowered to
//! StableHLO and run on PJRT: the same values as the reference interpreter.

#![allow(clippy::unwrap_used)]

use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{
    Branch, Tensor, custom_jvp, custom_vjp, fori_loop, fori_loop_dynamic, scan, switch, trace,
};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray, jvp, vjp, vmap};

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

#[test]
fn scans_and_their_gradients_lower_to_while_loops_on_pjrt() {
    for reverse in [false, true] {
        let avals = [f32s(&[3, 3]), f32s(&[2, 3]), f32s(&[5, 2, 3])];
        let program = trace(&avals, |a| {
            let (carry, ys) = scan(&[&a[0]], &[&a[1]], &[&a[2]], None, reverse, |c, h, x| {
                let h1 = (&h[0].matmul(&c[0]) + &x[0]).tanh();
                let y = h1.sum(&[1]);
                (vec![h1], vec![y])
            });
            let total = fori_loop(0, 3, &[], &[&carry[0]], |_, i, h| {
                vec![&h[0].sin() + &i.astype(DType::F32)]
            });
            vec![total[0].clone(), ys[0].clone()]
        })
        .unwrap();
        let args = [
            ramp(&[3, 3], 0.1),
            ramp(&[2, 3], 0.2),
            ramp(&[5, 2, 3], 0.05),
        ];
        let what = format!("scan (reverse {reverse})");
        agree(&what, &program, &args);
        let mut with_cts = args.to_vec();
        with_cts.extend([ramp(&[2, 3], 0.3), ramp(&[5, 2], 0.1)]);
        agree(&format!("{what} vjp"), &vjp(&program).unwrap(), &with_cts);
    }
}

#[test]
fn a_scan_and_its_gradient_lower_to_whiles_whose_size_does_not_grow_with_the_length() {
    let text_for = |n: i64| {
        let program = trace(&[f32s(&[2, 3]), f32s(&[n, 3, 3])], |a| {
            let (carry, _) = scan(&[], &[&a[0]], &[&a[1]], None, false, |_, h, w| {
                (vec![h[0].matmul(&w[0]).tanh()], vec![])
            });
            vec![carry[0].sum(&[0, 1])]
        })
        .unwrap();
        let step = tessera_ir::value_and_grad(&program, &[0, 1]).unwrap();
        let options = tessera_stablehlo::LowerOptions {
            num_partitions: 1,
            ..tessera_stablehlo::LowerOptions::default()
        };
        tessera_stablehlo::lower_closed(&step, &options)
            .unwrap()
            .text
    };
    let (short, long) = (text_for(4), text_for(32));
    assert!(short.matches("stablehlo.while").count() >= 2, "{short}");
    assert_eq!(short.lines().count(), long.lines().count());
    assert_eq!(
        short.matches("stablehlo.tanh").count(),
        long.matches("stablehlo.tanh").count()
    );
}

fn ints(values: &[f64]) -> Array {
    Array::new(DType::I32, &[values.len() as i64], values.to_vec()).unwrap()
}

#[test]
fn switch_and_while_lower_to_case_and_while_on_pjrt_batched_or_not() {
    let i32_scalar = ShapedArray::new(DType::I32, &[]);
    let program = trace(&[i32_scalar.clone(), f32s(&[3])], |a| {
        let branches: Vec<Branch<'_>> = vec![
            Box::new(|x: &[Tensor]| vec![x[0].sin()]),
            Box::new(|x: &[Tensor]| vec![&x[0] * 2.0]),
            Box::new(|x: &[Tensor]| vec![x[0].tanh()]),
        ];
        let y = switch(&a[0], &[&a[1]], branches);
        let zero = a[0].full_like_scalar(0.0);
        fori_loop_dynamic(&zero, &a[0], &[], &[&y[0]], |_, i, h| {
            vec![&h[0].cos() + &i.astype(DType::F32)]
        })
    })
    .unwrap();
    let x = ramp(&[3], 0.3);
    for index in [0.0, 1.0, 2.0, 5.0] {
        let args = [Array::scalar(DType::I32, index), x.clone()];
        agree(&format!("switch + while, index {index}"), &program, &args);
        let tangents = [Array::scalar(DType::I32, 0.0), ramp(&[3], 0.1)];
        let all: Vec<Array> = args.iter().chain(&tangents).cloned().collect();
        agree(
            &format!("jvp, index {index}"),
            &jvp(&program).unwrap(),
            &all,
        );
    }
    // A batched index: every branch runs and is selected; the loop runs while any runs.
    let batched = vmap(&program, &[Some(0), Some(0)], &[0], 4).unwrap();
    let args = [ints(&[0.0, 1.0, 2.0, 3.0]), ramp(&[4, 3], 0.2)];
    agree("vmap of switch + while", &batched, &args);
}

#[test]
fn the_gradient_of_a_switch_runs_on_pjrt() {
    let program = trace(&[ShapedArray::new(DType::I32, &[]), f32s(&[2, 3])], |a| {
        let branches: Vec<Branch<'_>> = vec![
            Box::new(|x: &[Tensor]| vec![x[0].sin()]),
            Box::new(|x: &[Tensor]| vec![&x[0] * &x[0]]),
        ];
        switch(&a[0], &[&a[1]], branches)
    })
    .unwrap();
    let step = vjp(&program).unwrap();
    for index in [0.0, 1.0] {
        let args = [
            Array::scalar(DType::I32, index),
            ramp(&[2, 3], 0.3),
            ramp(&[2, 3], 0.5),
        ];
        agree(&format!("switch vjp, index {index}"), &step, &args);
    }
}
