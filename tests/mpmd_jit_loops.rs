//! `mpmd_jit` on general loop bodies: per-micro-batch metrics (the loss program's auxiliary
//! results) combined by `Concat` on any axis, `Add` or `Max`; a loss combined by `Max`;
//! gradients combined by `Max`;
//! `treduce_i`, whose body slices the batch by the micro-batch index; and micro-batch data
//! already on a group's devices. Each runs pipelined and equals the step interpreted
//! sequentially.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::jit::to_host;
use tessera_ir::interp::eval_closed;
use tessera_ir::prim::ReduceOp;
use tessera_ir::trace::{
    Tensor, trace, treduce, treduce_i, value_and_grad_call, value_and_grad_with_aux_call,
};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_mpmd::{MpmdArray, MpmdMesh, StepArg, mpmd_jit};
use tessera_pjrt::{Array as DeviceArray, Client};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};
use tessera_tests::assert_close;

const WIDTH: i64 = 8;

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

/// `x, w_0..w_{S-1}, y -> tanh(... tanh(x w_0) ...)`'s squared error, a stage marker per layer;
/// with `metrics`, also: the largest absolute error, each column's mean output, the mean of the
/// first stage's activation (computed in stage 0, so it crosses to the last stage) and the count
/// of positive outputs as an `i32`.
fn loss(stages: usize, rows: i64, metrics: bool) -> ClosedJaxpr {
    let mut avals = vec![f32(&[rows, WIDTH])];
    avals.extend((0..stages).map(|_| f32(&[WIDTH, WIDTH])));
    avals.push(f32(&[rows, WIDTH]));
    trace(&avals, |a| {
        let mut h = a[0].clone();
        let mut first = None;
        for s in 0..stages {
            let x = match s {
                0 => h.clone(),
                _ => h.enter_stage(s as i64),
            };
            h = x.matmul(&a[1 + s]).tanh();
            first.get_or_insert_with(|| h.mean(&[0, 1]));
        }
        let err = &h - &a[stages + 1];
        let loss = err.integer_pow(2).mean(&[0, 1]);
        if !metrics {
            return vec![loss];
        }
        let positives = h.ge(&h.full_like_scalar(0.0)).astype(DType::I32);
        vec![
            loss,
            err.abs().max(&[0, 1]),
            h.mean(&[0]),
            first.unwrap(),
            positives.sum(&[0, 1]),
        ]
    })
    .unwrap()
}

/// SGD on the weights from the loop's gradients (`outs[first_grad..]`), then `extra` results.
fn sgd(a: &[Tensor], outs: &[Tensor], stages: usize, mbs: i64, first_grad: usize) -> Vec<Tensor> {
    (0..stages)
        .map(|s| &a[s] - &(&a[stages] * &(&outs[first_grad + s] / mbs as f64)))
        .collect()
}

/// `step(w.., lr, xs, ys) -> (w'.., loss, max error, column means, first activation, positives)`:
/// the loss combined by `loss_op`, the metrics by Max, Concat(1), Add and Add.
fn metric_step(
    stages: usize,
    mbs: i64,
    rows: i64,
    schedule: &str,
    loss_op: ReduceOp,
) -> ClosedJaxpr {
    let loss = loss(stages, rows, true);
    let mut avals: Vec<ShapedArray> = (0..stages).map(|_| f32(&[WIDTH, WIDTH])).collect();
    avals.extend([f32(&[]), f32(&[mbs, rows, WIDTH]), f32(&[mbs, rows, WIDTH])]);
    let argnums: Vec<usize> = (1..=stages).collect();
    let mut ops = vec![
        loss_op,
        ReduceOp::Max,
        ReduceOp::Concat(1),
        ReduceOp::Add,
        ReduceOp::Add,
    ];
    ops.extend((0..stages).map(|_| ReduceOp::Add));
    trace(&avals, |a| {
        let weights: Vec<&Tensor> = a[..stages].iter().collect();
        let xs = [&a[stages + 1], &a[stages + 2]];
        let outs = treduce(&weights, &xs, 0, schedule, &ops, |w, mb| {
            let mut args = vec![&mb[0]];
            args.extend(w.iter());
            args.push(&mb[1]);
            value_and_grad_with_aux_call(&loss, &argnums, &args)
        });
        let mut results = sgd(a, &outs, stages, mbs, 5);
        results.extend(outs[..5].iter().cloned());
        results
    })
    .unwrap()
}

/// The same model, its loop a `treduce_i`: the body takes micro-batch `i` of the whole batch.
fn indexed_step(stages: usize, mbs: i64, rows: i64, schedule: &str) -> ClosedJaxpr {
    let loss = loss(stages, rows, false);
    let mut avals: Vec<ShapedArray> = (0..stages).map(|_| f32(&[WIDTH, WIDTH])).collect();
    avals.extend([f32(&[]), f32(&[mbs, rows, WIDTH]), f32(&[mbs, rows, WIDTH])]);
    let argnums: Vec<usize> = (1..=stages).collect();
    trace(&avals, |a| {
        let mut invariants: Vec<&Tensor> = a[..stages].iter().collect();
        invariants.extend([&a[stages + 1], &a[stages + 2]]);
        let outs = treduce_i(&a[0], &invariants, mbs, schedule, &[], |inv, i| {
            let (x, y) = (inv[stages].take(i, 0), inv[stages + 1].take(i, 0));
            let mut args = vec![&x];
            args.extend(inv[..stages].iter());
            args.push(&y);
            value_and_grad_call(&loss, &argnums, &args)
        });
        let mut results = sgd(a, &outs, stages, mbs, 1);
        results.push(outs[0].mean(&[0]));
        results
    })
    .unwrap()
}

/// The plain step: a `treduce` over the sliced batch.
fn plain_step(stages: usize, mbs: i64, rows: i64, schedule: &str) -> ClosedJaxpr {
    let loss = loss(stages, rows, false);
    let mut avals: Vec<ShapedArray> = (0..stages).map(|_| f32(&[WIDTH, WIDTH])).collect();
    avals.extend([f32(&[]), f32(&[mbs, rows, WIDTH]), f32(&[mbs, rows, WIDTH])]);
    let argnums: Vec<usize> = (1..=stages).collect();
    trace(&avals, |a| {
        let weights: Vec<&Tensor> = a[..stages].iter().collect();
        let xs = [&a[stages + 1], &a[stages + 2]];
        let outs = treduce(&weights, &xs, 0, schedule, &[], |w, mb| {
            let mut args = vec![&mb[0]];
            args.extend(w.iter());
            args.push(&mb[1]);
            value_and_grad_call(&loss, &argnums, &args)
        });
        let mut results = sgd(a, &outs, stages, mbs, 1);
        results.push(outs[0].mean(&[0]));
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

fn mesh(stages: usize) -> MpmdMesh {
    let data = 8 / stages as i64;
    MpmdMesh::new(
        Mesh::auto(&[("stage", stages as i64), ("data", data)]).unwrap(),
        "stage",
    )
    .unwrap()
}

/// Runs `program` with mpmd_jit on `stages` groups from host arguments and checks it against
/// the interpreter.
fn check(program: &ClosedJaxpr, stages: usize, mbs: i64, rows: i64) {
    let client = Client::cpu(8).unwrap();
    let jit = mpmd_jit(&client, &mesh(stages), program).unwrap();
    let args = step_args(stages, mbs, rows);
    let want = eval_closed(program, &args).unwrap();
    let host: Vec<_> = args.iter().map(|a| to_host(a).unwrap()).collect();
    let run = jit.call(&host).unwrap();
    assert_close(&run.outputs, &want);
    assert_eq!(run.losses.len(), mbs as usize);
}

#[test]
fn per_micro_batch_metrics_are_pipelined_and_combined_as_the_loop_combines_them() {
    let (mbs, rows) = (4, 4);
    for (stages, schedule, loss_op) in [
        (2, "1f1b", ReduceOp::Concat(0)),
        (4, "zero-bubble", ReduceOp::Max),
        (2, "interleaved-1f1b", ReduceOp::Add),
    ] {
        let program = metric_step(stages, mbs, rows, schedule, loss_op);
        // The column means are stacked along axis 1, one column per micro-batch.
        let out = program.jaxpr.out_avals();
        assert_eq!(out[stages + 2].shape, vec![WIDTH, mbs]);
        check(&program, stages, mbs, rows);
    }
}

#[test]
fn a_treduce_i_step_trains_pipelined_like_the_sequential_loop() {
    let (mbs, rows) = (4, 4);
    check(&indexed_step(2, mbs, rows, "1f1b"), 2, mbs, rows);
    check(&indexed_step(4, mbs, rows, "gpipe"), 4, mbs, rows);
}

/// `host` on the devices of `group`, laid out by `spec` in the group's mesh.
fn on_group(
    client: &Client,
    mesh: &MpmdMesh,
    group: usize,
    host: &Array,
    spec: &PartitionSpec,
) -> StepArg {
    let sharding = NamedSharding::new(mesh.group(group).unwrap(), spec.clone()).unwrap();
    let array = DeviceArray::device_put(client, &to_host(host).unwrap(), &sharding).unwrap();
    StepArg::Mpmd(Box::new(MpmdArray::on_its_group(mesh, array).unwrap()))
}

#[test]
fn micro_batches_already_on_the_first_group_are_sliced_there() {
    let (stages, mbs, rows) = (2, 4, 4);
    let program = plain_step(stages, mbs, rows, "1f1b");
    let client = Client::cpu(8).unwrap();
    let mesh = mesh(stages);
    let jit = mpmd_jit(&client, &mesh, &program).unwrap();
    let args = step_args(stages, mbs, rows);
    let want = eval_closed(&program, &args).unwrap();
    // The inputs and the targets on group 0 (the targets are read by stage 1, on group 1), the
    // inputs split over the group's `data` axis, the targets replicated.
    let mut call: Vec<StepArg> = args
        .iter()
        .map(|a| StepArg::Host(to_host(a).unwrap()))
        .collect();
    let split = PartitionSpec::parse("P(None, 'data')").unwrap();
    call[stages + 1] = on_group(&client, &mesh, 0, &args[stages + 1], &split);
    call[stages + 2] = on_group(
        &client,
        &mesh,
        0,
        &args[stages + 2],
        &PartitionSpec::replicated(),
    );
    for _ in 0..2 {
        let run = jit.call_mpmd(&call).unwrap();
        let got: Vec<_> = run.outputs.iter().map(|o| o.to_host().unwrap()).collect();
        assert_close(&got, &want);
    }
    // The same step from host data gives the same numbers.
    let host: Vec<_> = args.iter().map(|a| to_host(a).unwrap()).collect();
    assert_close(&jit.call(&host).unwrap().outputs, &want);
}

/// `step(w.., lr, xs, ys) -> (w'.., mean loss)` whose loop combines the gradients by `grad_ops`.
fn grad_op_step(
    stages: usize,
    mbs: i64,
    rows: i64,
    schedule: &str,
    grad_ops: &[ReduceOp],
) -> ClosedJaxpr {
    let loss = loss(stages, rows, false);
    let mut avals: Vec<ShapedArray> = (0..stages).map(|_| f32(&[WIDTH, WIDTH])).collect();
    avals.extend([f32(&[]), f32(&[mbs, rows, WIDTH]), f32(&[mbs, rows, WIDTH])]);
    let argnums: Vec<usize> = (1..=stages).collect();
    let mut ops = vec![ReduceOp::Concat(0)];
    ops.extend_from_slice(grad_ops);
    trace(&avals, |a| {
        let weights: Vec<&Tensor> = a[..stages].iter().collect();
        let xs = [&a[stages + 1], &a[stages + 2]];
        let outs = treduce(&weights, &xs, 0, schedule, &ops, |w, mb| {
            let mut args = vec![&mb[0]];
            args.extend(w.iter());
            args.push(&mb[1]);
            value_and_grad_call(&loss, &argnums, &args)
        });
        let mut results = sgd(a, &outs, stages, mbs, 1);
        results.push(outs[0].mean(&[0]));
        results
    })
    .unwrap()
}

/// JAXPP's `treduce` takes an operation per result: a gradient combined by `Max` (each
/// element's largest value over the micro-batches) accumulates by `max` on its stage's group,
/// beside gradients summed, under schedules with whole and split backwards, and as one program
/// on one group; each equals the step interpreted (the sequential loop).
#[test]
fn a_gradient_combined_by_max_is_pipelined_like_the_sequential_loop() {
    let (mbs, rows) = (4, 4);
    let (add, max) = (ReduceOp::Add, ReduceOp::Max);
    for (stages, schedule, ops) in [
        (2, "1f1b", vec![max, add]),
        (4, "zero-bubble", vec![add, max, max, add]),
        (2, "gpipe", vec![max, max]),
        (1, "1f1b", vec![max]),
    ] {
        let program = grad_op_step(stages, mbs, rows, schedule, &ops);
        check(&program, stages, mbs, rows);
    }
    // Max differs from the sum here, so the check above tells them apart.
    let summed = grad_op_step(2, mbs, rows, "1f1b", &[add, add]);
    let maxed = grad_op_step(2, mbs, rows, "1f1b", &[max, add]);
    let args = step_args(2, mbs, rows);
    let (s, m) = (
        eval_closed(&summed, &args).unwrap(),
        eval_closed(&maxed, &args).unwrap(),
    );
    assert_ne!(s[0].to_vec(), m[0].to_vec());
    assert_eq!(s[1].to_vec(), m[1].to_vec());
}

// Gradients combined by `Concat`, and a tied weight's by `Max`: `tests/mpmd_jit_concat_grads.rs`.

#[test]
fn a_call_whose_execution_fails_leaves_the_client_usable() {
    use tessera_mpmd::MpmdJitOptions;
    let (stages, mbs, rows) = (2, 4, 4);
    let program = plain_step(stages, mbs, rows, "1f1b");
    let client = Client::cpu(8).unwrap();
    let options = MpmdJitOptions {
        donate_argnums: vec![0, 1],
        ..MpmdJitOptions::default()
    };
    let jit = tessera_mpmd::mpmd_jit_with(&client, &mesh(stages), &program, &options).unwrap();
    let args = step_args(stages, mbs, rows);
    let mut call: Vec<StepArg> = args
        .iter()
        .map(|a| StepArg::Host(to_host(a).unwrap()))
        .collect();
    let first = jit.call_mpmd_donated(&mut call).unwrap().outputs;
    for s in 0..stages {
        call[s] = first[s].clone().into_arg();
    }
    // Another handle on the weights, whose buffers the next call donates: PJRT refuses to run
    // a stage on them, mid-pipeline.
    let mut stale = call.clone();
    let second = jit.call_mpmd_donated(&mut call).unwrap().outputs;
    let err = jit
        .call_mpmd_donated(&mut stale)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("deleted or donated"), "{err}");
    // The next calls run, on the same client, and give the interpreter's third step.
    for s in 0..stages {
        call[s] = second[s].clone().into_arg();
    }
    let third = jit.call_mpmd_donated(&mut call).unwrap().outputs;
    let mut want_args = args.clone();
    let mut want = Vec::new();
    for _ in 0..3 {
        want = eval_closed(&program, &want_args).unwrap();
        want_args[..stages].clone_from_slice(&want[..stages]);
    }
    let got: Vec<_> = third.iter().map(|o| o.to_host().unwrap()).collect();
    assert_close(&got, &want);
}
