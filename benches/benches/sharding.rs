//! Benchmarks of tessera-sharding: NamedSharding → HloSharding conversion and HloSharding parsing.

// `criterion_group!` generates an undocumented function.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use tessera_sharding::{AbstractMesh, AxisType, HloSharding, Mesh, NamedSharding, PartitionSpec};

fn named(axes: &[(&str, i64, AxisType)], spec: &str) -> NamedSharding {
    let names: Vec<&str> = axes.iter().map(|a| a.0).collect();
    let sizes: Vec<i64> = axes.iter().map(|a| a.1).collect();
    let types: Vec<AxisType> = axes.iter().map(|a| a.2).collect();
    let mesh = Mesh::iota(AbstractMesh::new(&names, &sizes, &types).expect("valid mesh"));
    NamedSharding::new(&mesh, PartitionSpec::parse(spec).expect("valid spec")).expect("valid")
}

fn conversion(c: &mut Criterion) {
    use AxisType::{Auto, Manual};
    let tiled = named(&[("x", 2, Auto), ("y", 4, Auto)], "P('x', 'y')");
    let partial = named(
        &[
            ("a", 2, Auto),
            ("b", 2, Auto),
            ("c", 2, Auto),
            ("d", 2, Auto),
        ],
        "P(None, ('d', 'b'), 'c')",
    );
    let manual = named(
        &[("dp", 4, Auto), ("pp", 4, Manual), ("tp", 8, Auto)],
        "P('tp', None)",
    );
    let mut g = c.benchmark_group("named_to_hlo");
    g.bench_function("tiled_2x4", |b| {
        b.iter(|| black_box(&tiled).to_hlo_sharding(2))
    });
    g.bench_function("partial_2x2x2x2", |b| {
        b.iter(|| black_box(&partial).to_hlo_sharding(4))
    });
    g.bench_function("manual_4x4x8", |b| {
        b.iter(|| black_box(&manual).to_hlo_sharding(2))
    });
    g.finish();
}

fn parsing(c: &mut Criterion) {
    let texts = [
        (
            "iota_partial",
            "{devices=[4,3,2,2]<=[2,2,3,2,2]T(1,4,3,2,0) last_tile_dim_replicate}",
        ),
        (
            "iota_manual",
            "{devices=[3,3,2]<=[3,2,3]T(0,2,1) last_tile_dims={manual, replicated}}",
        ),
        (
            "explicit_48",
            "{devices=[3,2,4,2]22,3,40,32,23,17,43,26,7,30,34,11,25,24,29,31,35,42,13,21,44,9,33,45,41,36,15,10,27,12,19,4,16,46,8,6,37,38,20,39,14,28,0,47,1,5,18,2}",
        ),
        ("replicated", "{replicated}"),
    ];
    let mut g = c.benchmark_group("parse_hlo");
    for (name, text) in texts {
        g.bench_function(name, |b| b.iter(|| HloSharding::parse(black_box(text))));
    }
    g.finish();
}

criterion_group!(benches, conversion, parsing);
criterion_main!(benches);
