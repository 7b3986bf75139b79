//! `mpmd_jit` on a step whose code before its `treduce` computes loop operands: the batch
//! normalized (sliced into micro-batches) and a target shift computed from the targets and the
//! last weight (a loop invariant read by the last stage). That code is compiled and runs on a group's devices, from host arguments or
//! from data already on a group, and the pipelined step (several groups, several schedules)
//! equals the step interpreted sequentially; the host interpreter never runs it.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::jit::to_host;
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{Tensor, trace, treduce, value_and_grad_call};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_mpmd::{BeforeLoopRuns, MpmdArray, MpmdMesh, StepArg, mpmd_jit};
use tessera_pjrt::{Array as DeviceArray, Client};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

const WIDTH: i64 = 8;

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

/// `x, w_0..w_{S-1}, y, c -> mean((tanh(... tanh(x w_0) ...) - y + c)^2)`, a stage per layer.
fn loss(stages: usize, rows: i64) -> ClosedJaxpr {
    let mut avals = vec![f32(&[rows, WIDTH])];
    avals.extend((0..stages).map(|_| f32(&[WIDTH, WIDTH])));
    avals.extend([f32(&[rows, WIDTH]), f32(&[rows, WIDTH])]);
    trace(&avals, |a| {
        let mut h = a[0].clone();
        for s in 0..stages {
            let x = match s {
                0 => h.clone(),
                _ => h.enter_stage(s as i64),
            };
            h = x.matmul(&a[1 + s]).tanh();
        }
        let err = &(&h - &a[stages + 1]) + &a[stages + 2];
        vec![err.integer_pow(2).mean(&[0, 1])]
    })
    .unwrap()
}

/// `step(w.., lr, xs, ys) -> (w'.., mean loss)`. Before the loop: `xs` normalized,
/// `(xs - mean(xs)) / (max|xs| + 1)` (sliced by the loop), and `c = mean(ys, 0)` (a loop
/// invariant) plus the last weight over 10 (`rows` must be `WIDTH`); the loop's gradients then
/// update the weights by SGD.
fn step(stages: usize, mbs: i64, rows: i64, schedule: &str) -> ClosedJaxpr {
    let loss = loss(stages, rows);
    let mut avals: Vec<ShapedArray> = (0..stages).map(|_| f32(&[WIDTH, WIDTH])).collect();
    avals.extend([f32(&[]), f32(&[mbs, rows, WIDTH]), f32(&[mbs, rows, WIDTH])]);
    let argnums: Vec<usize> = (1..=stages).collect();
    trace(&avals, |a| {
        let (xs, ys) = (&a[stages + 1], &a[stages + 2]);
        let largest = xs.abs().max(&[0, 1, 2]);
        let scale = &largest + &largest.full_like_scalar(1.0);
        let normalized = &(xs - &xs.mean(&[0, 1, 2])) / &scale;
        // A parameter-sized invariant from the last weight (rows == WIDTH).
        let shift = &ys.mean(&[0]) + &(&a[stages - 1] / 10.0);
        let mut invariants: Vec<&Tensor> = a[..stages].iter().collect();
        invariants.push(&shift);
        let outs = treduce(
            &invariants,
            &[&normalized, ys],
            0,
            schedule,
            &[],
            |inv, mb| {
                let mut args = vec![&mb[0]];
                args.extend(inv[..stages].iter());
                args.extend([&mb[1], &inv[stages]]);
                value_and_grad_call(&loss, &argnums, &args)
            },
        );
        let mut results: Vec<Tensor> = (0..stages)
            .map(|s| &a[s] - &(&a[stages] * &(&outs[1 + s] / mbs as f64)))
            .collect();
        results.push(outs[0].mean(&[0]));
        results
    })
    .unwrap()
}

fn values(shape: &[i64], seed: f64) -> Array {
    let n: i64 = shape.iter().product();
    let data = (0..n).map(|i| ((i as f64 + 1.0) * 0.618 + seed).sin() * 2.0 + 0.5);
    Array::new(DType::F32, shape, data.collect()).unwrap()
}

fn step_args(stages: usize, mbs: i64, rows: i64) -> Vec<Array> {
    let mut args: Vec<Array> = (0..stages)
        .map(|s| {
            let w = values(&[WIDTH, WIDTH], s as f64);
            Array::new(
                DType::F32,
                &[WIDTH, WIDTH],
                w.to_vec().iter().map(|v| v * 0.2).collect(),
            )
            .unwrap()
        })
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

/// Each result of `got` within 1e-6 (relative above 1) of the interpreter's `want`.
fn assert_close(got: &[tessera_pjrt::HostArray], want: &[Array]) {
    assert_eq!(got.len(), want.len(), "the number of results");
    for (k, (got, want)) in got.iter().zip(want).enumerate() {
        let got = tessera::jit::from_host(got, want.dtype()).unwrap();
        assert_eq!(got.shape(), want.shape(), "result {k}");
        for (a, b) in got.to_vec().iter().zip(want.to_vec()) {
            let tolerance = 1e-6 * b.abs().max(1.0);
            assert!(
                (a - b).abs() <= tolerance,
                "result {k}: {a} vs interpreter {b}"
            );
        }
    }
}

/// `on_groups` runs on the devices, the last on `group`, none on the host.
fn runs(on_groups: usize, group: Option<usize>) -> Option<BeforeLoopRuns> {
    Some(BeforeLoopRuns {
        on_groups,
        on_host: 0,
        last_group: group,
    })
}

#[test]
fn code_before_the_loop_runs_on_the_groups_and_matches_the_interpreter() {
    let (mbs, rows) = (4, WIDTH);
    for (stages, schedule) in [(2, "1f1b"), (4, "gpipe"), (2, "interleaved-1f1b")] {
        let program = step(stages, mbs, rows, schedule);
        let client = Client::cpu(8).unwrap();
        let jit = mpmd_jit(&client, &mesh(stages), &program).unwrap();
        assert!(!jit.is_fused());
        assert_eq!(jit.before_loop_runs(), runs(0, None), "{schedule}");
        let args = step_args(stages, mbs, rows);
        let want = eval_closed(&program, &args).unwrap();
        let host: Vec<_> = args.iter().map(|a| to_host(a).unwrap()).collect();
        let run = jit.call(&host).unwrap();
        assert_close(&run.outputs, &want);
        assert_eq!(run.losses.len(), mbs as usize);
        // The normalization and the shift ran as a program on the first stage's group (the
        // arguments came from the host), not on the host.
        assert_eq!(jit.before_loop_runs(), runs(1, Some(0)), "{schedule}");
    }
}

#[test]
fn code_before_the_loop_reads_data_on_the_last_group_there() {
    let (stages, mbs, rows) = (2, 4, WIDTH);
    let program = step(stages, mbs, rows, "1f1b");
    let client = Client::cpu(8).unwrap();
    let mesh = mesh(stages);
    let jit = mpmd_jit(&client, &mesh, &program).unwrap();
    let args = step_args(stages, mbs, rows);
    // The batch on group 1 (whose stage reads none of the normalized inputs): the code before
    // the loop runs there and the pipeline moves each normalized micro-batch to group 0. From
    // the second call on, the last weight it reads lies on group 1 too.
    let mut call: Vec<StepArg> = args
        .iter()
        .map(|a| StepArg::Host(to_host(a).unwrap()))
        .collect();
    let split = PartitionSpec::parse("P(None, 'data')").unwrap();
    call[stages + 1] = on_group(&client, &mesh, 1, &args[stages + 1], &split);
    call[stages + 2] = on_group(
        &client,
        &mesh,
        1,
        &args[stages + 2],
        &PartitionSpec::replicated(),
    );
    // Two steps, the second on the weights the first left on their groups.
    let mut want_args = args.clone();
    for n in 1..=2 {
        let want = eval_closed(&program, &want_args).unwrap();
        let run = jit.call_mpmd(&call).unwrap();
        let got: Vec<_> = run.outputs.iter().map(|o| o.to_host().unwrap()).collect();
        assert_close(&got, &want);
        assert_eq!(jit.before_loop_runs(), runs(n, Some(1)));
        for (arg, out) in call.iter_mut().zip(&run.outputs).take(stages) {
            *arg = out.clone().into_arg();
        }
        want_args[..stages].clone_from_slice(&want[..stages]);
    }
}

#[test]
fn a_step_run_as_one_program_computes_its_code_before_the_loop_inside_it() {
    let (mbs, rows) = (4, WIDTH);
    let program = step(1, mbs, rows, "1f1b");
    let client = Client::cpu(8).unwrap();
    let jit = mpmd_jit(&client, &mesh(1), &program).unwrap();
    assert!(jit.is_fused());
    let args = step_args(1, mbs, rows);
    let want = eval_closed(&program, &args).unwrap();
    let host: Vec<_> = args.iter().map(|a| to_host(a).unwrap()).collect();
    assert_close(&jit.call(&host).unwrap().outputs, &want);
    // Its one program holds the code before the loop: no separate run counted.
    assert_eq!(jit.before_loop_runs(), None);
}
