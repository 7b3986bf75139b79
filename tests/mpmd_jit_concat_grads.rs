//! `mpmd_jit` on gradients kept per micro-batch: a gradient the loop combines by `Concat(a)`
//! (each micro-batch's gradient stacked along a new axis `a`, as JAXPP's `treduce` does) and a
//! tied weight's gradient combined by `Max` (the maximum over the micro-batches of each
//! micro-batch's sum of the stages' parts). Each runs pipelined under 1f1b, gpipe, zero-bubble
//! (split backward) and interleaved-1f1b over several groups, and as one program on one group,
//! and equals the step interpreted (the sequential loop).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::jit::to_host;
use tessera_ir::interp::eval_closed;
use tessera_ir::prim::ReduceOp;
use tessera_ir::trace::{Tensor, trace, treduce, value_and_grad_call};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_mpmd::{MpmdMesh, StepArg, mpmd_jit};
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

/// The gradient the update applies: a stacked one summed over its micro-batch axis.
fn applied(g: &Tensor, op: ReduceOp) -> Tensor {
    match op {
        ReduceOp::Concat(a) => g.sum(&[a]),
        ReduceOp::Add | ReduceOp::Max => g.clone(),
    }
}

/// `step(w.., lr, xs, ys) -> (w'.., mean loss, the loop's gradients..)`, the loop combining
/// the loss by `Concat(0)` and gradient `s` by `grad_ops[s]`; SGD on each weight from its
/// gradient (a stacked one summed over the micro-batches first).
fn step(stages: usize, mbs: i64, rows: i64, schedule: &str, grad_ops: &[ReduceOp]) -> ClosedJaxpr {
    let loss = loss(stages, rows);
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
        let mut results: Vec<Tensor> = (0..stages)
            .map(|s| {
                let g = applied(&outs[1 + s], grad_ops[s]);
                &a[s] - &(&a[stages] * &(&g / mbs as f64))
            })
            .collect();
        results.push(outs[0].mean(&[0]));
        results.extend(outs[1..].iter().cloned());
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

/// The values of `g` at each index along `axis`, in order (row-major).
fn slots(g: &Array, axis: usize) -> Vec<Vec<f64>> {
    let shape = g.shape();
    let n = shape[axis] as usize;
    let inner: usize = shape[axis + 1..].iter().product::<i64>() as usize;
    let mut out = vec![Vec::new(); n];
    for (i, v) in g.to_vec().into_iter().enumerate() {
        out[(i / inner) % n].push(v);
    }
    out
}

/// Runs `program` with mpmd_jit on `groups` groups from host arguments `args`, checks it against
/// the interpreter, and returns the interpreted results.
fn check(program: &ClosedJaxpr, groups: usize, args: &[Array], fused: bool) -> Vec<Array> {
    let client = Client::cpu(8).unwrap();
    let jit = mpmd_jit(&client, &mesh(groups), program).unwrap();
    assert_eq!(jit.is_fused(), fused);
    let want = eval_closed(program, args).unwrap();
    let host: Vec<_> = args.iter().map(|a| to_host(a).unwrap()).collect();
    let run = jit.call(&host).unwrap();
    assert_close(&run.outputs, &want);
    want
}

/// JAXPP's `Concat(a)` on a gradient: each micro-batch's gradient kept, stacked along a new axis
/// `a`. Pipelined under schedules with whole and split backwards, beside gradients summed and
/// maximized, and as one program on one group, it equals the sequential loop; each stacked
/// gradient holds one different slice per micro-batch, summing to the `Add` loop's gradient.
#[test]
fn a_gradient_combined_by_concat_is_pipelined_like_the_sequential_loop() {
    let (mbs, rows) = (4, 4);
    let (add, max) = (ReduceOp::Add, ReduceOp::Max);
    let (c0, c1, c2) = (
        ReduceOp::Concat(0),
        ReduceOp::Concat(1),
        ReduceOp::Concat(2),
    );
    for (stages, groups, schedule, ops) in [
        (2, 2, "1f1b", vec![c0, add]),
        (2, 2, "gpipe", vec![c1, c2]),
        (4, 4, "zero-bubble", vec![add, c0, c2, max]),
        (4, 2, "interleaved-1f1b", vec![c2, add, c0, c1]),
    ] {
        let program = step(stages, mbs, rows, schedule, &ops);
        let args = step_args(stages, mbs, rows);
        let want = check(&program, groups, &args, false);
        let summed = eval_closed(
            &step(stages, mbs, rows, schedule, &vec![add; stages]),
            &args,
        )
        .unwrap();
        for (s, op) in ops.iter().enumerate() {
            let ReduceOp::Concat(a) = *op else { continue };
            let g = &want[stages + 1 + s];
            let mut shape = vec![WIDTH, WIDTH];
            shape.insert(a as usize, mbs);
            assert_eq!(g.shape(), shape);
            // The slices differ (one gradient per micro-batch) and add up to the summed one.
            let slices = slots(g, a as usize);
            assert_ne!(slices[0], slices[1]);
            let want_sum = summed[stages + 1 + s].to_vec();
            for (i, y) in want_sum.iter().enumerate() {
                let x: f64 = slices.iter().map(|slot| slot[i]).sum();
                assert!((x - y).abs() < 1e-5, "{x} vs {y}");
            }
        }
    }
}

#[test]
fn a_gradient_combined_by_concat_runs_as_one_program_on_one_group() {
    let (mbs, rows) = (4, 4);
    for ops in [vec![ReduceOp::Concat(0)], vec![ReduceOp::Concat(2)]] {
        let program = step(1, mbs, rows, "1f1b", &ops);
        check(&program, 1, &step_args(1, mbs, rows), true);
    }
    let ops = [ReduceOp::Concat(1), ReduceOp::Max];
    let program = step(2, mbs, rows, "interleaved-1f1b", &ops);
    check(&program, 1, &step_args(2, mbs, rows), true);
}

/// The memory the run measures counts the stacked gradient: the stage whose gradient is stacked
/// makes accumulators `mbs` times those of the same step summing it.
#[test]
fn a_stacked_gradient_counts_its_micro_batches_in_the_memory_report() {
    let (mbs, rows) = (4, 4);
    let client = Client::cpu(8).unwrap();
    let report = |ops: &[ReduceOp]| {
        let program = step(2, mbs, rows, "1f1b", ops);
        let jit = mpmd_jit(&client, &mesh(2), &program).unwrap();
        let host: Vec<_> = step_args(2, mbs, rows)
            .iter()
            .map(|a| to_host(a).unwrap())
            .collect();
        let run = jit.call(&host).unwrap();
        jit.pipeline().memory_report(&run.timings)
    };
    let accumulators = |ops: &[ReduceOp]| report(ops).stage_accumulator_bytes;
    let parameters = |ops: &[ReduceOp]| report(ops).stage_parameter_bytes;
    let summed = accumulators(&[ReduceOp::Add, ReduceOp::Add]);
    let stacked = accumulators(&[ReduceOp::Add, ReduceOp::Concat(0)]);
    assert!(summed[1] > 0, "{summed:?}");
    assert_eq!(stacked[0], summed[0]);
    assert_eq!(stacked[1], summed[1] * mbs as u64);
    // The stacked copy of the weight is placed on its stage's group before the run.
    let (summed, stacked) = (
        parameters(&[ReduceOp::Add, ReduceOp::Add]),
        parameters(&[ReduceOp::Add, ReduceOp::Concat(0)]),
    );
    assert_eq!(stacked[0], summed[0]);
    assert_eq!(stacked[1], summed[1] * mbs as u64);
}

/// A weight read by two stages (tied): `loss(x, w, y) = mean((tanh(x w) w - y)^2)`, the second
/// product in stage 1.
fn tied_step(mbs: i64, rows: i64, schedule: &str, grad_op: ReduceOp) -> ClosedJaxpr {
    let w = f32(&[WIDTH, WIDTH]);
    let loss = trace(
        &[f32(&[rows, WIDTH]), w.clone(), f32(&[rows, WIDTH])],
        |a| {
            let h = a[0].matmul(&a[1]).tanh().enter_stage(1).matmul(&a[1]);
            vec![(&h - &a[2]).integer_pow(2).mean(&[0, 1])]
        },
    )
    .unwrap();
    let batch = f32(&[mbs, rows, WIDTH]);
    trace(&[w, f32(&[]), batch.clone(), batch], |a| {
        let ops = [ReduceOp::Concat(0), grad_op];
        let outs = treduce(&[&a[0]], &[&a[2], &a[3]], 0, schedule, &ops, |w, mb| {
            value_and_grad_call(&loss, &[1], &[&mb[0], &w[0], &mb[1]])
        });
        let g = applied(&outs[1], grad_op);
        vec![&a[0] - &(&a[1] * &g), outs[0].mean(&[0]), outs[1].clone()]
    })
    .unwrap()
}

fn tied_args(mbs: i64, rows: i64) -> Vec<Array> {
    vec![
        values(&[WIDTH, WIDTH], 3.0),
        Array::scalar(DType::F32, 0.5),
        values(&[mbs, rows, WIDTH], 10.0),
        values(&[mbs, rows, WIDTH], 20.0),
    ]
}

/// A tied weight's gradient combined by `Max`: each micro-batch's gradient is the sum of the two
/// stages' parts, and the loop takes the maximum of those sums, as the sequential loop does
/// (not the maximum of each stage's parts, which the check would tell apart).
#[test]
fn a_tied_weights_gradient_combined_by_max_is_the_maximum_of_the_per_micro_batch_sums() {
    let (mbs, rows) = (4, 4);
    let args = tied_args(mbs, rows);
    for (schedule, groups, fused) in [
        ("1f1b", 2, false),
        ("gpipe", 2, false),
        ("zero-bubble", 2, false),
        ("interleaved-1f1b", 1, true),
    ] {
        let program = tied_step(mbs, rows, schedule, ReduceOp::Max);
        check(&program, groups, &args, fused);
    }
    // Max differs from the sum here.
    let maxed = eval_closed(&tied_step(mbs, rows, "1f1b", ReduceOp::Max), &args).unwrap();
    let summed = eval_closed(&tied_step(mbs, rows, "1f1b", ReduceOp::Add), &args).unwrap();
    assert_ne!(maxed[2].to_vec(), summed[2].to_vec());
}

/// A tied weight's gradient stacked by `Concat`: each micro-batch's slot holds the sum of the
/// stages' parts.
#[test]
fn a_tied_weights_gradient_combined_by_concat_is_pipelined_like_the_sequential_loop() {
    let (mbs, rows) = (4, 4);
    let args = tied_args(mbs, rows);
    for (schedule, groups, fused) in [
        ("1f1b", 2, false),
        ("zero-bubble", 2, false),
        ("interleaved-1f1b", 1, true),
    ] {
        let program = tied_step(mbs, rows, schedule, ReduceOp::Concat(1));
        let want = check(&program, groups, &args, fused);
        assert_eq!(want[2].shape(), &[WIDTH, mbs, WIDTH]);
    }
}

/// `step(w0, w1, xs, ys[, zs]) -> (mean loss, g0, g1)`: the loss differentiated with respect to
/// `w0` and a value differing per micro-batch: `w1` scaled by the micro-batch's mean input
/// (computed in the body), or with `sliced`, micro-batch `i` of `zs` itself; its gradient
/// combined by `op`.
fn per_micro_batch_step(schedule: &str, op: ReduceOp, sliced: bool) -> ClosedJaxpr {
    let (mbs, rows) = (4, 4);
    let loss = loss(2, rows);
    let mut avals = vec![f32(&[WIDTH, WIDTH]), f32(&[WIDTH, WIDTH])];
    avals.extend([f32(&[mbs, rows, WIDTH]), f32(&[mbs, rows, WIDTH])]);
    if sliced {
        avals.push(f32(&[mbs, WIDTH, WIDTH]));
    }
    let ops = [ReduceOp::Concat(0), ReduceOp::Add, op];
    trace(&avals, |a| {
        let xs: Vec<&Tensor> = a[2..].iter().collect();
        let outs = treduce(&[&a[0], &a[1]], &xs, 0, schedule, &ops, |w, mb| {
            let value = match sliced {
                true => mb[2].clone(),
                false => &w[1] * &mb[0].mean(&[0, 1]),
            };
            value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &value, &mb[1]])
        });
        vec![outs[0].mean(&[0]), outs[1].clone(), outs[2].clone()]
    })
    .unwrap()
}

fn per_micro_batch_args(sliced: bool) -> Vec<Array> {
    let (mbs, rows) = (4, 4);
    let mut args = vec![
        values(&[WIDTH, WIDTH], 0.0),
        values(&[WIDTH, WIDTH], 1.0),
        values(&[mbs, rows, WIDTH], 10.0),
        values(&[mbs, rows, WIDTH], 20.0),
    ];
    if sliced {
        args.push(values(&[mbs, WIDTH, WIDTH], 30.0));
    }
    args
}

/// A differentiated value the body computes from the micro-batch differs per micro-batch, so
/// its gradient is per micro-batch too (JAX's `value_and_grad` of that argument), combined over
/// the micro-batches by the loop's operation for that result: summed, maximized or stacked.
/// Pipelined (2 groups: 1f1b, gpipe, zero-bubble) and as one program on one group, it equals
/// the sequential loop.
#[test]
fn a_differentiated_value_computed_per_micro_batch_has_its_gradient_combined_by_the_loop() {
    let args = per_micro_batch_args(false);
    for op in [ReduceOp::Add, ReduceOp::Max, ReduceOp::Concat(1)] {
        for (schedule, groups, fused) in [
            ("1f1b", 2, false),
            ("gpipe", 2, false),
            ("zero-bubble", 2, false),
            ("interleaved-1f1b", 1, true),
        ] {
            check(
                &per_micro_batch_step(schedule, op, false),
                groups,
                &args,
                fused,
            );
        }
    }
    // The value's gradient is not the weight's: the check above tells them apart.
    let want = eval_closed(&per_micro_batch_step("1f1b", ReduceOp::Add, false), &args).unwrap();
    let weight = eval_closed(
        &step(2, 4, 4, "1f1b", &[ReduceOp::Add; 2]),
        &step_args(2, 4, 4),
    )
    .unwrap();
    assert_ne!(want[2].to_vec(), weight[3].to_vec());
}

/// A differentiated argument sliced from a loop operand (micro-batch data, e.g. an input
/// embedding differentiated for saliency): its gradient per micro-batch, combined by the loop.
#[test]
fn a_sliced_differentiated_argument_has_its_gradient_combined_by_the_loop() {
    let args = per_micro_batch_args(true);
    for op in [ReduceOp::Concat(0), ReduceOp::Add] {
        for (schedule, groups, fused) in [("1f1b", 2, false), ("interleaved-1f1b", 1, true)] {
            let program = per_micro_batch_step(schedule, op, true);
            let want = check(&program, groups, &args, fused);
            if op == ReduceOp::Concat(0) {
                assert_eq!(want[2].shape(), vec![4, WIDTH, WIDTH]);
            }
        }
    }
}

/// Two steps, the second on the weights the first left on their groups (a weight whose
/// gradient is stacked is read by the pipeline only through its stacked copy, computed before
/// the loop from wherever the weight lies): both equal the interpreter's two steps.
#[test]
fn a_step_stacking_gradients_trains_over_two_calls_from_weights_left_on_the_groups() {
    let (stages, mbs, rows) = (2, 4, 4);
    let ops = [ReduceOp::Concat(2), ReduceOp::Add];
    let program = step(stages, mbs, rows, "1f1b", &ops);
    let client = Client::cpu(8).unwrap();
    let jit = mpmd_jit(&client, &mesh(stages), &program).unwrap();
    let mut args = step_args(stages, mbs, rows);
    let mut call: Vec<StepArg> = args
        .iter()
        .map(|a| StepArg::Host(to_host(a).unwrap()))
        .collect();
    for _ in 0..2 {
        let want = eval_closed(&program, &args).unwrap();
        let outputs = jit.call_mpmd(&call).unwrap().outputs;
        let host: Vec<_> = outputs.iter().map(|o| o.to_host().unwrap()).collect();
        assert_close(&host, &want);
        args[..stages].clone_from_slice(&want[..stages]);
        for (w, out) in outputs.into_iter().take(stages).enumerate() {
            call[w] = out.into_arg();
        }
    }
}

/// Column- then row-parallel weights over `model` inside each of 2 groups, the second weight's
/// gradient stacked: over two calls on the weights left on their groups, every result equals the
/// interpreter's, and each updated weight keeps its spec on its own group.
#[test]
fn a_stacked_gradient_of_a_tensor_parallel_weight_keeps_the_weights_sharded() {
    use tessera_mpmd::{MpmdJitOptions, StepResult, mpmd_jit_with};
    let (stages, mbs, rows) = (2, 4, 4);
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
    let program = step(
        stages,
        mbs,
        rows,
        "1f1b",
        &[ReduceOp::Add, ReduceOp::Concat(1)],
    );
    let client = Client::cpu(8).unwrap();
    let jit = mpmd_jit_with(&client, &mesh, &program, &options).unwrap();
    let mut args = step_args(stages, mbs, rows);
    let mut call: Vec<StepArg> = args
        .iter()
        .map(|a| StepArg::Host(to_host(a).unwrap()))
        .collect();
    for _ in 0..2 {
        let want = eval_closed(&program, &args).unwrap();
        let outputs = jit.call_mpmd(&call).unwrap().outputs;
        let host: Vec<_> = outputs.iter().map(|o| o.to_host().unwrap()).collect();
        assert_close(&host, &want);
        for (k, out) in outputs.iter().take(stages).enumerate() {
            let StepResult::Mpmd(m) = out else {
                panic!("weight {k} came back to the host")
            };
            assert_eq!(Some(m.spec()), options.in_specs[k].as_ref(), "weight {k}");
            let groups: Vec<usize> = m.to_mpmd_local_arrays().unwrap().keys().copied().collect();
            assert_eq!(groups, [k], "weight {k}");
        }
        args[..stages].clone_from_slice(&want[..stages]);
        for (w, out) in outputs.into_iter().take(stages).enumerate() {
            call[w] = out.into_arg();
        }
    }
}

/// A step holding constants (here its learning rate, a constant of the closed program) is not
/// rewritten to keep gradients per micro-batch: a gradient combined by `Concat` is refused,
/// naming the gradient and the fix, and the interpreter still runs it.
#[test]
fn a_stacked_gradient_in_a_step_holding_constants_is_refused_naming_the_fix() {
    let (stages, mbs, rows) = (2, 4, 4);
    let mut program = step(
        stages,
        mbs,
        rows,
        "1f1b",
        &[ReduceOp::Add, ReduceOp::Concat(0)],
    );
    let lr = program.jaxpr.invars.remove(stages);
    program.jaxpr.constvars.push(lr);
    program.consts.push(Array::scalar(DType::F32, 0.5));
    let mut args = step_args(stages, mbs, rows);
    args.remove(stages);
    assert!(eval_closed(&program, &args).is_ok());
    let client = Client::cpu(8).unwrap();
    let err = mpmd_jit(&client, &mesh(stages), &program)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("gradient 1 by Concat(0)"), "{err}");
    assert!(err.contains("pass the constants as arguments"), "{err}");
}

/// A stacked gradient beside the loss's auxiliary result and a metric the body computes, of a
/// value the body computes from loop invariants (`w1 * mask`, moved before the loop): each
/// equals the sequential loop, pipelined and as one program.
#[test]
fn a_stacked_gradient_of_a_computed_value_beside_metrics_is_pipelined_like_the_sequential_loop() {
    use tessera_ir::trace::value_and_grad_with_aux_call;
    let (mbs, rows) = (4, 4);
    let aux_loss = {
        let base = loss(2, rows);
        let avals = base.jaxpr.in_avals();
        trace(&avals, |a| {
            let l = tessera_ir::trace::call_closed(&base, &a.iter().collect::<Vec<_>>());
            vec![l[0].clone(), a[0].abs().max(&[0, 1])]
        })
        .unwrap()
    };
    let mut avals = vec![f32(&[WIDTH, WIDTH]); 3];
    avals.extend([f32(&[mbs, rows, WIDTH]), f32(&[mbs, rows, WIDTH])]);
    let ops = [
        ReduceOp::Concat(0),
        ReduceOp::Max,
        ReduceOp::Add,
        ReduceOp::Add,
        ReduceOp::Concat(2),
    ];
    let program = |schedule: &str| {
        trace(&avals, |a| {
            let xs = [&a[3], &a[4]];
            treduce(&[&a[0], &a[1], &a[2]], &xs, 0, schedule, &ops, |w, mb| {
                let masked = &w[1] * &w[2];
                let mut outs = value_and_grad_with_aux_call(
                    &aux_loss,
                    &[1, 2],
                    &[&mb[0], &w[0], &masked, &mb[1]],
                );
                // A metric beside the call: the micro-batch's mean target.
                outs.insert(2, mb[1].mean(&[0, 1]));
                outs
            })
        })
        .unwrap()
    };
    let args = vec![
        values(&[WIDTH, WIDTH], 0.0),
        values(&[WIDTH, WIDTH], 1.0),
        values(&[WIDTH, WIDTH], 2.0),
        values(&[mbs, rows, WIDTH], 10.0),
        values(&[mbs, rows, WIDTH], 20.0),
    ];
    for (schedule, groups, fused) in [
        ("1f1b", 2, false),
        ("zero-bubble", 2, false),
        ("interleaved-1f1b", 1, true),
    ] {
        let want = check(&program(schedule), groups, &args, fused);
        assert_eq!(want[4].shape(), vec![WIDTH, WIDTH, mbs]);
    }
}

/// One micro-batch: a stacked gradient has a micro-batch axis of size 1, pipelined and fused.
#[test]
fn a_gradient_combined_by_concat_over_one_micro_batch_is_the_loop_s() {
    let (mbs, rows) = (1, 4);
    for (stages, groups, fused, ops) in [
        (2, 2, false, vec![ReduceOp::Concat(2), ReduceOp::Max]),
        (1, 1, true, vec![ReduceOp::Concat(0)]),
    ] {
        let program = step(stages, mbs, rows, "gpipe", &ops);
        let want = check(&program, groups, &step_args(stages, mbs, rows), fused);
        let mut shape = vec![WIDTH, WIDTH];
        if let ReduceOp::Concat(a) = ops[0] {
            shape.insert(a as usize, 1);
        }
        assert_eq!(want[stages + 1].shape(), shape);
    }
}

/// Micro-batches sliced along axis 1 of the data (`xs: [rows, mbs, WIDTH]`): the micro-batch
/// index the rewrite adds is sliced along the same axis, and the stacked gradients are the loop's.
#[test]
fn a_gradient_combined_by_concat_of_a_loop_along_axis_one_is_the_loop_s() {
    let (stages, mbs, rows) = (2, 3, 4);
    let loss = loss(stages, rows);
    let mut avals: Vec<ShapedArray> = (0..stages).map(|_| f32(&[WIDTH, WIDTH])).collect();
    avals.extend([f32(&[rows, mbs, WIDTH]), f32(&[rows, mbs, WIDTH])]);
    let argnums: Vec<usize> = (1..=stages).collect();
    let ops = [ReduceOp::Add, ReduceOp::Concat(1), ReduceOp::Concat(0)];
    let program = trace(&avals, |a| {
        let weights: Vec<&Tensor> = a[..stages].iter().collect();
        let xs = [&a[stages], &a[stages + 1]];
        treduce(&weights, &xs, 1, "1f1b", &ops, |w, mb| {
            let mut args = vec![&mb[0]];
            args.extend(w.iter());
            args.push(&mb[1]);
            value_and_grad_call(&loss, &argnums, &args)
        })
    })
    .unwrap();
    let mut args: Vec<Array> = (0..stages)
        .map(|s| values(&[WIDTH, WIDTH], s as f64))
        .collect();
    args.push(values(&[rows, mbs, WIDTH], 10.0));
    args.push(values(&[rows, mbs, WIDTH], 20.0));
    let want = check(&program, 2, &args, false);
    assert_eq!(want[1].shape(), [WIDTH, mbs, WIDTH]);
    assert_eq!(want[2].shape(), [mbs, WIDTH, WIDTH]);
    let slices = slots(&want[2], 0);
    assert_ne!(slices[0], slices[1]);
}

/// One weight differentiated at two argument positions (`loss(x, w, w, y)`), each partial
/// combined by `Concat` along a different axis (or one by `Max`): each position's stacked
/// partials are the loop's.
#[test]
fn a_weight_differentiated_twice_with_its_partials_combined_by_concat_is_the_loop_s() {
    let (mbs, rows) = (3, 4);
    let loss = loss(2, rows);
    let avals = vec![
        f32(&[WIDTH, WIDTH]),
        f32(&[mbs, rows, WIDTH]),
        f32(&[mbs, rows, WIDTH]),
    ];
    for ops in [
        [ReduceOp::Add, ReduceOp::Concat(0), ReduceOp::Concat(2)],
        [ReduceOp::Add, ReduceOp::Concat(1), ReduceOp::Max],
    ] {
        let program = trace(&avals, |a| {
            let xs = [&a[1], &a[2]];
            treduce(&[&a[0]], &xs, 0, "1f1b", &ops, |w, mb| {
                value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[0], &mb[1]])
            })
        })
        .unwrap();
        let args = vec![
            values(&[WIDTH, WIDTH], 1.0),
            values(&[mbs, rows, WIDTH], 10.0),
            values(&[mbs, rows, WIDTH], 20.0),
        ];
        let want = check(&program, 2, &args, false);
        assert_ne!(want[1].to_vec(), want[2].to_vec(), "{ops:?}");
    }
}

/// A body returning its call's loss twice (combined by `Add` and by `Max`), a gradient stacked
/// by `Concat` and the other dropped (a hidden result of the loop): the loop's results.
#[test]
fn a_repeated_loss_beside_a_stacked_and_a_dropped_gradient_is_the_loop_s() {
    let (stages, mbs, rows) = (2, 3, 4);
    let loss = loss(stages, rows);
    let mut avals: Vec<ShapedArray> = (0..stages).map(|_| f32(&[WIDTH, WIDTH])).collect();
    avals.extend([f32(&[mbs, rows, WIDTH]), f32(&[mbs, rows, WIDTH])]);
    let ops = [ReduceOp::Max, ReduceOp::Concat(1), ReduceOp::Add];
    let program = trace(&avals, |a| {
        let xs = [&a[2], &a[3]];
        treduce(&[&a[0], &a[1]], &xs, 0, "1f1b", &ops, |w, mb| {
            let outs = value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]]);
            vec![outs[0].clone(), outs[2].clone(), outs[0].clone()]
        })
    })
    .unwrap();
    let mut args: Vec<Array> = (0..stages)
        .map(|s| values(&[WIDTH, WIDTH], s as f64))
        .collect();
    args.push(values(&[mbs, rows, WIDTH], 10.0));
    args.push(values(&[mbs, rows, WIDTH], 20.0));
    let want = check(&program, 2, &args, false);
    assert_eq!(want[1].shape(), [WIDTH, mbs, WIDTH]);
    assert!(
        want[2].to_vec()[0] > want[0].to_vec()[0],
        "the sum of the losses exceeds their max"
    );
}

/// An integer argument differentiated beside a weight, its gradient (zeros, JAX's float0)
/// combined by `Concat`: the loop's results.
#[test]
fn an_integer_argument_s_gradient_combined_by_concat_is_the_loop_s() {
    let (mbs, rows) = (2, 4);
    let loss = trace(
        &[
            f32(&[rows, WIDTH]),
            f32(&[WIDTH, WIDTH]),
            ShapedArray::new(DType::I32, &[WIDTH]),
            f32(&[rows, WIDTH]),
        ],
        |a| {
            let k = a[2].astype(DType::F32);
            let h = &a[0].matmul(&a[1]).tanh() * &k;
            let h = h.enter_stage(1).tanh();
            vec![(&h - &a[3]).integer_pow(2).mean(&[0, 1])]
        },
    )
    .unwrap();
    let avals = vec![
        f32(&[WIDTH, WIDTH]),
        ShapedArray::new(DType::I32, &[WIDTH]),
        f32(&[mbs, rows, WIDTH]),
        f32(&[mbs, rows, WIDTH]),
    ];
    let ops = [ReduceOp::Add, ReduceOp::Concat(0), ReduceOp::Concat(1)];
    let program = trace(&avals, |a| {
        let xs = [&a[2], &a[3]];
        treduce(&[&a[0], &a[1]], &xs, 0, "1f1b", &ops, |w, mb| {
            value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]])
        })
    })
    .unwrap();
    let args = vec![
        values(&[WIDTH, WIDTH], 1.0),
        Array::new(
            DType::I32,
            &[WIDTH],
            (0..WIDTH).map(|i| (i % 3) as f64).collect(),
        )
        .unwrap(),
        values(&[mbs, rows, WIDTH], 10.0),
        values(&[mbs, rows, WIDTH], 20.0),
    ];
    let want = check(&program, 2, &args, false);
    assert_eq!(want[2].shape(), [WIDTH, mbs]);
}
