//! `mpmd_jit` on whole `treduce` bodies: a training step whose loop body returns, beside its
//! `value_and_grad_call`'s loss and gradients and in any order, metrics computed from the call's
//! loss, the micro-batch and the parameters. Pipelined over several groups, as one program on
//! one group and as tasks on one group, the loss, the updated weights and every metric equal
//! the step interpreted sequentially; a metric reading a gradient or recomputing the staged
//! loss is refused with a typed error naming it.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::jit::to_host;
use tessera_ir::interp::eval_closed;
use tessera_ir::prim::ReduceOp;
use tessera_ir::trace::{Tensor, trace, treduce, treduce_i, value_and_grad_call};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_mpmd::driver::DriverError;
use tessera_mpmd::{Fusion, LoopBodyError, MpmdJitOptions, MpmdMesh, mpmd_jit, mpmd_jit_with};
use tessera_pjrt::Client;
use tessera_sharding::Mesh;
use tessera_tests::assert_close;

const WIDTH: i64 = 8;

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

/// `x, w_0..w_{S-1}, y -> mean((tanh(... tanh(x w_0) ...) - y)^2)`, a stage marker per layer.
fn loss(stages: usize, rows: i64) -> ClosedJaxpr {
    let mut avals = vec![f32(&[rows, WIDTH])];
    avals.extend((0..stages).map(|_| f32(&[WIDTH, WIDTH])));
    avals.push(f32(&[rows, WIDTH]));
    trace(&avals, |a| {
        let mut h = a[0].clone();
        for s in 0..stages {
            let x = match s {
                0 => h.clone(),
                _ => h.enter_stage(s as i64),
            };
            h = x.matmul(&a[1 + s]).tanh();
        }
        vec![(&h - &a[stages + 1]).integer_pow(2).mean(&[0, 1])]
    })
    .unwrap()
}

fn step_avals(stages: usize, mbs: i64, rows: i64) -> Vec<ShapedArray> {
    let mut avals: Vec<ShapedArray> = (0..stages).map(|_| f32(&[WIDTH, WIDTH])).collect();
    avals.extend([f32(&[]), f32(&[mbs, rows, WIDTH]), f32(&[mbs, rows, WIDTH])]);
    avals
}

/// The body's metrics beside the call: the squared loss (from the call's loss), the targets'
/// sum (the micro-batch alone), the count of positive targets (an `i32`), the loss again
/// (combined by Max) and, with `weight_norm`, the first and last weights' squared norms
/// (parameters of the first and last stages).
fn metrics(loss: &Tensor, y: &Tensor, w: &[Tensor], weight_norm: bool) -> Vec<Tensor> {
    let positives = y.ge(&y.full_like_scalar(0.0)).astype(DType::I32);
    let mut out = vec![
        loss * loss,
        y.sum(&[0, 1]),
        positives.sum(&[0, 1]),
        loss.clone(),
    ];
    if weight_norm {
        for weight in [&w[0], &w[w.len() - 1]] {
            out.push(weight.integer_pow(2).sum(&[0, 1]));
        }
    }
    out
}

/// `step(w.., lr, xs, ys) -> (w'.., loss, metrics...)`: the body returns `(squared loss, loss,
/// grads..., target sum, positives, loss[, weight norm])`, the loss combined by `loss_op`, the
/// metrics by Add, Add, Add, Max[, Add]. With `indexed`, the loop is a `treduce_i` whose body
/// slices the micro-batch itself (the metrics then read a value the body computes).
fn step(
    stages: usize,
    mbs: i64,
    rows: i64,
    schedule: &str,
    loss_op: ReduceOp,
    indexed: bool,
    weight_norm: bool,
) -> ClosedJaxpr {
    let loss = loss(stages, rows);
    let argnums: Vec<usize> = (1..=stages).collect();
    let mut ops = vec![ReduceOp::Add, loss_op];
    ops.extend((0..stages).map(|_| ReduceOp::Add));
    ops.extend([ReduceOp::Add, ReduceOp::Add, ReduceOp::Max]);
    if weight_norm {
        ops.extend([ReduceOp::Add, ReduceOp::Max]);
    }
    let body = |w: &[Tensor], x: &Tensor, y: &Tensor| {
        let mut args = vec![x];
        args.extend(w.iter());
        args.push(y);
        let outs = value_and_grad_call(&loss, &argnums, &args);
        let mut m = metrics(&outs[0], y, w, weight_norm);
        let mut results = vec![m.remove(0)];
        results.extend(outs);
        results.extend(m);
        results
    };
    trace(&step_avals(stages, mbs, rows), |a| {
        let weights: Vec<&Tensor> = a[..stages].iter().collect();
        let outs = if indexed {
            let mut invariants = weights.clone();
            invariants.extend([&a[stages + 1], &a[stages + 2]]);
            treduce_i(&a[0], &invariants, mbs, schedule, &ops, |inv, i| {
                let (x, y) = (inv[stages].take(i, 0), inv[stages + 1].take(i, 0));
                body(&inv[..stages], &x, &y)
            })
        } else {
            let xs = [&a[stages + 1], &a[stages + 2]];
            treduce(&weights, &xs, 0, schedule, &ops, |w, mb| {
                body(w, &mb[0], &mb[1])
            })
        };
        let mut results: Vec<Tensor> = (0..stages)
            .map(|s| &a[s] - &(&a[stages] * &(&outs[2 + s] / mbs as f64)))
            .collect();
        results.push(outs[1].clone());
        results.push(outs[0].clone());
        results.extend(outs[2 + stages..].iter().cloned());
        results
    })
    .unwrap()
}

fn values(shape: &[i64], seed: f64) -> Array {
    let n: i64 = shape.iter().product();
    let data = (0..n).map(|i| ((i as f64 + 1.0) * 0.618 + seed).sin() * 0.5);
    Array::new(DType::F32, shape, data.collect()).unwrap()
}

fn step_args(stages: usize, mbs: i64, rows: i64) -> Vec<Array> {
    let mut args: Vec<Array> = (0..stages)
        .map(|s| values(&[WIDTH, WIDTH], s as f64))
        .collect();
    args.push(Array::scalar(DType::F32, 0.5));
    args.push(values(&[mbs, rows, WIDTH], 10.0));
    args.push(values(&[mbs, rows, WIDTH], 20.0));
    args
}

fn mesh(groups: usize) -> MpmdMesh {
    let data = 8 / groups as i64;
    MpmdMesh::new(
        Mesh::auto(&[("stage", groups as i64), ("data", data)]).unwrap(),
        "stage",
    )
    .unwrap()
}

/// Runs `program` with `options` on `groups` groups and checks every result against the
/// interpreter; whether it ran as one program.
fn check(
    program: &ClosedJaxpr,
    stages: usize,
    groups: usize,
    mbs: i64,
    rows: i64,
    fusion: Fusion,
) -> bool {
    let client = Client::cpu(8).unwrap();
    let options = MpmdJitOptions {
        fusion,
        ..MpmdJitOptions::default()
    };
    let jit = mpmd_jit_with(&client, &mesh(groups), program, &options).unwrap();
    let args = step_args(stages, mbs, rows);
    let want = eval_closed(program, &args).unwrap();
    let host: Vec<_> = args.iter().map(|a| to_host(a).unwrap()).collect();
    let run = jit.call(&host).unwrap();
    assert_close(&run.outputs, &want);
    // One program reports the per-micro-batch losses only when the loop concatenates them.
    if !jit.is_fused() {
        assert_eq!(run.losses.len(), mbs as usize);
    }
    jit.is_fused()
}

#[test]
fn metrics_beside_the_call_train_pipelined_like_the_sequential_loop() {
    let (mbs, rows) = (4, 4);
    for (stages, schedule, loss_op) in [
        (2, "1f1b", ReduceOp::Concat(0)),
        (4, "gpipe", ReduceOp::Add),
        (2, "zero-bubble", ReduceOp::Max),
    ] {
        let program = step(stages, mbs, rows, schedule, loss_op, false, false);
        assert!(!check(&program, stages, stages, mbs, rows, Fusion::Never));
    }
}

#[test]
fn metrics_of_values_the_body_computes_train_pipelined() {
    let (stages, mbs, rows) = (2, 4, 4);
    let program = step(stages, mbs, rows, "1f1b", ReduceOp::Concat(0), true, false);
    assert!(!check(&program, stages, stages, mbs, rows, Fusion::Never));
}

#[test]
fn metrics_of_parameters_train_pipelined_and_leave_each_parameter_on_its_stage() {
    let (mbs, rows) = (4, 4);
    for (stages, schedule) in [(2, "1f1b"), (4, "gpipe")] {
        let program = step(stages, mbs, rows, schedule, ReduceOp::Add, false, true);
        assert!(!check(&program, stages, stages, mbs, rows, Fusion::Never));
        // Each weight's norm is computed where the weight lives: no weight is tied.
        let client = Client::cpu(8).unwrap();
        let jit = mpmd_jit(&client, &mesh(stages), &program).unwrap();
        for s in 0..stages {
            assert_eq!(jit.pipeline().groups_of_param(s), vec![s], "weight {s}");
        }
    }
}

#[test]
fn metrics_beside_the_call_on_one_group_run_as_one_program_and_as_tasks() {
    let (stages, mbs, rows) = (2, 4, 2);
    for (indexed, weight_norm) in [(false, false), (true, false), (false, true)] {
        let program = step(
            stages,
            mbs,
            rows,
            "interleaved-1f1b",
            ReduceOp::Concat(0),
            indexed,
            weight_norm,
        );
        assert!(check(&program, stages, 1, mbs, rows, Fusion::Auto));
        assert!(!check(&program, stages, 1, mbs, rows, Fusion::Never));
    }
}

fn refusal(program: &ClosedJaxpr, stages: usize) -> LoopBodyError {
    let client = Client::cpu(8).unwrap();
    match mpmd_jit(&client, &mesh(stages), program) {
        Err(DriverError::LoopBody(e)) => e,
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("compiled"),
    }
}

#[test]
fn a_metric_reading_a_gradient_is_refused_naming_it() {
    let (stages, mbs, rows) = (2, 4, 4);
    let loss = loss(stages, rows);
    let program = trace(&step_avals(stages, mbs, rows), |a| {
        let xs = [&a[stages + 1], &a[stages + 2]];
        treduce(&[&a[0], &a[1]], &xs, 0, "1f1b", &[], |w, mb| {
            let mut outs = value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]]);
            let norm = outs[2].integer_pow(2).sum(&[0, 1]);
            outs.push(norm);
            outs
        })
    })
    .unwrap();
    let err = refusal(&program, stages);
    assert!(
        matches!(
            err,
            LoopBodyError::ReadsGradient {
                result: 3,
                gradient: 1
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("after the loop"), "{err}");
}

#[test]
fn a_metric_recomputing_the_staged_loss_is_refused_naming_the_value() {
    let (stages, mbs, rows) = (2, 4, 4);
    let loss = loss(stages, rows);
    let program = trace(&step_avals(stages, mbs, rows), |a| {
        let xs = [&a[stages + 1], &a[stages + 2]];
        treduce(&[&a[0], &a[1]], &xs, 0, "1f1b", &[], |w, mb| {
            let mut outs = value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]]);
            // The second layer's output, an intermediate value of the loss, recomputed.
            let h = mb[0]
                .matmul(&w[0])
                .tanh()
                .enter_stage(1)
                .matmul(&w[1])
                .tanh();
            outs.push(h.mean(&[0, 1]));
            outs
        })
    })
    .unwrap();
    let err = refusal(&program, stages);
    match &err {
        LoopBodyError::LossIntermediate {
            result: 3,
            aval,
            stage: 1,
            ..
        } => assert_eq!(aval, &f32(&[rows, WIDTH]).to_string()),
        other => panic!("{other}"),
    }
    let message = err.to_string();
    assert!(message.contains("auxiliary result"), "{message}");
}

/// [`loss`] with an auxiliary result: the largest absolute error.
fn loss_with_aux(stages: usize, rows: i64) -> ClosedJaxpr {
    let plain = loss(stages, rows);
    trace(&plain.jaxpr.in_avals(), |a| {
        let mut h = a[0].clone();
        for s in 0..stages {
            let x = match s {
                0 => h.clone(),
                _ => h.enter_stage(s as i64),
            };
            h = x.matmul(&a[1 + s]).tanh();
        }
        let err = &h - &a[stages + 1];
        vec![err.integer_pow(2).mean(&[0, 1]), err.abs().max(&[0, 1])]
    })
    .unwrap()
}

#[test]
fn metrics_of_auxiliary_results_and_the_micro_batch_itself_train_pipelined_and_fused() {
    let (stages, mbs, rows) = (2, 4, 4);
    for (schedule, groups, fusion, fused) in [
        ("1f1b", stages, Fusion::Never, false),
        ("interleaved-1f1b", 1, Fusion::Auto, true),
    ] {
        let program = aux_metric_step(stages, mbs, rows, schedule);
        assert_eq!(check(&program, stages, groups, mbs, rows, fusion), fused);
    }
}

/// `step(w.., lr, xs, ys) -> (w'.., targets, loss, largest error, metrics...)`: the body
/// returns `(targets as they are, loss, largest error (the loss's auxiliary result), grads...,
/// largest error + loss, the learning rate)`.
fn aux_metric_step(stages: usize, mbs: i64, rows: i64, schedule: &str) -> ClosedJaxpr {
    use tessera_ir::trace::value_and_grad_with_aux_call;
    let loss = loss_with_aux(stages, rows);
    let mut ops = vec![ReduceOp::Concat(0), ReduceOp::Add, ReduceOp::Max];
    ops.extend((0..stages).map(|_| ReduceOp::Add));
    ops.extend([ReduceOp::Concat(1), ReduceOp::Max]);
    trace(&step_avals(stages, mbs, rows), |a| {
        let mut invariants: Vec<&Tensor> = a[..stages].iter().collect();
        invariants.push(&a[stages]);
        let xs = [&a[stages + 1], &a[stages + 2]];
        let outs = treduce(&invariants, &xs, 0, schedule, &ops, |w, mb| {
            let mut args = vec![&mb[0]];
            args.extend(w[..stages].iter());
            args.push(&mb[1]);
            let argnums: Vec<usize> = (1..=stages).collect();
            let call = value_and_grad_with_aux_call(&loss, &argnums, &args);
            let mut results = vec![mb[1].clone()];
            results.extend(call.iter().cloned());
            results.push((&call[1] + &call[0]).broadcast_in_dim(&[2], &[]));
            results.push(w[stages].clone());
            results
        });
        let mut results: Vec<Tensor> = (0..stages)
            .map(|s| &a[s] - &(&a[stages] * &(&outs[3 + s] / mbs as f64)))
            .collect();
        results.extend(outs[..3].iter().cloned());
        results.extend(outs[3 + stages..].iter().cloned());
        results
    })
    .unwrap()
}

/// A body that drops one of its call's results (here the second weight's gradient, with a
/// metric in its place, or the loss) trains like the step interpreted: the dropped result is
/// still computed by the stages, a hidden result of the loop that nothing reads.
#[test]
fn a_body_dropping_a_result_of_its_call_trains_like_the_sequential_loop() {
    let (stages, mbs, rows) = (2, 4, 4);
    let loss = loss(stages, rows);
    let drops_gradient = trace(&step_avals(stages, mbs, rows), |a| {
        let xs = [&a[stages + 1], &a[stages + 2]];
        let outs = treduce(&[&a[0], &a[1]], &xs, 0, "1f1b", &[], |w, mb| {
            let outs = value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]]);
            vec![outs[0].clone(), outs[1].clone(), mb[1].sum(&[0, 1])]
        });
        vec![
            &a[0] - &(&a[stages] * &outs[1]),
            outs[0].clone(),
            outs[2].clone(),
        ]
    })
    .unwrap();
    let drops_loss = trace(&step_avals(stages, mbs, rows), |a| {
        let xs = [&a[stages + 1], &a[stages + 2]];
        let ops = [ReduceOp::Add, ReduceOp::Add];
        let outs = treduce(&[&a[0], &a[1]], &xs, 0, "gpipe", &ops, |w, mb| {
            let outs = value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]]);
            outs[1..].to_vec()
        });
        vec![
            &a[0] - &(&a[stages] * &outs[0]),
            &a[1] - &(&a[stages] * &outs[1]),
        ]
    })
    .unwrap();
    for program in [&drops_gradient, &drops_loss] {
        let client = Client::cpu(8).unwrap();
        let jit = mpmd_jit(&client, &mesh(stages), program).unwrap();
        let args = step_args(stages, mbs, rows);
        let want = eval_closed(program, &args).unwrap();
        let host: Vec<_> = args.iter().map(|a| to_host(a).unwrap()).collect();
        let run = jit.call(&host).unwrap();
        assert_close(&run.outputs, &want);
        assert!(!jit.is_fused());
    }
}

#[test]
fn code_reading_the_call_that_no_result_needs_is_dropped() {
    let (stages, mbs, rows) = (2, 4, 4);
    let loss = loss(stages, rows);
    let program = trace(&step_avals(stages, mbs, rows), |a| {
        let xs = [&a[stages + 1], &a[stages + 2]];
        let outs = treduce(&[&a[0], &a[1]], &xs, 0, "1f1b", &[], |w, mb| {
            let outs = value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]]);
            let _unused = &outs[0] * &outs[1].sum(&[0, 1]);
            outs
        });
        vec![
            &a[0] - &(&a[stages] * &outs[1]),
            &a[1] - &(&a[stages] * &outs[2]),
            outs[0].clone(),
        ]
    })
    .unwrap();
    assert!(!check(&program, stages, stages, mbs, rows, Fusion::Never));
}
