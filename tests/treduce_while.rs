//! `treduce` under `jit` lowers to one `stablehlo.while` (the unrolled form stays available as
//! `lower_closed_unrolled`): with `Concat`, `Add` and `Max` results, a loop invariant, a nested
//! `jit` in the body, and the loop's gradient (itself a loop), PJRT gives the interpreter's
//! values either way, and the while module does not grow with the micro-batch count.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::autodiff::value_and_grad;
use tessera_ir::interp::eval_closed;
use tessera_ir::prim::ReduceOp;
use tessera_ir::trace::{jit, trace, treduce};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_stablehlo::{LowerOptions, lower_closed, lower_closed_unrolled};

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

fn values(shape: &[i64], seed: f64) -> Array {
    let n: i64 = shape.iter().product();
    let data = (0..n).map(|i| (i as f64 * 0.61 + seed).sin()).collect();
    Array::new(DType::F32, shape, data).unwrap()
}

/// A loop over `m` micro-batches along axis 1 of `[2, m, 4]`, with invariant `w: [4]`.
fn program(m: i64) -> ClosedJaxpr {
    trace(&[f32(&[4]), f32(&[2, m, 4])], |a| {
        let ops = [ReduceOp::Concat(1), ReduceOp::Add, ReduceOp::Max];
        treduce(&[&a[0]], &[&a[1]], 1, "gpipe", &ops, |w, x| {
            let y = jit("scale", &[&x[0], &w[0]], |b| vec![(&b[0] * &b[1]).tanh()]).remove(0);
            vec![y.clone(), y.sum(&[1]), x[0].clone()]
        })
    })
    .unwrap()
}

fn run(program: &ClosedJaxpr, inputs: &[Array], unrolled: bool) -> (Vec<Array>, String) {
    let options = LowerOptions {
        num_partitions: 1,
        ..LowerOptions::default()
    };
    let module = if unrolled {
        lower_closed_unrolled(program, &options).unwrap()
    } else {
        lower_closed(program, &options).unwrap()
    };
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let exe = tessera::jit::compile_module(&client, &module, &[0]).unwrap();
    let buffers: Vec<_> = inputs
        .iter()
        .map(|a| {
            tessera_pjrt::Buffer::from_host_to(&client, &tessera::jit::to_host(a).unwrap(), 0)
                .unwrap()
        })
        .collect();
    let outs = exe.execute(&[buffers.iter().collect()]).unwrap();
    let arrays = outs[0]
        .iter()
        .zip(program.jaxpr.out_avals())
        .map(|(b, aval)| tessera::jit::from_host(&b.to_host().unwrap(), aval.dtype).unwrap())
        .collect();
    (arrays, module.text)
}

fn assert_close(got: &[Array], want: &[Array], what: &str) {
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.shape(), w.shape(), "{what}: output {k}");
        for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                "{what}: output {k}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn a_loop_lowers_to_one_while_with_the_interpreters_values() {
    let program = program(3);
    let inputs = [values(&[4], 0.0), values(&[2, 3, 4], 1.0)];
    let want = eval_closed(&program, &inputs).unwrap();
    let (got, text) = run(&program, &inputs, false);
    assert_eq!(text.matches("stablehlo.while").count(), 1, "{text}");
    assert_close(&got, &want, "while");
    let (unrolled, text) = run(&program, &inputs, true);
    assert!(!text.contains("stablehlo.while"));
    assert_close(&unrolled, &want, "unrolled");
}

#[test]
fn the_gradient_of_a_loop_runs_as_a_loop() {
    let loss = trace(&[f32(&[4]), f32(&[2, 5, 4])], |a| {
        let outs = treduce(&[&a[0]], &[&a[1]], 1, "gpipe", &[], |w, x| {
            let y = (&x[0] * &w[0]).tanh();
            vec![y.sum(&[0, 1]).reshape(&[1]), y.sum(&[0])]
        });
        vec![outs[0].sum(&[0, 1])]
    })
    .unwrap();
    let step = value_and_grad(&loss, &[0, 1]).unwrap();
    let inputs = [values(&[4], 0.3), values(&[2, 5, 4], 2.0)];
    let want = eval_closed(&step, &inputs).unwrap();
    let (got, text) = run(&step, &inputs, false);
    assert!(text.contains("stablehlo.while"), "{text}");
    assert_close(&got, &want, "gradient");
}

#[test]
fn the_while_module_does_not_grow_with_the_micro_batch_count() {
    let size = |m: i64, unrolled: bool| {
        let options = LowerOptions {
            num_partitions: 1,
            ..LowerOptions::default()
        };
        let module = if unrolled {
            lower_closed_unrolled(&program(m), &options).unwrap()
        } else {
            lower_closed(&program(m), &options).unwrap()
        };
        module.text.lines().count()
    };
    assert_eq!(size(8, false), size(64, false));
    assert!(size(64, true) > 4 * size(8, true));
}
