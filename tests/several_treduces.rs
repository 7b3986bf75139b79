//! Steps holding several sequential `treduce` loops (issue 32, JAXPP's gradient accumulation
//! then an eval loop, two accumulation loops over two data sources, an eval loop before the
//! training loop). `mpmd_jit` runs each loop as its own pipeline, the code between two loops as
//! the first one's update: pipelined (1F1B over 2 groups) and on one group (each loop's segment
//! one program), each such step equals the step interpreted, over consecutive calls whose
//! parameters stay on their groups. A step without a loop is refused with a typed
//! [`StepLoopsError`]; the restructured steps (each loop a step of its own) equal the original
//! step too. Under several processes each loop is compiled for them (tests/mpi_steps.rs runs
//! such a step on two ranks).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::jit::to_host;
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{Tensor, call_closed, trace, treduce, value_and_grad_call};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_mpmd::driver::DriverError;
use tessera_mpmd::{
    MpmdJitOptions, MpmdMesh, StepArg, StepLoopsError, StepResult, mpmd_jit, mpmd_jit_with,
};
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
fn train_loop(w: &[&Tensor], xs: &Tensor, ys: &Tensor, schedule: &str) -> Vec<Tensor> {
    let loss = loss();
    let argnums: Vec<usize> = (1..=STAGES).collect();
    treduce(w, &[xs, ys], 0, schedule, &[], |w, mb| {
        let mut args = vec![&mb[0]];
        args.extend(w.iter());
        args.push(&mb[1]);
        value_and_grad_call(&loss, &argnums, &args)
    })
}

/// The forward-only loop over `(xs, ys)`: the losses.
fn eval_loop(w: &[&Tensor], xs: &Tensor, ys: &Tensor, schedule: &str) -> Tensor {
    let loss = loss();
    let outs = treduce(w, &[xs, ys], 0, schedule, &[], |w, mb| {
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
fn train_then_eval(mbs: i64, eval_mbs: i64, schedule: &str) -> ClosedJaxpr {
    let avals = avals(&[batch(mbs), batch(mbs), batch(eval_mbs), batch(eval_mbs)]);
    trace(&avals, |a| {
        let w: Vec<&Tensor> = a[..STAGES].iter().collect();
        let outs = train_loop(&w, &a[STAGES + 1], &a[STAGES + 2], schedule);
        let mut results = sgd(a, &outs[1..]);
        let updated: Vec<&Tensor> = results.iter().collect();
        let eval = eval_loop(&updated, &a[STAGES + 3], &a[STAGES + 4], schedule).mean(&[0]);
        results.extend([outs[0].mean(&[0]), eval]);
        results
    })
    .unwrap()
}

/// The training half: `(w.., lr, xs, ys) -> (w'.., train loss)`.
fn train_step(mbs: i64, schedule: &str) -> ClosedJaxpr {
    trace(&avals(&[batch(mbs), batch(mbs)]), |a| {
        let w: Vec<&Tensor> = a[..STAGES].iter().collect();
        let outs = train_loop(&w, &a[STAGES + 1], &a[STAGES + 2], schedule);
        let mut results = sgd(a, &outs[1..]);
        results.push(outs[0].mean(&[0]));
        results
    })
    .unwrap()
}

/// The eval half: `(w.., ex, ey) -> eval loss`.
fn eval_step(mbs: i64, schedule: &str) -> ClosedJaxpr {
    let mut avals: Vec<ShapedArray> = (0..STAGES).map(|_| f32(&[WIDTH, WIDTH])).collect();
    avals.extend([batch(mbs), batch(mbs)]);
    trace(&avals, |a| {
        let w: Vec<&Tensor> = a[..STAGES].iter().collect();
        vec![eval_loop(&w, &a[STAGES], &a[STAGES + 1], schedule).mean(&[0])]
    })
    .unwrap()
}

/// `step(w.., lr, xs, ys, xs2, ys2) -> (w'.., losses, losses2)`: two accumulation loops over two
/// data sources, their gradients summed before the update.
fn two_sources(mbs: i64, mbs2: i64, schedule: &str) -> ClosedJaxpr {
    let avals = avals(&[batch(mbs), batch(mbs), batch(mbs2), batch(mbs2)]);
    trace(&avals, |a| {
        let w: Vec<&Tensor> = a[..STAGES].iter().collect();
        let one = train_loop(&w, &a[STAGES + 1], &a[STAGES + 2], schedule);
        let two = train_loop(&w, &a[STAGES + 3], &a[STAGES + 4], schedule);
        let grads: Vec<Tensor> = (1..=STAGES).map(|g| &one[g] + &two[g]).collect();
        let mut results = sgd(a, &grads);
        results.extend([one[0].clone(), two[0].clone()]);
        results
    })
    .unwrap()
}

/// `step(w.., lr, ex, ey, xs, ys) -> (w'.., eval loss, train loss)`: a forward-only loop on the
/// incoming weights, then the training loop and the update.
fn eval_then_train(eval_mbs: i64, mbs: i64, schedule: &str) -> ClosedJaxpr {
    let avals = avals(&[batch(eval_mbs), batch(eval_mbs), batch(mbs), batch(mbs)]);
    trace(&avals, |a| {
        let w: Vec<&Tensor> = a[..STAGES].iter().collect();
        let eval = eval_loop(&w, &a[STAGES + 1], &a[STAGES + 2], schedule).mean(&[0]);
        let outs = train_loop(&w, &a[STAGES + 3], &a[STAGES + 4], schedule);
        let mut results = sgd(a, &outs[1..]);
        results.extend([eval, outs[0].mean(&[0])]);
        results
    })
    .unwrap()
}

/// The same as one loop over the micro-batches of both sources: `(w.., lr, xs, ys) -> (w'..,
/// losses)`.
fn one_loop(mbs: i64, schedule: &str) -> ClosedJaxpr {
    trace(&avals(&[batch(mbs), batch(mbs)]), |a| {
        let w: Vec<&Tensor> = a[..STAGES].iter().collect();
        let outs = train_loop(&w, &a[STAGES + 1], &a[STAGES + 2], schedule);
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

fn host(arrays: &[Array]) -> Vec<StepArg> {
    arrays
        .iter()
        .map(|a| StepArg::Host(to_host(a).unwrap()))
        .collect()
}

/// `a` within `1e-6` (relative above 1) of `b`, value by value.
fn assert_near(got: &[tessera_pjrt::HostArray], want: &[Array]) {
    assert_eq!(got.len(), want.len(), "the number of results");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        let g = tessera::jit::from_host(g, w.dtype()).unwrap();
        assert_eq!(g.shape(), w.shape(), "result {k}");
        for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "result {k}: {a} vs interpreter {b}"
            );
        }
    }
}

/// The schedule of a step on `groups` groups: 1F1B over 2, interleaved 1F1B on one (both
/// stages on it).
fn schedule(groups: i64) -> &'static str {
    match groups {
        1 => "interleaved-1f1b",
        _ => "1f1b",
    }
}

/// Runs `step` compiled for `groups` groups twice on `all` (weights first), the second call on
/// the first's updated weights where they are, each call's results against the interpreter's;
/// returns the compiled step.
fn twice_equals_interpreted(
    step: impl Fn(&str) -> ClosedJaxpr,
    all: &[Array],
    groups: i64,
) -> tessera_mpmd::MpmdJit {
    let step = &step(schedule(groups));
    let jit = twice_with(step, all, &mesh(groups), &MpmdJitOptions::default());
    assert_eq!(jit.is_fused(), groups == 1);
    jit
}

/// [`twice_equals_interpreted`] of `step` on `mesh` compiled with `options`.
fn twice_with(
    step: &ClosedJaxpr,
    all: &[Array],
    mesh: &MpmdMesh,
    options: &MpmdJitOptions,
) -> tessera_mpmd::MpmdJit {
    let client = Client::cpu(8).unwrap();
    let jit = mpmd_jit_with(&client, mesh, step, options).unwrap();
    let want = eval_closed(step, all).unwrap();
    let first = jit.call_mpmd(&host(all)).unwrap();
    let got: Vec<_> = first.outputs.iter().map(|o| o.to_host().unwrap()).collect();
    assert_near(&got, &want);
    // The updated weights stay on their groups and feed the next call as they are.
    let mut next_args: Vec<StepArg> = Vec::new();
    for out in &first.outputs[..STAGES] {
        assert!(
            matches!(out, StepResult::Mpmd(_)),
            "a weight came back to the host"
        );
        next_args.push(out.clone().into_arg());
    }
    next_args.extend(host(&all[STAGES..]));
    let mut next_all = want[..STAGES].to_vec();
    next_all.extend(all[STAGES..].iter().cloned());
    let want = eval_closed(step, &next_all).unwrap();
    let second = jit.call_mpmd(&next_args).unwrap();
    let got: Vec<_> = second
        .outputs
        .iter()
        .map(|o| o.to_host().unwrap())
        .collect();
    assert_near(&got, &want);
    jit
}

#[test]
fn a_training_loop_then_an_eval_loop_on_the_updated_weights_equals_it_interpreted() {
    let (mbs, eval_mbs) = (4, 3);
    let step = |schedule: &str| train_then_eval(mbs, eval_mbs, schedule);
    let all = args(&[mbs, eval_mbs]);
    // Pipelined over 2 groups, and on one group (each loop's segment one program).
    for groups in [2, 1] {
        let jit = twice_equals_interpreted(step, &all, groups);
        assert_eq!(jit.num_loops(), 2);
        let forward_only: Vec<bool> = jit
            .pipelines()
            .iter()
            .map(|p| p.is_forward_only())
            .collect();
        assert_eq!(forward_only, [false, true]);
        assert_eq!(jit.in_specs().len(), all.len());
        assert_eq!(jit.out_specs().len(), STAGES + 2);
    }
    // Pipelined, every micro-batch's loss of both loops, the training loop's first.
    let client = Client::cpu(8).unwrap();
    let step = step("1f1b");
    let jit = mpmd_jit(&client, &mesh(2), &step).unwrap();
    let run = jit.call(&host_arrays(&all)).unwrap();
    assert_eq!(run.losses.len(), (mbs + eval_mbs) as usize);
    let train_mean = run.losses[..mbs as usize].iter().sum::<f64>() / mbs as f64;
    let want = eval_closed(&step, &all).unwrap();
    assert!((train_mean - want[STAGES].to_vec()[0]).abs() < 1e-6);
    // Its timings hold both loops' tasks, as the two restructured steps run them.
    let train = mpmd_jit(&client, &mesh(2), &train_step(mbs, "1f1b")).unwrap();
    let eval = mpmd_jit(&client, &mesh(2), &eval_step(eval_mbs, "1f1b")).unwrap();
    let trained = train.call(&host_arrays(&all[..STAGES + 3])).unwrap();
    let mut eval_args = host_arrays(&all[..STAGES]);
    eval_args.extend(host_arrays(&all[STAGES + 3..]));
    let evaluated = eval.call(&eval_args).unwrap();
    let tasks = trained.timings.tasks.len() + evaluated.timings.tasks.len();
    assert_eq!(run.timings.tasks.len(), tasks);
    let starts: Vec<f64> = run.timings.tasks.iter().map(|t| t.start_us).collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{starts:?}");
}

#[test]
fn an_eval_loop_before_the_training_loop_equals_it_interpreted() {
    let (eval_mbs, mbs) = (2, 4);
    let step = |schedule: &str| eval_then_train(eval_mbs, mbs, schedule);
    let all = args(&[eval_mbs, mbs]);
    for groups in [2, 1] {
        let jit = twice_equals_interpreted(step, &all, groups);
        let forward_only: Vec<bool> = jit
            .pipelines()
            .iter()
            .map(|p| p.is_forward_only())
            .collect();
        assert_eq!(forward_only, [true, false]);
    }
}

#[test]
fn two_training_loops_whose_gradients_are_summed_equal_it_interpreted() {
    let (mbs, mbs2) = (4, 2);
    let step = |schedule: &str| two_sources(mbs, mbs2, schedule);
    let all = args(&[mbs, mbs2]);
    for groups in [2, 1] {
        let jit = twice_equals_interpreted(step, &all, groups);
        assert_eq!(jit.num_loops(), 2);
    }
}

#[test]
fn three_loops_equal_it_interpreted() {
    // An eval loop, two training loops summed, on 2 groups.
    let (e, m, m2) = (2, 3, 2);
    let avals = avals(&[batch(e), batch(e), batch(m), batch(m), batch(m2), batch(m2)]);
    let step = |schedule: &str| {
        trace(&avals, |a| {
            let w: Vec<&Tensor> = a[..STAGES].iter().collect();
            let eval = eval_loop(&w, &a[STAGES + 1], &a[STAGES + 2], schedule);
            let one = train_loop(&w, &a[STAGES + 3], &a[STAGES + 4], schedule);
            let two = train_loop(&w, &a[STAGES + 5], &a[STAGES + 6], schedule);
            let grads: Vec<Tensor> = (1..=STAGES).map(|g| &one[g] + &two[g]).collect();
            let mut results = sgd(a, &grads);
            results.extend([eval.mean(&[0]), &one[0].mean(&[0]) + &two[0].mean(&[0])]);
            results
        })
        .unwrap()
    };
    let jit = twice_equals_interpreted(step, &args(&[e, m, m2]), 2);
    assert_eq!(jit.num_loops(), 3);
}

#[test]
fn several_loops_keep_the_weights_sharded_as_their_specs_say() {
    // Column- then row-parallel weights over `model`, inside each of 2 groups.
    let mesh = MpmdMesh::new(
        Mesh::auto(&[("stage", 2), ("data", 2), ("model", 2)]).unwrap(),
        "stage",
    )
    .unwrap();
    let spec = |text: &str| Some(tessera_sharding::PartitionSpec::parse(text).unwrap());
    let options = MpmdJitOptions {
        in_specs: vec![spec("P(None, 'model')"), spec("P('model', None)")],
        ..MpmdJitOptions::default()
    };
    let (mbs, eval_mbs) = (4, 3);
    let step = train_then_eval(mbs, eval_mbs, "1f1b");
    let jit = twice_with(&step, &args(&[mbs, eval_mbs]), &mesh, &options);
    // The updated weights take their arguments' specs; the eval loop read them as they are.
    for k in 0..STAGES {
        assert_eq!(Some(&jit.out_specs()[k]), options.in_specs[k].as_ref());
        assert_eq!(Some(&jit.in_specs()[k]), options.in_specs[k].as_ref());
    }
    let run = jit.call_mpmd(&host(&args(&[mbs, eval_mbs]))).unwrap();
    for k in 0..STAGES {
        let StepResult::Mpmd(m) = &run.outputs[k] else {
            panic!("weight {k} came back to the host")
        };
        assert_eq!(Some(m.spec()), options.in_specs[k].as_ref(), "weight {k}");
        let arrays = m.to_mpmd_local_arrays().unwrap();
        assert_eq!(
            arrays.keys().copied().collect::<Vec<_>>(),
            [k],
            "weight {k}"
        );
    }
    // A bad spec of the eval loop's data is named by its index in the step.
    let mut bad = options.clone();
    bad.in_specs.resize(STAGES + 4, None);
    bad.in_specs[STAGES + 3] = spec("P(None, 'tensor')");
    let client = Client::cpu(8).unwrap();
    match mpmd_jit_with(&client, &mesh, &step, &bad) {
        Err(DriverError::Spec(e)) => {
            let text = e.to_string();
            let index = STAGES + 3;
            assert!(text.contains(&format!("step argument {index} (")), "{text}");
            assert!(text.contains("'tensor'"), "{text}");
        }
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("a spec naming a missing axis compiled"),
    }
    // A spec too many is refused as for a step of one loop.
    let too_many = MpmdJitOptions {
        in_specs: vec![None; STAGES + 6],
        ..MpmdJitOptions::default()
    };
    match mpmd_jit_with(&client, &mesh, &step, &too_many) {
        Err(DriverError::Spec(e)) => assert!(e.to_string().contains("specs were given"), "{e}"),
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("too many specs compiled"),
    }
}

#[test]
fn several_loops_donate_each_argument_in_the_last_loop_reading_it() {
    let client = Client::cpu(8).unwrap();
    let options = MpmdJitOptions {
        donate_argnums: vec![0, 1],
        ..MpmdJitOptions::default()
    };
    // The weights are read by the training loop, last by it in the first step and by it after
    // the eval loop in the second.
    let (mbs, eval_mbs) = (4, 3);
    // Pipelined over 2 groups, and on one group (each segment one program).
    let steps = [2, 1].into_iter().flat_map(|groups| {
        let s = schedule(groups);
        [
            (
                groups,
                train_then_eval(mbs, eval_mbs, s),
                args(&[mbs, eval_mbs]),
            ),
            (
                groups,
                eval_then_train(eval_mbs, mbs, s),
                args(&[eval_mbs, mbs]),
            ),
        ]
    });
    for (groups, step, all) in steps {
        let jit = mpmd_jit_with(&client, &mesh(groups), &step, &options).unwrap();
        assert_eq!(jit.donated(), [0, 1]);
        let mut carried: Vec<StepArg> = host(&all[..STAGES]);
        let mut want_args = all.clone();
        for call in 0..2 {
            let want = eval_closed(&step, &want_args).unwrap();
            let mut call_args = std::mem::take(&mut carried);
            call_args.extend(host(&all[STAGES..]));
            if call == 1 {
                // Arrays on the groups are donated only through call_mpmd_donated.
                let err = jit.call_mpmd(&call_args).unwrap_err().to_string();
                assert!(err.contains("call_mpmd_donated"), "{err}");
            }
            let run = jit.call_mpmd_donated(&mut call_args).unwrap();
            let got: Vec<_> = run.outputs.iter().map(|o| o.to_host().unwrap()).collect();
            assert_near(&got, &want);
            for (k, arg) in call_args[..STAGES].iter().enumerate() {
                if let StepArg::Mpmd(m) = arg {
                    assert!(m.is_deleted(), "call {call}: weight {k} was not deleted");
                }
            }
            carried = run.outputs[..STAGES]
                .iter()
                .cloned()
                .map(StepResult::into_arg)
                .collect();
            want_args.splice(0..STAGES, want[..STAGES].iter().cloned());
        }
    }
    // An argument out of range is named.
    let out_of_range = MpmdJitOptions {
        donate_argnums: vec![40],
        ..MpmdJitOptions::default()
    };
    let step = train_then_eval(mbs, eval_mbs, "1f1b");
    let err = match mpmd_jit_with(&client, &mesh(2), &step, &out_of_range) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a donated argument out of range compiled"),
    };
    assert!(err.contains("argument 40"), "{err}");
}

#[test]
fn the_train_then_eval_step_split_in_two_pipelined_steps_equals_it_interpreted() {
    let (mbs, eval_mbs) = (4, 3);
    let all = args(&[mbs, eval_mbs]);
    let want = eval_closed(&train_then_eval(mbs, eval_mbs, "1f1b"), &all).unwrap();
    let client = Client::cpu(8).unwrap();
    let mesh = mesh(2);
    // The training step, 1F1B over 2 groups; its weights stay on their groups.
    let train = mpmd_jit(&client, &mesh, &train_step(mbs, "1f1b")).unwrap();
    let trained = train.call_mpmd(&host(&all[..STAGES + 3])).unwrap();
    assert_eq!(trained.losses.len(), mbs as usize);
    // The eval step, forward only, on the updated weights where they are.
    let eval = mpmd_jit(&client, &mesh, &eval_step(eval_mbs, "1f1b")).unwrap();
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
fn two_accumulation_loops_equal_one_loop_over_both_sources() {
    let (mbs, mbs2) = (4, 2);
    let step = two_sources(mbs, mbs2, "1f1b");
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
    let jit = mpmd_jit(&client, &mesh(2), &one_loop(mbs + mbs2, "1f1b")).unwrap();
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

#[test]
fn a_mistyped_argument_of_a_later_loop_is_named_by_its_index_in_the_step() {
    let (mbs, eval_mbs) = (4, 3);
    let client = Client::cpu(8).unwrap();
    let jit = mpmd_jit(&client, &mesh(2), &train_then_eval(mbs, eval_mbs, "1f1b")).unwrap();
    // The eval inputs with one micro-batch too many.
    let mut all = args(&[mbs, eval_mbs]);
    all[STAGES + 3] = values(&[eval_mbs + 1, ROWS, WIDTH], 3.0);
    let err = jit.call(&host_arrays(&all)).unwrap_err().to_string();
    let index = STAGES + 3;
    assert!(err.contains(&format!("argument {index} is")), "{err}");
    assert!(
        err.contains(&format!("takes f32[{eval_mbs},{ROWS},{WIDTH}]")),
        "{err}"
    );
}

/// A process of a two-process job running group 0 whose processes fail every collective call.
struct OneOfTwo;

impl tessera_mpmd::processes::Processes for OneOfTwo {
    fn local_groups(&self) -> Vec<usize> {
        vec![0]
    }
    fn process_index(&self) -> (usize, usize) {
        (2, 0)
    }
    fn process_of(&self, group: usize) -> usize {
        group
    }
    fn exchange(
        &self,
        _: Vec<Vec<u8>>,
    ) -> Result<Vec<Vec<u8>>, tessera_mpmd::processes::ProcessError> {
        Err(unused())
    }
    fn transport(
        &self,
        _: &std::sync::Arc<
            std::collections::HashMap<
                tessera_mpmd::runtime::ValueId,
                tessera_mpmd::runtime::OutputLayout,
            >,
        >,
    ) -> Result<
        std::sync::Arc<dyn tessera_mpmd::runtime::Transport<tessera_pjrt::Array>>,
        tessera_mpmd::processes::ProcessError,
    > {
        Err(unused())
    }
    fn broadcast(
        &self,
        _: usize,
        _: Vec<f64>,
    ) -> Result<Vec<f64>, tessera_mpmd::processes::ProcessError> {
        Err(unused())
    }
    fn agree(&self, _: u64, _: &str) -> Result<(), tessera_mpmd::processes::ProcessError> {
        Err(unused())
    }
}

fn unused() -> tessera_mpmd::processes::ProcessError {
    tessera_mpmd::processes::ProcessError::Comm("no other process".into())
}

#[test]
fn several_loops_under_several_processes_compile_each_loop_for_the_processes() {
    // Not refused for its loops (tests/mpi_steps.rs runs such a step on two ranks): the first
    // loop's pipeline asks the processes to agree on it, which this stub fails.
    let client = Client::cpu(8).unwrap();
    let options = MpmdJitOptions {
        processes: Some(std::sync::Arc::new(OneOfTwo)),
        ..MpmdJitOptions::default()
    };
    let step = train_then_eval(4, 3, "1f1b");
    match mpmd_jit_with(&client, &mesh(2), &step, &options) {
        Err(DriverError::Processes(e)) => assert!(e.to_string().contains("no other process")),
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("the stub's processes agreed"),
    }
}
