//! The MPMD runtime's own overhead without XLA: every built-in schedule, 8 stages × 32
//! micro-batches, costs F,B,W = 1,2,1 at 2 ms a unit, run through the real workers and
//! transport with tasks that sleep for their costs (`tessera_mpmd::synthetic`). Each sample is
//! one run; its time set against the simulator's makespan (234 ms for 1F1B) is the runtime's
//! overhead. docs/benchmarks.md has the ratios (`tessera schedule --execute-synthetic`).

// `criterion_group!` generates an undocumented function.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use tessera::mpmd::runtime::RunOptions;
use tessera::mpmd::synthetic::run_synthetic;
use tessera_schedule::{Costs, Registry, ScheduleParams};

const CASES: [(&str, u32); 8] = [
    ("gpipe", 8),
    ("interleaved-gpipe", 4),
    ("1f1b", 8),
    ("eager-1f1b", 8),
    ("interleaved-1f1b", 4),
    ("interleaved-1f1b-fused", 4),
    ("zero-bubble", 8),
    ("dualpipev", 4),
];

fn synthetic(c: &mut Criterion) {
    let registry = Registry::with_builtins();
    let (stages, m) = (8, 32);
    let costs = Costs::uniform(stages, 1.0, 2.0, 1.0);
    let unit = Duration::from_millis(2);
    let mut group = c.benchmark_group("synthetic");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    for (name, mpmd_dim) in CASES {
        let plan = registry
            .create(name, ScheduleParams { stages, mpmd_dim })
            .and_then(|s| s.plan(m))
            .expect("accepted");
        group.bench_function(format!("{name}/S{stages}xM{m}/2ms"), |b| {
            b.iter(|| run_synthetic(&plan, &costs, unit, &RunOptions::default()).expect("runs"))
        });
    }
    group.finish();
}

criterion_group!(benches, synthetic);
criterion_main!(benches);
