//! Benchmarks of tessera-schedule: building, validating and simulating the built-in schedules
//! at the largest sizes the property tests cover (16 stages, 64 microbatches).

// `criterion_group!` generates an undocumented function.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use tessera_schedule::{Costs, Registry, ScheduleParams, simulate, validate};

const CASES: [(&str, u32, u32); 5] = [
    ("1f1b", 16, 16),
    ("interleaved-1f1b", 16, 4),
    ("zero-bubble", 16, 16),
    ("dualpipev", 16, 8),
    ("gpipe", 16, 16),
];

fn build_and_simulate(c: &mut Criterion) {
    let registry = Registry::with_builtins();
    let m = 64;
    for (name, stages, mpmd_dim) in CASES {
        let schedule = registry
            .create(name, ScheduleParams { stages, mpmd_dim })
            .expect("accepted");
        let costs = Costs::uniform(stages, 1.0, 2.0, 1.0).with_latency(0.1);
        c.bench_function(&format!("schedule/build/{name}/S{stages}xM{m}"), |b| {
            b.iter(|| schedule.plan(black_box(m)).expect("accepted"))
        });
        let plan = schedule.plan(m).expect("accepted");
        c.bench_function(&format!("schedule/validate/{name}/S{stages}xM{m}"), |b| {
            b.iter(|| validate(black_box(&plan)).expect("valid"))
        });
        c.bench_function(&format!("schedule/simulate/{name}/S{stages}xM{m}"), |b| {
            b.iter(|| simulate(black_box(&plan), &costs).expect("valid"))
        });
    }
}

criterion_group!(benches, build_and_simulate);
criterion_main!(benches);
