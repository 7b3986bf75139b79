#![allow(missing_docs)] // criterion_group! generates undocumented functions.
#![allow(clippy::unwrap_used)] // benchmark code: a failed unwrap is a failed run

//! Lowering cost: tracing is excluded; each measurement lowers a closed jaxpr to a verified
//! StableHLO module with melior. Programs of 100 and 1000 equations give the per-equation cost
//! (the slope) apart from the fixed cost of a module; a `shard_map` with collectives shows the
//! cost of the manual-SPMD wrappers.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tessera_ir::trace::{shard_map_program, trace};
use tessera_ir::{ClosedJaxpr, DType, ShapedArray};
use tessera_sharding::{AbstractMesh, PartitionSpec};
use tessera_stablehlo::{LowerOptions, lower_closed};

/// `n` equations: a chain of elementwise ops and matmuls on a 64×64 value.
fn chain(n: usize) -> ClosedJaxpr {
    let f32 = ShapedArray::new(DType::F32, &[64, 64]);
    trace(&[f32.clone(), f32], |a| {
        let mut h = a[0].clone();
        for i in 0..n / 2 {
            h = if i % 4 == 0 {
                h.matmul(&a[1])
            } else {
                (&h * 0.5).tanh()
            };
        }
        vec![h]
    })
    .unwrap()
}

fn shard_mapped() -> ClosedJaxpr {
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 4)]).unwrap();
    let spec = PartitionSpec::parse("P(('x', 'y'))").unwrap();
    let aval = ShapedArray::new(DType::F32, &[64, 64]);
    shard_map_program(
        &mesh,
        std::slice::from_ref(&spec),
        std::slice::from_ref(&spec),
        &[aval],
        |a| {
            let s = a[0].psum(&["y"]).all_gather("x", 0, true);
            vec![
                s.psum_scatter("x", 0, true)
                    .ppermute("y", &[(0, 1), (1, 2), (2, 3), (3, 0)]),
            ]
        },
    )
    .unwrap()
}

fn lowering(c: &mut Criterion) {
    let options = LowerOptions {
        num_partitions: 1,
        ..LowerOptions::default()
    };
    let mut group = c.benchmark_group("lower");
    for n in [100usize, 1000] {
        let program = chain(n);
        let eqns = program.jaxpr.eqns.len() as u64;
        group.throughput(Throughput::Elements(eqns));
        group.bench_with_input(
            BenchmarkId::new("chain, equations", eqns),
            &program,
            |b, p| b.iter(|| lower_closed(p, &options).unwrap()),
        );
    }
    let program = shard_mapped();
    let spmd = LowerOptions {
        num_partitions: 8,
        ..LowerOptions::default()
    };
    group.throughput(Throughput::Elements(1));
    group.bench_function("shard_map with 4 collectives", |b| {
        b.iter(|| lower_closed(&program, &spmd).unwrap())
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(3));
    targets = lowering
}
criterion_main!(benches);
