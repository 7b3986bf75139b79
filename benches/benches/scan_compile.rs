#![allow(missing_docs)] // criterion_group! generates undocumented functions.
#![allow(clippy::unwrap_used)] // benchmark code: a failed unwrap is a failed run

//! Compile time of a `jit` training step over a stack of layers, with 4 and 32 layers: lowering
//! to StableHLO plus XLA's compile through PJRT. The layers run under `scan` (stacked weights,
//! one traced body), which lowers to `stablehlo.while` (the forward and both scans of its VJP),
//! so the time should not grow with the number of layers; the same model with the layers written
//! out one by one (a Rust loop at trace time) is measured beside it for comparison.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tessera_ir::trace::{Tensor, scan, trace};
use tessera_ir::{ClosedJaxpr, DType, ShapedArray, value_and_grad};
use tessera_pjrt::{Client, CompileOptions};
use tessera_stablehlo::{LowerOptions, lower_closed};

const WIDTH: i64 = 64;
const BATCH: i64 = 8;

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

fn layer(h: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    (&h.matmul(w) + b).tanh()
}

/// The loss of `layers` layers (`h = tanh(h W_l + b_l)`, then the mean square), the layers under
/// `scan` or written out.
fn loss(layers: i64, scanned: bool) -> ClosedJaxpr {
    let avals = [
        f32(&[layers, WIDTH, WIDTH]),
        f32(&[layers, 1, WIDTH]),
        f32(&[BATCH, WIDTH]),
    ];
    trace(&avals, |a| {
        let h = if scanned {
            let (carry, _) = scan(&[], &[&a[2]], &[&a[0], &a[1]], None, false, |_, h, wb| {
                (vec![layer(&h[0], &wb[0], &wb[1])], vec![])
            });
            carry[0].clone()
        } else {
            (0..layers).fold(a[2].clone(), |h, l| {
                let w = Tensor::slice_axis(&a[0], 0, l, l + 1).reshape(&[WIDTH, WIDTH]);
                let b = Tensor::slice_axis(&a[1], 0, l, l + 1).reshape(&[1, WIDTH]);
                layer(&h, &w, &b)
            })
        };
        vec![&(&h * &h).sum(&[0, 1]) * (1.0 / (BATCH * WIDTH) as f64)]
    })
    .unwrap()
}

/// One SGD step: the loss and its gradients, then the update.
fn step(layers: i64, scanned: bool) -> ClosedJaxpr {
    let grads = value_and_grad(&loss(layers, scanned), &[0, 1]).unwrap();
    let avals = grads.jaxpr.in_avals();
    trace(&avals, |a| {
        let refs: Vec<&Tensor> = a.iter().collect();
        let outs = tessera_ir::trace::call_closed(&grads, &refs);
        let w = &a[0] - &(&outs[1] * 0.1);
        let b = &a[1] - &(&outs[2] * 0.1);
        vec![w, b, outs[0].clone()]
    })
    .unwrap()
}

fn compile(c: &mut Criterion) {
    let client = Client::cpu(1).unwrap();
    let options = LowerOptions {
        num_partitions: 1,
        ..LowerOptions::default()
    };
    let mut group = c.benchmark_group("scanned layers step compile");
    for (name, scanned) in [("scan", true), ("unrolled", false)] {
        for layers in [4i64, 32] {
            let program = step(layers, scanned);
            group.bench_with_input(BenchmarkId::new(name, layers), &program, |b, p| {
                b.iter(|| {
                    let module = lower_closed(p, &options).unwrap();
                    client
                        .compile(module.text.as_bytes(), &CompileOptions::spmd(&[0]))
                        .unwrap()
                })
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(std::time::Duration::from_secs(5));
    targets = compile
}
criterion_main!(benches);
