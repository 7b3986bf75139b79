//! Steps holding several `treduce` loops (issue 32, JAXPP's gradient accumulation then an eval
//! loop, or two accumulation loops over two data sources). `mpmd_jit` pipelines one loop per
//! step: such a step is refused with a typed [`StepLoopsError`] naming the loops and how to
//! restructure, and the restructured steps, pipelined (1F1B over 2 groups), equal the original
//! step interpreted.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::jit::to_host;
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{Tensor, call_closed, trace, treduce, value_and_grad_call};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_mpmd::driver::DriverError;
use tessera_mpmd::{LoopKind, MpmdMesh, StepArg, StepLoopsError, StepResult, mpmd_jit};
use tessera_pjrt::Client;
use tessera_sharding::Mesh;
use tessera_tests::assert_close;

const WIDTH: i64 = 8;
const STAGES: usize = 2;
const ROWS: i64 = 2;

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

/// `x, w_0, w_1, y -> mean((tanh(tanh(x w_0) w_1) - y)^2)`, the second layer in stage 1.
fn loss() -> ClosedJaxpr {
    let mut avals = vec![f32(&[ROWS, WIDTH])];
    avals.extend((0..STAGES).map(|_| f32(&[WIDTH, WIDTH])));
    avals.push(f32(&[ROWS, WIDTH]));
    trace(&avals, |a| {
        let mut h = a[0].clone();
        for s in 0..STAGES {
            let x = match s {
                0 => h.clone(),
                _ => h.enter_stage(s as i64),
            };
            h = x.matmul(&a[1 + s]).tanh();
        }
        vec![(&h - &a[STAGES + 1]).integer_pow(2).mean(&[0, 1])]
    })
    .unwrap()
}

/// The training loop over `(xs, ys)`: `(losses, grads..)`.
fn train_loop(w: &[&Tensor], xs: &Tensor, ys: &Tensor) -> Vec<Tensor> {
    let loss = loss();
    let argnums: Vec<usize> = (1..=STAGES).collect();
    treduce(w, &[xs, ys], 0, "1f1b", &[], |w, mb| {
        let mut args = vec![&mb[0]];
        args.extend(w.iter());
        args.push(&mb[1]);
        value_and_grad_call(&loss, &argnums, &args)
    })
}

/// The forward-only loop over `(xs, ys)`: the losses.
fn eval_loop(w: &[&Tensor], xs: &Tensor, ys: &Tensor) -> Tensor {
    let loss = loss();
    let outs = treduce(w, &[xs, ys], 0, "1f1b", &[], |w, mb| {
        let mut args = vec![&mb[0]];
        args.extend(w.iter());
        args.push(&mb[1]);
        call_closed(&loss, &args)
    });
    outs[0].clone()
}

fn batch(mbs: i64) -> ShapedArray {
    f32(&[mbs, ROWS, WIDTH])
}

/// `w.., lr` then `extra` batches.
fn avals(extra: &[ShapedArray]) -> Vec<ShapedArray> {
    let mut avals: Vec<ShapedArray> = (0..STAGES).map(|_| f32(&[WIDTH, WIDTH])).collect();
    avals.push(f32(&[]));
    avals.extend(extra.iter().cloned());
    avals
}

/// SGD on the weights `a[..STAGES]` by the gradients `grads`, learning rate `a[STAGES]`.
fn sgd(a: &[Tensor], grads: &[Tensor]) -> Vec<Tensor> {
    (0..STAGES)
        .map(|s| &a[s] - &(&a[STAGES] * &grads[s]))
        .collect()
}

/// `step(w.., lr, xs, ys, ex, ey) -> (w'.., train loss, eval loss)`: train on `(xs, ys)`, then
/// an eval loss of the updated weights on `(ex, ey)`, a forward-only loop.
fn train_then_eval(mbs: i64, eval_mbs: i64) -> ClosedJaxpr {
    let avals = avals(&[batch(mbs), batch(mbs), batch(eval_mbs), batch(eval_mbs)]);
    trace(&avals, |a| {
        let w: Vec<&Tensor> = a[..STAGES].iter().collect();
        let outs = train_loop(&w, &a[STAGES + 1], &a[STAGES + 2]);
        let mut results = sgd(a, &outs[1..]);
        let updated: Vec<&Tensor> = results.iter().collect();
        let eval = eval_loop(&updated, &a[STAGES + 3], &a[STAGES + 4]).mean(&[0]);
        results.extend([outs[0].mean(&[0]), eval]);
        results
    })
    .unwrap()
}

/// The training half: `(w.., lr, xs, ys) -> (w'.., train loss)`.
fn train_step(mbs: i64) -> ClosedJaxpr {
    trace(&avals(&[batch(mbs), batch(mbs)]), |a| {
        let w: Vec<&Tensor> = a[..STAGES].iter().collect();
        let outs = train_loop(&w, &a[STAGES + 1], &a[STAGES + 2]);
        let mut results = sgd(a, &outs[1..]);
        results.push(outs[0].mean(&[0]));
        results
    })
    .unwrap()
}

/// The eval half: `(w.., ex, ey) -> eval loss`.
fn eval_step(mbs: i64) -> ClosedJaxpr {
    let mut avals: Vec<ShapedArray> = (0..STAGES).map(|_| f32(&[WIDTH, WIDTH])).collect();
    avals.extend([batch(mbs), batch(mbs)]);
    trace(&avals, |a| {
        let w: Vec<&Tensor> = a[..STAGES].iter().collect();
        vec![eval_loop(&w, &a[STAGES], &a[STAGES + 1]).mean(&[0])]
    })
    .unwrap()
}

/// `step(w.., lr, xs, ys, xs2, ys2) -> (w'.., losses, losses2)`: two accumulation loops over two
/// data sources, their gradients summed before the update.
fn two_sources(mbs: i64, mbs2: i64) -> ClosedJaxpr {
    let avals = avals(&[batch(mbs), batch(mbs), batch(mbs2), batch(mbs2)]);
    trace(&avals, |a| {
        let w: Vec<&Tensor> = a[..STAGES].iter().collect();
        let one = train_loop(&w, &a[STAGES + 1], &a[STAGES + 2]);
        let two = train_loop(&w, &a[STAGES + 3], &a[STAGES + 4]);
        let grads: Vec<Tensor> = (1..=STAGES).map(|g| &one[g] + &two[g]).collect();
        let mut results = sgd(a, &grads);
        results.extend([one[0].clone(), two[0].clone()]);
        results
    })
    .unwrap()
}

/// The same as one loop over the micro-batches of both sources: `(w.., lr, xs, ys) -> (w'..,
/// losses)`.
fn one_loop(mbs: i64) -> ClosedJaxpr {
    trace(&avals(&[batch(mbs), batch(mbs)]), |a| {
        let w: Vec<&Tensor> = a[..STAGES].iter().collect();
        let outs = train_loop(&w, &a[STAGES + 1], &a[STAGES + 2]);
        let mut results = sgd(a, &outs[1..]);
        results.push(outs[0].clone());
        results
    })
    .unwrap()
}

fn values(shape: &[i64], seed: f64) -> Array {
    let n: i64 = shape.iter().product();
    let data = (0..n).map(|i| ((i as f64 + 1.0) * 0.618 + seed).sin() * 0.5);
    Array::new(DType::F32, shape, data.collect()).unwrap()
}

/// The weights and learning rate, then a batch of `mbs` micro-batches per entry of `mbs`
/// (inputs and targets).
fn args(mbs: &[i64]) -> Vec<Array> {
    let mut args: Vec<Array> = (0..STAGES)
        .map(|s| values(&[WIDTH, WIDTH], s as f64))
        .collect();
    args.push(Array::scalar(DType::F32, 0.1));
    for (k, &m) in mbs.iter().enumerate() {
        args.push(values(&[m, ROWS, WIDTH], 10.0 + 20.0 * k as f64));
        args.push(values(&[m, ROWS, WIDTH], 20.0 + 20.0 * k as f64));
    }
    args
}

fn mesh(groups: i64) -> MpmdMesh {
    MpmdMesh::new(
        Mesh::auto(&[("stage", groups), ("data", 8 / groups)]).unwrap(),
        "stage",
    )
    .unwrap()
}

fn refusal(program: &ClosedJaxpr, groups: i64) -> StepLoopsError {
    let client = Client::cpu(8).unwrap();
    match mpmd_jit(&client, &mesh(groups), program) {
        Err(DriverError::StepLoops(e)) => e,
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("a step with several treduces compiled"),
    }
}

fn host(arrays: &[Array]) -> Vec<StepArg> {
    arrays
        .iter()
        .map(|a| StepArg::Host(to_host(a).unwrap()))
        .collect()
}

#[test]
fn a_training_loop_then_an_eval_loop_is_refused_naming_both_and_how_to_restructure() {
    let step = train_then_eval(4, 3);
    // Pipelined over 2 groups and on one group (the fused path) alike.
    for groups in [2, 1] {
        let err = refusal(&step, groups);
        let StepLoopsError::SeveralLoops { kinds, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(kinds, &[LoopKind::Training, LoopKind::ForwardOnly]);
        let text = err.to_string();
        assert!(text.contains("2 treduce loops"), "{text}");
        assert!(text.contains("training, forward-only"), "{text}");
        assert!(text.contains("one treduce per step"), "{text}");
        assert!(text.contains("a step of its own"), "{text}");
    }
}

#[test]
fn the_train_then_eval_step_split_in_two_pipelined_steps_equals_it_interpreted() {
    let (mbs, eval_mbs) = (4, 3);
    let all = args(&[mbs, eval_mbs]);
    let want = eval_closed(&train_then_eval(mbs, eval_mbs), &all).unwrap();
    let client = Client::cpu(8).unwrap();
    let mesh = mesh(2);
    // The training step, 1F1B over 2 groups; its weights stay on their groups.
    let train = mpmd_jit(&client, &mesh, &train_step(mbs)).unwrap();
    let trained = train.call_mpmd(&host(&all[..STAGES + 3])).unwrap();
    assert_eq!(trained.losses.len(), mbs as usize);
    // The eval step, forward only, on the updated weights where they are.
    let eval = mpmd_jit(&client, &mesh, &eval_step(eval_mbs)).unwrap();
    assert!(eval.pipeline().is_forward_only());
    let mut eval_args: Vec<StepArg> = trained.outputs[..STAGES]
        .iter()
        .cloned()
        .map(StepResult::into_arg)
        .collect();
    eval_args.extend(host(&all[STAGES + 3..]));
    let evaluated = eval.call_mpmd(&eval_args).unwrap();
    assert_eq!(evaluated.losses.len(), eval_mbs as usize);
    let mut got: Vec<_> = trained
        .outputs
        .iter()
        .map(|o| o.to_host().unwrap())
        .collect();
    got.push(evaluated.outputs[0].to_host().unwrap());
    assert_close(&got, &want);
}

#[test]
fn two_accumulation_loops_are_refused_and_equal_one_loop_over_both_sources() {
    let (mbs, mbs2) = (4, 2);
    let step = two_sources(mbs, mbs2);
    let err = refusal(&step, 2);
    let StepLoopsError::SeveralLoops { kinds, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(kinds, &[LoopKind::Training, LoopKind::Training]);
    assert!(err.to_string().contains("concatenated"), "{err}");
    // The restructured step: one loop over the micro-batches of both sources.
    let all = args(&[mbs, mbs2]);
    let want = eval_closed(&step, &all).unwrap();
    let concat = |a: &Array, b: &Array| {
        let mut data = a.to_vec();
        data.extend(b.to_vec());
        Array::new(DType::F32, &[mbs + mbs2, ROWS, WIDTH], data).unwrap()
    };
    let mut joined = all[..=STAGES].to_vec();
    joined.push(concat(&all[STAGES + 1], &all[STAGES + 3]));
    joined.push(concat(&all[STAGES + 2], &all[STAGES + 4]));
    let client = Client::cpu(8).unwrap();
    let jit = mpmd_jit(&client, &mesh(2), &one_loop(mbs + mbs2)).unwrap();
    let run = jit.call(&host_arrays(&joined)).unwrap();
    assert_eq!(run.losses.len(), (mbs + mbs2) as usize);
    assert_close(&run.outputs[..STAGES], &want[..STAGES]);
    // Its losses are both loops' losses, one after the other.
    let losses = tessera::jit::from_host(&run.outputs[STAGES], DType::F32)
        .unwrap()
        .to_vec();
    let mut wanted = want[STAGES].to_vec();
    wanted.extend(want[STAGES + 1].to_vec());
    assert_eq!(losses.len(), wanted.len());
    for (g, w) in losses.iter().zip(&wanted) {
        assert!((g - w).abs() < 1e-5, "{losses:?} vs {wanted:?}");
    }
}

fn host_arrays(arrays: &[Array]) -> Vec<tessera_pjrt::HostArray> {
    arrays.iter().map(|a| to_host(a).unwrap()).collect()
}

#[test]
fn a_step_without_a_treduce_is_refused_pointing_to_mpmd_jit_by_yield() {
    let step = trace(&avals(&[]), |a| sgd(a, &a[..STAGES])).unwrap();
    let client = Client::cpu(8).unwrap();
    match mpmd_jit(&client, &mesh(2), &step) {
        Err(DriverError::StepLoops(StepLoopsError::NoLoop)) => {}
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("a step without a treduce compiled"),
    }
}
