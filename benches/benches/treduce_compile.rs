#![allow(missing_docs)] // criterion_group! generates undocumented functions.
#![allow(clippy::unwrap_used)] // benchmark code: a failed unwrap is a failed run

//! Compile time of a `jit` training step whose micro-batch loop is a `treduce` (the loop of
//! `value_and_grad_call(loss)` then SGD, as `tessera train` writes it), with 8 and 64
//! micro-batches: lowering to StableHLO plus XLA's compile through PJRT. `treduce` lowers to one
//! `stablehlo.while`, so the time should not grow with the micro-batch count; the unrolled
//! lowering (`lower_closed_unrolled`) is measured beside it for comparison.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tessera_ir::trace::{trace, treduce, value_and_grad_call};
use tessera_ir::{ClosedJaxpr, DType, ShapedArray};
use tessera_pjrt::{Client, CompileOptions};
use tessera_stablehlo::{LowerOptions, lower_closed, lower_closed_unrolled};

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

/// A two-layer MLP's squared error on one micro-batch of 8 rows.
fn loss() -> ClosedJaxpr {
    trace(
        &[f32(&[16, 32]), f32(&[32, 4]), f32(&[8, 16]), f32(&[8, 4])],
        |a| {
            let h = a[2].matmul(&a[0]).tanh();
            let err = &h.matmul(&a[1]) - &a[3];
            vec![err.integer_pow(2).sum(&[0, 1])]
        },
    )
    .unwrap()
}

/// One SGD step over `m` micro-batches: losses and summed gradients from a `treduce`.
fn step(m: i64) -> ClosedJaxpr {
    let loss = loss();
    trace(
        &[
            f32(&[16, 32]),
            f32(&[32, 4]),
            f32(&[m, 8, 16]),
            f32(&[m, 8, 4]),
        ],
        |a| {
            let outs = treduce(&[&a[0], &a[1]], &[&a[2], &a[3]], 0, "1f1b", &[], |p, mb| {
                value_and_grad_call(&loss, &[0, 1], &[&p[0], &p[1], &mb[0], &mb[1]])
            });
            let w1 = &a[0] - &(&outs[1] * 0.01);
            let w2 = &a[1] - &(&outs[2] * 0.01);
            vec![w1, w2, outs[0].sum(&[0])]
        },
    )
    .unwrap()
}

/// A lowering entry point (`lower_closed` or `lower_closed_unrolled`).
type Lower = fn(
    &ClosedJaxpr,
    &LowerOptions,
) -> Result<tessera_stablehlo::EmittedModule, tessera_stablehlo::LowerError>;

fn compile(c: &mut Criterion) {
    let client = Client::cpu(1).unwrap();
    let options = LowerOptions {
        num_partitions: 1,
        ..LowerOptions::default()
    };
    let mut group = c.benchmark_group("jit step compile");
    for m in [8i64, 64] {
        let program = step(m);
        let lowerings: [(&str, Lower); 2] =
            [("while", lower_closed), ("unrolled", lower_closed_unrolled)];
        for (name, lower) in lowerings {
            group.bench_with_input(BenchmarkId::new(name, m), &program, |b, p| {
                b.iter(|| {
                    let module = lower(p, &options).unwrap();
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
