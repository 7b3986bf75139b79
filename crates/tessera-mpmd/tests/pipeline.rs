//! Every built-in schedule, turned into a runtime plan by the stage contract, trains a scalar
//! linear chain to the same gradients as the unpipelined computation, and each group runs its
//! actions in the schedule's order.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::HashMap;
use std::sync::Arc;

use tessera_mpmd::pipeline::{ActionSignature, Key, StageShape, action_name, build_plan};
use tessera_mpmd::runtime::{Executor, LocalTransport, RunOptions, TaskSpec, run};
use tessera_schedule::{Registry, ScheduleParams, TaskKind};

/// Stage `s` computes `x * w_s`; the last stage's loss is `0.5 * (x * w - t)^2`.
struct Chain {
    stages: usize,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Executor<ActionSignature, f64> for Chain {
    fn run(&self, task: &TaskSpec<ActionSignature>, inputs: &[&f64]) -> Result<Vec<f64>, BoxError> {
        let sig = &task.payload;
        let mut env: HashMap<Key, f64> = sig
            .inputs
            .iter()
            .copied()
            .zip(inputs.iter().map(|v| **v))
            .collect();
        for part in &sig.parts {
            let ins: Vec<f64> = part.inputs.iter().map(|k| env[k]).collect();
            // The first weight gradient of a stage reads no accumulator: it starts them.
            let acc_inputs = part
                .inputs
                .iter()
                .filter(|k| matches!(k, Key::Acc { .. }))
                .count();
            assert_eq!(
                part.starts_accumulators(),
                acc_inputs == 0 && matches!(part.task.kind, TaskKind::Bwd | TaskKind::BwdW),
                "{:?}",
                part.task
            );
            let outs = self.part(part.task.kind, part.task.stage as usize, &ins);
            assert_eq!(outs.len(), part.outputs.len(), "{:?}", part.task);
            env.extend(part.outputs.iter().copied().zip(outs));
        }
        Ok(sig.outputs.iter().map(|k| env[k]).collect())
    }
}

impl Chain {
    fn part(&self, kind: TaskKind, s: usize, ins: &[f64]) -> Vec<f64> {
        let last = s + 1 == self.stages;
        match (kind, last) {
            // [w, x] -> [x*w, x]  (stage 0 reads x as its data input)
            (TaskKind::Fwd, false) => vec![ins[0] * ins[1], ins[1]],
            // [w, x, t] -> [loss, x, residual y-t]
            (TaskKind::Fwd, true) => {
                let r = ins[0] * ins[1] - ins[2];
                vec![0.5 * r * r, ins[1], r]
            }
            // [w, x, ct, acc?] -> [ct*w (if s>0), acc + ct*x]
            (TaskKind::Bwd, false) => {
                with_ct(s, ins[2] * ins[0], vec![acc(ins, 3, ins[2] * ins[1])])
            }
            // [w, x, r, acc?] -> [r*w (if s>0), acc + r*x]
            (TaskKind::Bwd, true) => {
                with_ct(s, ins[2] * ins[0], vec![acc(ins, 3, ins[2] * ins[1])])
            }
            // [w, x, ct] -> [ct*w (if s>0), wres x, wres ct]
            (TaskKind::BwdI, _) => with_ct(s, ins[2] * ins[0], vec![ins[1], ins[2]]),
            // [x, ct, acc?] -> [acc + x*ct]
            (TaskKind::BwdW, _) => vec![acc(ins, 2, ins[0] * ins[1])],
        }
    }
}

/// The accumulator `ins[i]` plus `g`, or `g` itself for the task that starts the accumulator.
fn acc(ins: &[f64], i: usize, g: f64) -> f64 {
    ins.get(i).map_or(g, |a| a + g)
}

fn with_ct(s: usize, ct: f64, rest: Vec<f64>) -> Vec<f64> {
    if s > 0 {
        std::iter::once(ct).chain(rest).collect()
    } else {
        rest
    }
}

/// Gradients of `sum_m 0.5 (x_m * prod(w) - t_m)^2` by hand.
fn reference(w: &[f64], data: &[(f64, f64)]) -> (Vec<f64>, Vec<f64>) {
    let mut grads = vec![0.0; w.len()];
    let mut losses = Vec::new();
    for &(x, t) in data {
        let mut acts = vec![x];
        for wi in w {
            acts.push(acts.last().unwrap() * wi);
        }
        let r = acts[w.len()] - t;
        losses.push(0.5 * r * r);
        let mut ct = r;
        for s in (0..w.len()).rev() {
            grads[s] += ct * acts[s];
            ct *= w[s];
        }
    }
    (losses, grads)
}

fn check(name: &str, stages: u32, mpmd_dim: u32, microbatches: u32) {
    let schedule = Registry::with_builtins()
        .create(name, ScheduleParams { stages, mpmd_dim })
        .unwrap();
    let sched_plan = schedule.plan(microbatches).unwrap();
    let n = stages as usize;
    let shapes: Vec<StageShape> = (0..n)
        .map(|s| {
            let last = s + 1 == n;
            let data = usize::from(s == 0) + usize::from(last);
            let residuals = if last { 2 } else { 1 };
            StageShape::chain(s as u32, stages, 1, data, residuals, 2)
        })
        .collect();
    let built = build_plan(&sched_plan, &shapes, Clone::clone).unwrap();
    // No accumulator is placed before the run: each stage's first weight gradient makes it,
    // and exactly one task per stage does.
    assert!(
        !built
            .inputs
            .iter()
            .any(|(k, _)| matches!(k, Key::Acc { .. })),
        "{name}: {:?}",
        built.inputs
    );
    let mut starts = vec![0; n];
    for task in &built.plan.tasks {
        for part in task
            .payload
            .parts
            .iter()
            .filter(|p| p.starts_accumulators())
        {
            starts[part.task.stage as usize] += 1;
        }
    }
    assert_eq!(starts, vec![1; n], "{name}");
    let w: Vec<f64> = (0..n).map(|s| 0.9 + 0.05 * s as f64).collect();
    let data: Vec<(f64, f64)> = (0..microbatches)
        .map(|m| (1.0 + m as f64 * 0.5, 2.0 - m as f64 * 0.25))
        .collect();
    let initial = built
        .inputs
        .iter()
        .map(|&(key, group)| {
            let value = match key {
                Key::Param { stage, .. } => w[stage as usize],
                // Stage 0's data is x; the last stage's data is t (after x when one stage).
                Key::Data { stage, mb, k } => {
                    if stage == 0 && k == 0 {
                        data[mb as usize].0
                    } else {
                        data[mb as usize].1
                    }
                }
                other => panic!("unexpected input {other:?}"),
            };
            (built.ids[&key], group, value)
        })
        .collect();
    let out = run(
        Arc::new(built.plan.clone()),
        initial,
        Arc::new(Chain { stages: n }),
        Arc::new(LocalTransport::cloning()),
        &RunOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    let (losses, grads) = reference(&w, &data);
    let (got_grads, got_losses) = out.results.split_at(n);
    for (a, b) in got_grads
        .iter()
        .zip(&grads)
        .chain(got_losses.iter().zip(&losses))
    {
        assert!(
            (a - b).abs() <= 1e-12 * b.abs().max(1.0),
            "{name}: {got_grads:?} vs {grads:?}, {got_losses:?} vs {losses:?}"
        );
    }
    let orders = out.timings.group_orders(sched_plan.actors.len());
    for (actor, actions) in sched_plan.actors.iter().enumerate() {
        let expected: Vec<String> = actions.iter().map(action_name).collect();
        assert_eq!(
            orders[actor], expected,
            "{name}: actor {actor} ran out of order"
        );
    }
}

#[test]
fn every_builtin_schedule_gives_the_unpipelined_gradients() {
    for name in ["gpipe", "1f1b", "eager-1f1b", "zero-bubble"] {
        check(name, 4, 4, 8);
        check(name, 2, 2, 3);
    }
    check("interleaved-1f1b", 8, 4, 8);
    check("interleaved-gpipe", 8, 4, 8);
    check("interleaved-1f1b-fused", 4, 2, 4);
    check("dualpipev", 8, 4, 8);
    check("1f1b", 1, 1, 2);
}

#[test]
fn a_stage_count_mismatch_is_refused() {
    let schedule = Registry::with_builtins()
        .create(
            "1f1b",
            ScheduleParams {
                stages: 4,
                mpmd_dim: 4,
            },
        )
        .unwrap();
    let shapes: Vec<StageShape> = (0..3)
        .map(|s| StageShape::chain(s, 3, 1, 1, 1, 0))
        .collect();
    let err = build_plan(&schedule.plan(4).unwrap(), &shapes, |_| ()).unwrap_err();
    assert!(
        err.to_string().contains("4 stages but the model has 3"),
        "{err}"
    );
}

#[test]
fn a_stage_placed_on_no_group_is_refused_naming_what_it_reads() {
    let schedule = Registry::with_builtins()
        .create(
            "gpipe",
            ScheduleParams {
                stages: 3,
                mpmd_dim: 3,
            },
        )
        .unwrap();
    let mut plan = schedule.plan(2).unwrap();
    // Stage 2's actor has no action list: the plan runs on two groups only.
    let last = plan.actors.pop().unwrap();
    plan.actors[1].extend(last);
    let shapes: Vec<StageShape> = (0..3)
        .map(|s| StageShape::chain(s, 3, 1, 1, 1, 0))
        .collect();
    let err = build_plan(&plan, &shapes, |_| ()).unwrap_err().to_string();
    assert!(
        err.contains("stage 2 runs on no MPMD group")
            && err.contains("actor 2")
            && err.contains("value 0 of stage 1"),
        "{err}"
    );
}

/// A forward-only plan (`ForwardOnly` of a schedule) runs forwards that save no residuals and
/// places and returns no accumulator: its results are the micro-batches' losses.
#[test]
fn a_forward_only_plan_saves_no_residuals_and_returns_only_the_losses() {
    let (stages, microbatches) = (4u32, 3u32);
    let schedule = Registry::with_builtins()
        .create(
            "interleaved-1f1b",
            ScheduleParams {
                stages,
                mpmd_dim: 2,
            },
        )
        .unwrap();
    let forward = tessera_schedule::ForwardOnly::new(schedule.as_ref());
    let plan = tessera_schedule::Schedule::plan(&forward, microbatches).unwrap();
    tessera_schedule::validate_forward_only(&plan).unwrap();
    assert!(tessera_mpmd::pipeline::is_forward_only(&plan));
    let shapes: Vec<StageShape> = (0..stages)
        .map(|s| StageShape::chain(s, stages, 1, 1, 1, 1))
        .collect();
    let built = build_plan(&plan, &shapes, |sig: &ActionSignature| sig.clone()).unwrap();
    assert_eq!(built.plan.tasks.len(), (stages * microbatches) as usize);
    for task in &built.plan.tasks {
        for part in &task.payload.parts {
            assert_eq!(part.task.kind, TaskKind::Fwd);
            assert!(
                !part.outputs.iter().any(|k| matches!(k, Key::Resid { .. })),
                "{part:?}"
            );
        }
    }
    assert!(
        !built
            .inputs
            .iter()
            .any(|(k, _)| matches!(k, Key::Acc { .. }))
    );
    let ids: HashMap<_, _> = built.ids.iter().map(|(k, v)| (*v, *k)).collect();
    let results: Vec<Key> = built.plan.results.iter().map(|(id, _)| ids[id]).collect();
    assert_eq!(
        results,
        (0..microbatches)
            .map(|mb| Key::Loss { mb })
            .collect::<Vec<_>>()
    );
}
