//! The simulator against the published bubble and memory formulas (zero transfer latency,
//! `p` actors, `m ≥ p` microbatches). Sources are listed in the crate docs.

use tessera_schedule::{
    Action, Costs, Placement, Plan, Registry, ScheduleParams, Simulation, Task, simulate,
};

fn run(
    name: &str,
    stages: u32,
    mpmd_dim: u32,
    m: u32,
    (f, b, w): (f64, f64, f64),
) -> (Plan, Simulation) {
    let schedule = Registry::with_builtins()
        .create(name, ScheduleParams { stages, mpmd_dim })
        .expect("parameters accepted");
    let plan = schedule.plan(m).expect("microbatches accepted");
    let sim = simulate(&plan, &Costs::uniform(stages, f, b, w)).expect("valid schedule");
    (plan, sim)
}

/// Every actor idles exactly `bubble`.
fn assert_bubble(sim: &Simulation, bubble: f64, context: &str) {
    for (a, idle) in sim.idle.iter().enumerate() {
        assert!(
            (idle - bubble).abs() < 1e-9,
            "{context}: actor {a} idles {idle}, expected {bubble}"
        );
    }
}

const COSTS: [(f64, f64, f64); 3] = [(1.0, 2.0, 1.0), (1.0, 1.0, 0.5), (2.0, 3.0, 1.0)];

#[test]
fn gpipe_bubble_and_memory() {
    for p in 1..=6 {
        for m in p..=2 * p + 3 {
            for (f, b, w) in COSTS {
                let ctx = format!("gpipe p={p} m={m}");
                let (_, sim) = run("gpipe", p, p, m, (f, b, w));
                assert_bubble(&sim, f64::from(p - 1) * (f + b), &ctx);
                assert_eq!(sim.makespan, f64::from(m + p - 1) * (f + b), "{ctx}");
                assert_eq!(sim.peak_activations[0], m, "{ctx}");
            }
        }
    }
}

#[test]
fn one_f_one_b_bubble_and_memory() {
    for p in 1..=6 {
        for m in p..=2 * p + 3 {
            for (f, b, w) in COSTS {
                let ctx = format!("1f1b p={p} m={m}");
                let (_, sim) = run("1f1b", p, p, m, (f, b, w));
                assert_bubble(&sim, f64::from(p - 1) * (f + b), &ctx);
                assert_eq!(sim.makespan, f64::from(m + p - 1) * (f + b), "{ctx}");
                assert_eq!(sim.peak_activations[0], p, "{ctx}");
                assert_eq!(
                    sim.peak_activations,
                    (1..=p).rev().collect::<Vec<_>>(),
                    "{ctx}"
                );
            }
        }
    }
}

#[test]
fn interleaved_bubble_is_a_vth() {
    for p in 1..=4 {
        for v in 1..=3 {
            for rounds in 1..=3 {
                let m = rounds * p;
                for (f, b, w) in COSTS {
                    let ctx = format!("interleaved p={p} v={v} m={m}");
                    let bubble = f64::from(p - 1) * (f + b);
                    for name in ["interleaved-1f1b", "interleaved-1f1b-fused"] {
                        let (_, sim) = run(name, v * p, p, m, (f, b, w));
                        assert_bubble(&sim, bubble, &ctx);
                        assert_eq!(sim.makespan, f64::from(v * m) * (f + b) + bubble, "{ctx}");
                    }
                    // The same work on p stages (each v times as costly) idles v times longer.
                    let (_, flat) = run("1f1b", p, p, m, (f64::from(v) * f, f64::from(v) * b, 0.0));
                    assert_bubble(&flat, f64::from(v) * bubble, &ctx);
                }
            }
        }
    }
}

#[test]
fn zero_bubble_h1() {
    for p in 1..=6 {
        for m in p..=2 * p + 3 {
            for (f, b, w) in [(1.0, 2.0, 1.0), (2.0, 4.0, 2.0), (1.0, 3.0, 1.0)] {
                let ctx = format!("zero-bubble p={p} m={m} F={f} B={b} W={w}");
                let (_, sim) = run("zero-bubble", p, p, m, (f, b, w));
                assert_bubble(&sim, f64::from(p - 1) * (f + b - 2.0 * w), &ctx);
                assert_eq!(sim.peak_activations[0], p, "{ctx}: 1F1B's peak memory");
                assert!(sim.peak_activations.iter().all(|&a| a <= p), "{ctx}");
            }
        }
    }
}

#[test]
fn dualpipev_bubble_and_memory() {
    // DualPipe's table: bubble (PP/2-1)(F&B+B-3W) with PP = 2D stages, F&B = F+B here, and
    // PP+1 activations of a PP-stage model's stage per device, i.e. 2D+1 of our half stages.
    // The table's figure has a forward as long as an input-gradient backward (F = B-W); the
    // bubble formula is exact there. DeepSeek's order; JAXPP's (`dualpipev`) pays more, see
    // docs/schedules.md.
    for d in 1..=6 {
        for m in 2 * d..=2 * d + 6 {
            for (f, b, w) in [
                (1.0, 2.0, 1.0),
                (2.0, 3.0, 1.0),
                (2.0, 4.0, 2.0),
                (1.5, 2.5, 1.0),
            ] {
                let ctx = format!("dualpipev-deepseek D={d} m={m} F={f} B={b} W={w}");
                let (_, sim) = run("dualpipev-deepseek", 2 * d, d, m, (f, b, w));
                let bubble = f64::from(d - 1) * (f + b + b - 3.0 * w);
                assert_bubble(&sim, bubble, &ctx);
                assert_eq!(sim.makespan, f64::from(2 * m) * (f + b) + bubble, "{ctx}");
                assert!(
                    sim.peak_activations.iter().all(|&a| a <= 2 * d + 1),
                    "{ctx}: {:?}",
                    sim.peak_activations
                );
                assert_eq!(sim.peak_activations[0], 2 * d + 1, "{ctx}");
            }
        }
    }
}

#[test]
fn latency_delays_every_hop() {
    // One microbatch goes down p actors and back up: 2(p-1) hops of latency L.
    for p in 1..=5 {
        let plan = Registry::with_builtins()
            .create(
                "1f1b",
                ScheduleParams {
                    stages: p,
                    mpmd_dim: p,
                },
            )
            .and_then(|s| s.plan(1))
            .expect("accepted");
        let sim =
            simulate(&plan, &Costs::uniform(p, 1.0, 2.0, 0.0).with_latency(0.5)).expect("valid");
        assert_eq!(
            sim.makespan,
            f64::from(p) * 3.0 + f64::from(2 * (p - 1)) * 0.5,
            "p={p}"
        );
    }
}

#[test]
fn peak_memory_does_not_depend_on_costs() {
    // Peak live activations follow each actor's order, so even zero costs give 1F1B's p..1.
    let (_, sim) = run("1f1b", 4, 4, 8, (0.0, 0.0, 0.0));
    assert_eq!(sim.makespan, 0.0);
    assert_eq!(sim.peak_activations, vec![4, 3, 2, 1]);
}

#[test]
fn in_flight_micro_batches_follow_the_schedules_memory_bound() {
    use tessera_schedule::memory::{StageBytes, peak_inflight, predict_peak_bytes};
    let params = ScheduleParams {
        stages: 4,
        mpmd_dim: 4,
    };
    let plan = |name: &str| {
        Registry::with_builtins()
            .create(name, params)
            .unwrap()
            .plan(16)
            .unwrap()
    };
    // GPipe holds every micro-batch before the first backward; 1F1B holds p - s on stage s
    // (JAXPP's order: the last stage's backward follows its forward as a separate action, so
    // one micro-batch is in flight there); with the last stage's forward and backward fused
    // (`1f1b-fuse-last`), nothing stays in flight on it.
    assert_eq!(peak_inflight(&plan("gpipe")), [16, 16, 16, 16]);
    assert_eq!(peak_inflight(&plan("1f1b")), [4, 3, 2, 1]);
    assert_eq!(peak_inflight(&plan("1f1b-fuse-last")), [4, 3, 2, 0]);
    // Stage 0 peaks in its first backward: 4 activations and a new accumulator; the last
    // stage's fused action keeps its activations inside its one program (its backward reads
    // the forward's residuals there), so it holds only what its backward allocates.
    let stage = StageBytes {
        activation: 10,
        weight_residual: 0,
        backward: 5,
        accumulators: 0,
    };
    let bytes = predict_peak_bytes(&plan("1f1b-fuse-last"), &[100; 4], &[stage; 4]);
    assert_eq!(bytes, [145, 135, 125, 105]);
    // Accumulators are made by each stage's first backward and held to the end: 1F1B's stage 0
    // peaks in its first backward, with its 4 activations and the new accumulators.
    let stage = StageBytes {
        activation: 10,
        weight_residual: 0,
        backward: 0,
        accumulators: 1000,
    };
    let one_f_one_b = predict_peak_bytes(&plan("1f1b"), &[100; 4], &[stage; 4]);
    assert_eq!(one_f_one_b, [1140, 1130, 1120, 1110]);
    // Two stages on one actor, one micro-batch: F0 F1 B1 B0. B1 makes stage 1's accumulators
    // while both activations are live (1020); B0 adds stage 0's while stage 0's activation is
    // (2010), never both accumulators with both activations (2020).
    let actors = vec![vec![
        Task::fwd(0, 0).into(),
        Task::fwd(1, 0).into(),
        Task::bwd(1, 0).into(),
        Task::bwd(0, 0).into(),
    ]];
    let one_actor = Plan {
        name: "one actor".into(),
        num_stages: 2,
        num_microbatches: 1,
        placement: Placement::from_table(vec![0, 0]).unwrap(),
        actors,
    };
    assert_eq!(predict_peak_bytes(&one_actor, &[0], &[stage; 2]), [2010]);
    // A split backward: apart, the weight residuals live between `BwdI` and `BwdW`, which then
    // makes the accumulators (500 + 1000); fused, they never leave the one program (10 + 1000).
    let split = StageBytes {
        weight_residual: 500,
        ..stage
    };
    let one_stage = |actors: Vec<Vec<Action>>| Plan {
        name: "one stage".into(),
        num_stages: 1,
        num_microbatches: 1,
        placement: Placement::plain(1),
        actors,
    };
    let (f, i, w) = (Task::fwd(0, 0), Task::bwd_i(0, 0), Task::bwd_w(0, 0));
    let apart = one_stage(vec![vec![f.into(), i.into(), w.into()]]);
    assert_eq!(predict_peak_bytes(&apart, &[0], &[split]), [1500]);
    let fused = one_stage(vec![vec![f.into(), Action::Fused(vec![i, w])]]);
    assert_eq!(predict_peak_bytes(&fused, &[0], &[split]), [1010]);
}

#[test]
fn a_split_backward_pays_its_own_total_and_a_whole_one_the_whole_backward() {
    use tessera_schedule::{Costs, Task};
    // B = 4, W = 1; split in two programs the backward costs I + W = 6 in all.
    let mut costs = Costs::uniform(1, 1.0, 4.0, 1.0);
    assert_eq!(costs.task(&Task::bwd_i(0, 0)), 3.0);
    costs.split = vec![6.0];
    assert!(costs.check(1).is_ok());
    assert_eq!(costs.task(&Task::bwd(0, 0)), 4.0);
    assert_eq!(costs.task(&Task::bwd_i(0, 0)), 5.0);
    assert_eq!(costs.task(&Task::bwd_w(0, 0)), 1.0);
    // W above the split total, or a split list of the wrong length, is refused.
    costs.split = vec![0.5];
    assert!(costs.check(1).is_err());
    costs.split = vec![6.0, 6.0];
    assert!(costs.check(1).is_err());
}

#[test]
fn a_fused_action_costs_its_chains_with_the_measured_factors() {
    use tessera_schedule::{Action, Costs, Task};
    // F = 1, B = 4, W = 1, a split backward 6 in all; a forward fused with its backward pays a
    // quarter of itself, independent chains in one program 0.9 of their sum.
    let mut costs = Costs::uniform(2, 1.0, 4.0, 1.0);
    costs.split = vec![6.0, 6.0];
    costs.fused_chain = 0.25;
    costs.fused_apart = 0.9;
    assert!(costs.check(2).is_ok());
    let fused = |tasks: Vec<Task>| costs.action(&Action::Fused(tasks));
    // Both parts of a split backward in one program: the whole backward.
    assert_eq!(fused(vec![Task::bwd_i(1, 0), Task::bwd_w(1, 0)]), 4.0);
    // A forward with its own backward (the last stage's F+B): B + F/4.
    assert_eq!(fused(vec![Task::fwd(1, 0), Task::bwd(1, 0)]), 4.25);
    // ... with only the input part of its backward: (I + W) - W + F/4.
    assert_eq!(fused(vec![Task::fwd(1, 0), Task::bwd_i(1, 0)]), 5.25);
    // A forward of another micro-batch with a whole split backward (DualPipeV's pairs).
    let pair = fused(vec![Task::fwd(0, 1), Task::bwd_i(1, 0), Task::bwd_w(1, 0)]);
    assert!((pair - 0.9 * (1.0 + 4.0)).abs() < 1e-12, "{pair}");
    // A single task is never scaled; bad factors are refused, naming them.
    assert_eq!(costs.action(&Action::Single(Task::fwd(0, 0))), 1.0);
    costs.fused_apart = 0.0;
    let err = costs.check(2).map_err(|e| e.to_string());
    assert!(
        matches!(&err, Err(m) if m.contains("fused apart")),
        "{err:?}"
    );
    costs.fused_apart = 1.0;
    costs.fused_chain = f64::NAN;
    assert!(costs.check(2).is_err());
}

#[test]
fn every_action_pays_its_dispatch_once() {
    use tessera_schedule::{Action, Costs, Task};
    let mut costs = Costs::uniform(2, 1.0, 4.0, 1.0);
    costs.dispatch = 0.5;
    assert!(costs.check(2).is_ok());
    assert_eq!(costs.action(&Action::Single(Task::fwd(0, 0))), 1.5);
    let pair = Action::Fused(vec![Task::fwd(1, 0), Task::bwd(1, 0)]);
    assert_eq!(costs.action(&pair), 5.5);
    costs.dispatch = -1.0;
    assert!(costs.check(2).is_err());
}
