//! A traced loss with stage markers, partitioned into contract programs and run through the MPMD
//! runtime on the reference interpreter: for several schedules, the accumulated gradients and
//! per-microbatch losses equal `value_and_grad` of the unpartitioned loss.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::HashMap;
use std::sync::Arc;

use tessera_ir::autodiff::value_and_grad;
use tessera_ir::interp::eval_closed;
use tessera_ir::{Array, DType};
mod common;

use common::loss;
use tessera_mpmd::partition::{StagePrograms, partition};
use tessera_mpmd::pipeline::{ActionSignature, Key, action_name, build_plan};
use tessera_mpmd::runtime::{Executor, LocalTransport, RunOptions, TaskSpec, run};
use tessera_schedule::{Registry, ScheduleParams};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Interp {
    stages: Vec<StagePrograms>,
}

impl Executor<ActionSignature, Array> for Interp {
    fn run(
        &self,
        task: &TaskSpec<ActionSignature>,
        inputs: &[&Array],
    ) -> Result<Vec<Array>, BoxError> {
        let sig = &task.payload;
        let mut env: HashMap<Key, Array> = sig
            .inputs
            .iter()
            .copied()
            .zip(inputs.iter().map(|a| (*a).clone()))
            .collect();
        for part in &sig.parts {
            let program = self.stages[part.task.stage as usize].part_program(part);
            let args: Vec<Array> = part.inputs.iter().map(|k| env[k].clone()).collect();
            let outs = eval_closed(program, &args)?;
            env.extend(part.outputs.iter().copied().zip(outs));
        }
        Ok(sig.outputs.iter().map(|k| env[k].clone()).collect())
    }
}

fn values(shape: &[i64], seed: f64) -> Array {
    let n: i64 = shape.iter().product();
    Array::new(
        DType::F32,
        shape,
        (0..n)
            .map(|i| ((i as f64 + 1.0) * 0.37 + seed).sin() * 0.7)
            .collect(),
    )
    .unwrap()
}

fn check(name: &str, stages: usize, mpmd_dim: u32, microbatches: u32) {
    check_program(name, &loss(stages), stages, mpmd_dim, microbatches);
}

/// Runs `program` (`x, w_0..w_{stages-1}, y -> loss`, stage markers inside) pipelined under
/// schedule `name` on the interpreter and compares it with `value_and_grad` of the whole.
fn check_program(
    name: &str,
    program: &tessera_ir::ClosedJaxpr,
    stages: usize,
    mpmd_dim: u32,
    microbatches: u32,
) {
    let params: Vec<usize> = (1..=stages).collect();
    let parts = partition(program, &params).unwrap();
    for p in &parts {
        for prog in [
            &p.fwd,
            &p.bwd,
            &p.bwd_i,
            &p.bwd_w,
            &p.bwd_first,
            &p.bwd_w_first,
        ] {
            tessera_ir::verify(prog).unwrap();
        }
    }
    let schedule = Registry::with_builtins()
        .create(
            name,
            ScheduleParams {
                stages: stages as u32,
                mpmd_dim,
            },
        )
        .unwrap();
    let plan = schedule.plan(microbatches).unwrap();
    let shapes: Vec<_> = parts.iter().map(|p| p.shape.clone()).collect();
    let built = build_plan(&plan, &shapes, Clone::clone).unwrap();
    let weights: Vec<Array> = (0..stages).map(|s| values(&[6, 6], s as f64)).collect();
    let batches: Vec<(Array, Array)> = (0..microbatches)
        .map(|m| {
            (
                values(&[4, 6], 10.0 + m as f64),
                values(&[4, 6], 20.0 + m as f64),
            )
        })
        .collect();
    let loss_arg = |k: usize, mb: usize| -> Array {
        if k == 0 {
            batches[mb].0.clone()
        } else if k == stages + 1 {
            batches[mb].1.clone()
        } else {
            weights[k - 1].clone()
        }
    };
    let initial = built
        .inputs
        .iter()
        .map(|&(key, group)| {
            let value = match key {
                Key::Param { stage, k } => loss_arg(parts[stage as usize].param_args[k], 0),
                Key::Data { stage, mb, k } => {
                    loss_arg(parts[stage as usize].data_args[k], mb as usize)
                }
                other => panic!("unexpected input {other:?}"),
            };
            (built.ids[&key], group, value)
        })
        .collect();
    let out = run(
        Arc::new(built.plan.clone()),
        initial,
        Arc::new(Interp {
            stages: parts.clone(),
        }),
        Arc::new(LocalTransport::cloning()),
        &RunOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    // The reference: value_and_grad of the whole loss, summed over microbatches.
    let vg = value_and_grad(program, &params).unwrap();
    let mut want_grads = vec![vec![0.0; 36]; stages];
    let mut want_losses = Vec::new();
    for mb in 0..microbatches as usize {
        let args: Vec<Array> = (0..stages + 2).map(|k| loss_arg(k, mb)).collect();
        let r = eval_closed(&vg, &args).unwrap();
        want_losses.push(r[0].to_vec()[0]);
        for s in 0..stages {
            for (acc, g) in want_grads[s].iter_mut().zip(r[1 + s].to_vec()) {
                *acc += g;
            }
        }
    }
    let (grads, losses) = out.results.split_at(stages);
    for s in 0..stages {
        for (a, b) in grads[s].to_vec().iter().zip(&want_grads[s]) {
            assert!(
                (a - b).abs() <= 1e-4 * b.abs().max(1e-3),
                "{name}: stage {s} gradient {a} vs {b}"
            );
        }
    }
    for (l, w) in losses.iter().zip(&want_losses) {
        assert!(
            (l.to_vec()[0] - w).abs() <= 1e-5,
            "{name}: loss {:?} vs {w}",
            l.to_vec()
        );
    }
    let orders = out.timings.group_orders(plan.actors.len());
    for (actor, actions) in plan.actors.iter().enumerate() {
        assert_eq!(
            orders[actor],
            actions.iter().map(action_name).collect::<Vec<_>>(),
            "{name}: actor {actor}"
        );
    }
}

#[test]
fn partitioned_pipelines_match_value_and_grad() {
    check("1f1b", 4, 4, 8);
    check("gpipe", 4, 4, 4);
    check("zero-bubble", 4, 4, 4);
    check("interleaved-1f1b", 8, 4, 8);
    check("dualpipev", 8, 4, 8);
}

#[test]
fn a_residual_skipping_stages_is_sent_to_its_consumer_and_its_gradient_summed() {
    // Stage 0's output is read by stage 1 and again by stage 2 (a skip connection), and stage 1's
    // by stages 2 and 3.
    for (name, mpmd_dim) in [("1f1b", 4), ("zero-bubble", 4), ("gpipe", 4)] {
        check_program(name, &common::loss_with_skips(4), 4, mpmd_dim, 4);
    }
}

#[test]
fn two_values_may_cross_each_boundary() {
    for (name, stages, mpmd_dim) in [("1f1b", 4, 4), ("interleaved-1f1b", 4, 2)] {
        check_program(name, &common::loss_two_streams(stages), stages, mpmd_dim, 4);
    }
}

#[test]
fn skipped_and_parallel_values_are_named_in_the_stage_shapes() {
    let parts = partition(&common::loss_with_skips(4), &[1, 2, 3, 4]).unwrap();
    use tessera_mpmd::pipeline::ActRef;
    let r = |stage, k| ActRef { stage, k };
    // Stage s reads values of stage s - 1 and, skipping a stage, of stage s - 2.
    for s in 2..4u32 {
        let from: Vec<u32> = parts[s as usize]
            .shape
            .inputs
            .iter()
            .map(|r| r.stage)
            .collect();
        assert!(
            from.contains(&(s - 1)) && from.contains(&(s - 2)),
            "stage {s}: {from:?}"
        );
    }
    let skipping = |s: usize| {
        parts[s]
            .shape
            .consumers
            .iter()
            .flatten()
            .any(|&c| c as usize == s + 2)
    };
    assert!(skipping(0) && skipping(1));
    let two = partition(&common::loss_two_streams(3), &[1, 2, 3]).unwrap();
    assert_eq!(two[1].shape.inputs, vec![r(0, 0), r(0, 1)]);
    assert_eq!(two[1].shape.consumers, vec![vec![2], vec![2]]);
}

#[test]
fn a_stage_marker_inside_a_loop_body_is_refused_naming_the_equation() {
    let text = "{ lambda ; a:f32[3] b:f32[2,3]. let
    c:f32[3] = scan[_split_transpose=False jaxpr={ lambda ; d:f32[3] e:f32[3]. let
        f:f32[3] = pipeline_enter_stage[stage=1] e
        g:f32[3] = add d f
      in (g,) } length=2 linear=(False, False) num_carry=1 num_consts=0 reverse=False unroll=1] a b
    h:f32[] = reduce_sum[axes=(0,) out_sharding=None] c
  in (h,) }";
    let program = tessera_ir::text::parse_closed(text);
    let Ok(program) = program else {
        panic!("{:?}", program.err());
    };
    let err = partition(&program, &[1]).unwrap_err().to_string();
    assert!(
        err.contains("equation 0 (`scan`) holds a stage marker"),
        "{err}"
    );
}
