//! JAXPP's other stage-boundary entry points: a loss written with `mark_stage_end` trains under
//! `mpmd_jit` as the same loss written with `enter_stage` markers does, and a step whose loss is
//! split by `pipeline_yield` (no micro-batch loop) runs under `mpmd_jit_by_yield`, stage `i` on
//! group `i`, giving the interpreted step's results.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::jit::{from_host, to_host};
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{
    Tensor, mark_stage_end, pipeline_yield, trace, treduce, value_and_grad_call,
    value_and_grad_with_aux_call,
};
use tessera_ir::{Array, ClosedJaxpr, DType, ParamValue, Prim, ShapedArray};
use tessera_mpmd::driver::DriverError;
use tessera_mpmd::{MpmdJitOptions, MpmdMesh, mpmd_jit, mpmd_jit_by_yield};
use tessera_pjrt::{Client, HostArray};
use tessera_sharding::Mesh;

const WIDTH: i64 = 8;
const ROWS: i64 = 2;

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

/// How the loss writes its stage boundaries.
#[derive(Clone, Copy)]
enum Marker {
    EnterStage,
    MarkStageEnd,
    Yield,
}

/// `x, w_0, w_1, y -> mean((tanh(tanh(x w_0) w_1 + sin(x) / 2) - y)^2)`: two values (the
/// activation and a skip of the input) cross the one stage boundary, written as `marker` says.
fn loss(marker: Marker) -> ClosedJaxpr {
    let avals = [
        f32(&[ROWS, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[ROWS, WIDTH]),
    ];
    trace(&avals, |a| {
        let h = a[0].matmul(&a[1]).tanh();
        let skip = &a[0].sin() * 0.5;
        let crossing: Vec<Tensor> = match marker {
            Marker::EnterStage => vec![h.enter_stage(1), skip.enter_stage(1)],
            Marker::MarkStageEnd => mark_stage_end(&[h, skip]),
            Marker::Yield => pipeline_yield(&[h, skip]),
        };
        let out = (&crossing[0].matmul(&a[2]) + &crossing[1]).tanh();
        vec![(&out - &a[3]).integer_pow(2).mean(&[0, 1])]
    })
    .unwrap()
}

/// The stage numbers of a program's markers, in order.
fn markers(program: &ClosedJaxpr) -> Vec<i64> {
    program
        .jaxpr
        .eqns
        .iter()
        .filter(|e| e.prim == Prim::PipelineEnterStage)
        .map(|e| match e.params.get("stage") {
            Some(ParamValue::Int(s)) => *s,
            other => panic!("a marker without a stage: {other:?}"),
        })
        .collect()
}

fn values(shape: &[i64], seed: f64) -> Array {
    let n: i64 = shape.iter().product();
    let data = (0..n)
        .map(|i| ((i as f64 + 1.0) * 0.618 + seed).sin() * 0.5)
        .collect();
    Array::new(DType::F32, shape, data).unwrap()
}

fn mesh(groups: i64) -> MpmdMesh {
    MpmdMesh::new(
        Mesh::auto(&[("stage", groups), ("data", 8 / groups)]).unwrap(),
        "stage",
    )
    .unwrap()
}

/// Asserts every element of `got` within `1e-6 * max(1, |want|)` of `want`.
fn assert_within_1e6(got: &[HostArray], want: &[Array], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: the number of results");
    for (k, (got, want)) in got.iter().zip(want).enumerate() {
        let got = from_host(got, want.dtype()).unwrap();
        assert_eq!(got.shape(), want.shape(), "{what}: result {k}");
        for (a, b) in got.to_vec().iter().zip(want.to_vec()) {
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "{what}: result {k}: {a} vs {b}"
            );
        }
    }
}

/// `w_0, w_1, lr, xs, ys -> (w_0', w_1', mean loss)`: SGD over `treduce`'s 4 micro-batches.
fn looped_step(loss: &ClosedJaxpr) -> ClosedJaxpr {
    let avals = [
        f32(&[WIDTH, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[]),
        f32(&[4, ROWS, WIDTH]),
        f32(&[4, ROWS, WIDTH]),
    ];
    trace(&avals, |a| {
        let outs = treduce(&[&a[0], &a[1]], &[&a[3], &a[4]], 0, "1f1b", &[], |w, mb| {
            value_and_grad_call(loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]])
        });
        vec![
            &a[0] - &(&a[2] * &(&outs[1] / 4.0)),
            &a[1] - &(&a[2] * &(&outs[2] / 4.0)),
            outs[0].mean(&[0]),
        ]
    })
    .unwrap()
}

/// Runs `steps` steps of `program` under `mpmd_jit` on 2 groups, feeding each step the last
/// step's weights; the last step's results.
fn pipelined(program: &ClosedJaxpr, args: &[Array], steps: usize) -> Vec<HostArray> {
    let client = Client::cpu(8).unwrap();
    let jit = mpmd_jit(&client, &mesh(2), program).unwrap();
    let mut host: Vec<HostArray> = args.iter().map(|a| to_host(a).unwrap()).collect();
    let mut outputs = Vec::new();
    for _ in 0..steps {
        outputs = jit.call(&host).unwrap().outputs;
        host[..2].clone_from_slice(&outputs[..2]);
    }
    outputs
}

fn interpreted(program: &ClosedJaxpr, args: &[Array], steps: usize) -> Vec<Array> {
    let mut args = args.to_vec();
    let mut results = Vec::new();
    for _ in 0..steps {
        results = eval_closed(program, &args).unwrap();
        args[..2].clone_from_slice(&results[..2]);
    }
    results
}

#[test]
fn mark_stage_end_numbers_the_stages_it_ends_and_continues_after_enter_stage() {
    assert_eq!(markers(&loss(Marker::MarkStageEnd)), vec![1, 1]);
    assert_eq!(markers(&loss(Marker::Yield)), vec![1, 1]);
    let program = trace(&[f32(&[2])], |a| {
        let x = a[0].mark_stage_end().sin().mark_stage_end();
        let x = x.enter_stage(5).cos();
        vec![mark_stage_end(&[x]).remove(0)]
    })
    .unwrap();
    assert_eq!(markers(&program), vec![1, 2, 5, 6]);
    assert!(mark_stage_end(&[]).is_empty());
}

#[test]
fn a_loss_marked_with_mark_stage_end_trains_pipelined_like_enter_stage_and_the_interpreter() {
    let args = vec![
        values(&[WIDTH, WIDTH], 0.0),
        values(&[WIDTH, WIDTH], 1.0),
        Array::scalar(DType::F32, 0.5),
        values(&[4, ROWS, WIDTH], 10.0),
        values(&[4, ROWS, WIDTH], 20.0),
    ];
    let by_end = looped_step(&loss(Marker::MarkStageEnd));
    let by_enter = looped_step(&loss(Marker::EnterStage));
    let want = interpreted(&by_end, &args, 3);
    let got = pipelined(&by_end, &args, 3);
    assert_within_1e6(&got, &want, "mark_stage_end vs the interpreter");
    let entered = pipelined(&by_enter, &args, 3);
    let entered: Vec<Array> = entered
        .iter()
        .map(|h| from_host(h, DType::F32).unwrap())
        .collect();
    assert_within_1e6(&got, &entered, "mark_stage_end vs enter_stage");
    // Training moved the weights: the comparison is of a changed state.
    assert!(want[0].to_vec() != args[0].to_vec());
}

/// `w_0, w_1, lr, x, y -> (w_0', w_1', loss)`: one SGD step on the whole batch, no loop.
fn yield_step(loss: &ClosedJaxpr) -> ClosedJaxpr {
    let avals = [
        f32(&[WIDTH, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[]),
        f32(&[ROWS, WIDTH]),
        f32(&[ROWS, WIDTH]),
    ];
    trace(&avals, |a| {
        let outs = value_and_grad_call(loss, &[1, 2], &[&a[3], &a[0], &a[1], &a[4]]);
        vec![
            &a[0] - &(&a[2] * &outs[1]),
            &a[1] - &(&a[2] * &outs[2]),
            outs[0].clone(),
        ]
    })
    .unwrap()
}

#[test]
fn a_step_split_by_pipeline_yield_runs_each_stage_on_its_group_like_the_interpreter() {
    let program = yield_step(&loss(Marker::Yield));
    let args = vec![
        values(&[WIDTH, WIDTH], 0.0),
        values(&[WIDTH, WIDTH], 1.0),
        Array::scalar(DType::F32, 0.5),
        values(&[ROWS, WIDTH], 10.0),
        values(&[ROWS, WIDTH], 20.0),
    ];
    let client = Client::cpu(8).unwrap();
    let jit = mpmd_jit_by_yield(&client, &mesh(2), &program, &MpmdJitOptions::default()).unwrap();
    for s in 0..2 {
        assert_eq!(jit.pipeline().group_of_stage(s), Some(s), "stage {s}");
    }
    let mut host: Vec<HostArray> = args.iter().map(|a| to_host(a).unwrap()).collect();
    let mut state = args.clone();
    for step in 0..3 {
        let run = jit.call(&host).unwrap();
        let want = eval_closed(&program, &state).unwrap();
        assert_within_1e6(&run.outputs, &want, &format!("step {step}"));
        assert_eq!(run.losses.len(), 1, "the whole batch is one micro-batch");
        host[..2].clone_from_slice(&run.outputs[..2]);
        state[..2].clone_from_slice(&want[..2]);
    }
}

#[test]
fn yields_that_do_not_fit_the_groups_are_refused_saying_how_to_fix_them() {
    // Three stages (two boundaries) on a two-group mesh.
    let avals = [
        f32(&[ROWS, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[ROWS, WIDTH]),
    ];
    let three = trace(&avals, |a| {
        let h = pipeline_yield(&[a[0].matmul(&a[1]).tanh()]).remove(0);
        let h = pipeline_yield(&[h.sin()]).remove(0);
        vec![(&h - &a[2]).integer_pow(2).mean(&[0, 1])]
    })
    .unwrap();
    let step = trace(
        &[
            f32(&[WIDTH, WIDTH]),
            f32(&[ROWS, WIDTH]),
            f32(&[ROWS, WIDTH]),
        ],
        |a| {
            let outs = value_and_grad_call(&three, &[1], &[&a[1], &a[0], &a[2]]);
            vec![&a[0] - &outs[1], outs[0].clone()]
        },
    )
    .unwrap();
    let client = Client::cpu(8).unwrap();
    let options = MpmdJitOptions::default();
    let message = match mpmd_jit_by_yield(&client, &mesh(2), &step, &options) {
        Ok(_) => panic!("a 3-stage loss compiled for 2 groups"),
        Err(e @ DriverError::Config(_)) => e.to_string(),
        Err(e) => panic!("not a configuration error: {e}"),
    };
    assert!(message.contains("3 stage(s)"), "{message}");
    assert!(message.contains("2 group(s)"), "{message}");
    assert!(message.contains("1 pipeline_yield boundaries"), "{message}");
    // A loop step belongs to mpmd_jit.
    let looped = looped_step(&loss(Marker::Yield));
    let message = match mpmd_jit_by_yield(&client, &mesh(2), &looped, &options) {
        Ok(_) => panic!("a treduce step compiled by mpmd_jit_by_yield"),
        Err(e) => e.to_string(),
    };
    assert!(message.contains("mpmd_jit"), "{message}");
    // Stage i runs on group i: a mesh with more groups than stages is refused too.
    assert!(mpmd_jit_by_yield(&client, &mesh(4), &step, &options).is_err());
}

#[test]
fn a_yield_step_whose_loss_returns_a_metric_gives_it_like_the_interpreter() {
    let avals = [
        f32(&[ROWS, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[ROWS, WIDTH]),
    ];
    // The loss and, as a metric, the largest output.
    let loss = trace(&avals, |a| {
        let h = pipeline_yield(&[a[0].matmul(&a[1]).tanh()]).remove(0);
        let out = h.matmul(&a[2]).tanh();
        let loss = (&out - &a[3]).integer_pow(2).mean(&[0, 1]);
        vec![loss, out.max(&[0, 1])]
    })
    .unwrap();
    let step_avals = [
        f32(&[WIDTH, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[ROWS, WIDTH]),
        f32(&[ROWS, WIDTH]),
    ];
    let step = trace(&step_avals, |a| {
        let outs = value_and_grad_with_aux_call(&loss, &[1, 2], &[&a[2], &a[0], &a[1], &a[3]]);
        vec![
            &a[0] - &(&outs[2] * 0.5),
            &a[1] - &(&outs[3] * 0.5),
            outs[0].clone(),
            outs[1].clone(),
        ]
    })
    .unwrap();
    let args = vec![
        values(&[WIDTH, WIDTH], 3.0),
        values(&[WIDTH, WIDTH], 4.0),
        values(&[ROWS, WIDTH], 5.0),
        values(&[ROWS, WIDTH], 6.0),
    ];
    let client = Client::cpu(8).unwrap();
    let jit = mpmd_jit_by_yield(&client, &mesh(2), &step, &MpmdJitOptions::default()).unwrap();
    let host: Vec<HostArray> = args.iter().map(|a| to_host(a).unwrap()).collect();
    let run = jit.call(&host).unwrap();
    let want = eval_closed(&step, &args).unwrap();
    assert_within_1e6(&run.outputs, &want, "with a metric");
    assert_eq!(
        want[3].shape(),
        &[] as &[i64],
        "the metric keeps its own shape"
    );
}
