//! `mpmd_jit` differentiating traced values, not only step arguments: a loop invariant the step
//! computes before its `treduce` (a masked or scaled weight, as JAXPP users write
//! `w16 = w.astype(bf16)`), differentiated with respect to that computed value as JAX does; and
//! a parameter the body also reads outside its `value_and_grad_call` (a regularizer passed to
//! the loss, a weight-norm metric), whose gradient stays that of the call's argument alone.
//! Each pipelined step (2 groups, several schedules, and one group as one program) equals the
//! step interpreted sequentially; what stays refused (a parameter differentiated twice) is
//! refused with a typed error.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::jit::to_host;
use tessera_ir::interp::eval_closed;
use tessera_ir::prim::ReduceOp;
use tessera_ir::trace::{trace, treduce, value_and_grad_call};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_mpmd::{Fusion, MpmdJitOptions, MpmdMesh, StepArg, mpmd_jit, mpmd_jit_with};
use tessera_pjrt::Client;
use tessera_sharding::Mesh;

const WIDTH: i64 = 8;
const ROWS: i64 = 4;
const MBS: i64 = 4;

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

/// `x, w0, w1, y[, r] -> mean((tanh(tanh(x w0) w1) - y)^2) [+ r]`, a stage per layer.
fn loss(regularized: bool) -> ClosedJaxpr {
    let mut avals = vec![
        f32(&[ROWS, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[ROWS, WIDTH]),
    ];
    if regularized {
        avals.push(f32(&[]));
    }
    trace(&avals, |a| {
        let h = a[0].matmul(&a[1]).tanh();
        let h = h.enter_stage(1).matmul(&a[2]).tanh();
        let l = (&h - &a[3]).integer_pow(2).mean(&[0, 1]);
        match regularized {
            true => vec![&l + &a[4]],
            false => vec![l],
        }
    })
    .unwrap()
}

/// Arguments `(w0, w1, mask, lr, xs, ys)`.
fn avals() -> Vec<ShapedArray> {
    vec![
        f32(&[WIDTH, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[]),
        f32(&[MBS, ROWS, WIDTH]),
        f32(&[MBS, ROWS, WIDTH]),
    ]
}

/// `step(w0, w1, mask, lr, xs, ys) -> (w0', w1', mean loss, g0, g1)`: before the loop,
/// `v0 = w0 * mask` and (when `scale_both`) `v1 = w1 / 2`; the loop differentiates the loss with
/// respect to `v0` and `v1` (or `w1` itself), and the update applies the chain rule by hand.
fn computed_step(scale_both: bool, schedule: &str) -> ClosedJaxpr {
    let loss = loss(false);
    trace(&avals(), |a| {
        let (w0, w1, mask, lr) = (&a[0], &a[1], &a[2], &a[3]);
        let v0 = w0 * mask;
        let v1 = match scale_both {
            true => w1 / 2.0,
            false => w1.clone(),
        };
        let outs = treduce(&[&v0, &v1], &[&a[4], &a[5]], 0, schedule, &[], |w, mb| {
            value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]])
        });
        let (g0, g1) = (&outs[1], &outs[2]);
        let d0 = &(g0 * mask) / MBS as f64;
        let d1 = match scale_both {
            true => g1 / (2.0 * MBS as f64),
            false => g1 / MBS as f64,
        };
        vec![
            w0 - &(lr * &d0),
            w1 - &(lr * &d1),
            outs[0].mean(&[0]),
            g0.clone(),
            g1.clone(),
        ]
    })
    .unwrap()
}

/// `step(w0, w1, mask, lr, xs, ys) -> (w0', w1', mean loss, norm, g0, g1)` whose body reads
/// both parameters outside its call: a regularizer `0.01 (|w0|^2 + |w1|^2)` (times the mask's
/// mean) passed to the loss as a non-differentiated argument, and the metric `|w1|^2` beside
/// the call. The gradients are the call's: of the loss with the regularizer a constant.
fn reread_step(schedule: &str) -> ClosedJaxpr {
    let loss = loss(true);
    let ops = [
        ReduceOp::Concat(0),
        ReduceOp::Add,
        ReduceOp::Add,
        ReduceOp::Add,
    ];
    trace(&avals(), |a| {
        let (w0, w1, mask, lr) = (&a[0], &a[1], &a[2], &a[3]);
        let outs = treduce(
            &[w0, w1, mask],
            &[&a[4], &a[5]],
            0,
            schedule,
            &ops,
            |w, mb| {
                let squares = &w[0].integer_pow(2).sum(&[0, 1]) + &w[1].integer_pow(2).sum(&[0, 1]);
                let reg = &(&squares * &w[2].mean(&[0, 1])) * 0.01;
                let call =
                    value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1], &reg]);
                let norm = w[1].integer_pow(2).sum(&[0, 1]);
                vec![call[0].clone(), norm, call[1].clone(), call[2].clone()]
            },
        );
        let (g0, g1) = (&outs[2], &outs[3]);
        vec![
            w0 - &(lr * &(g0 / MBS as f64)),
            w1 - &(lr * &(g1 / MBS as f64)),
            outs[0].mean(&[0]),
            outs[1].clone(),
            g0.clone(),
            g1.clone(),
        ]
    })
    .unwrap()
}

/// `step(w0, w1, mask, lr, xs, ys) -> (w0', w1', mean loss, g0, g1)` whose body computes the
/// differentiated `v1 = w1 * mask` from loop invariants alone: the same value every
/// micro-batch, so it is computed before the loop and differentiated like a parameter.
fn in_body_step(schedule: &str) -> ClosedJaxpr {
    let loss = loss(false);
    trace(&avals(), |a| {
        let (w0, w1, mask, lr) = (&a[0], &a[1], &a[2], &a[3]);
        let outs = treduce(
            &[w0, w1, mask],
            &[&a[4], &a[5]],
            0,
            schedule,
            &[],
            |w, mb| {
                let v1 = &w[1] * &w[2];
                value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &v1, &mb[1]])
            },
        );
        let (g0, g1) = (&outs[1], &outs[2]);
        vec![
            w0 - &(lr * &(g0 / MBS as f64)),
            w1 - &(lr * &(&(g1 * mask) / MBS as f64)),
            outs[0].mean(&[0]),
            g0.clone(),
            g1.clone(),
        ]
    })
    .unwrap()
}

fn values(shape: &[i64], seed: f64, scale: f64) -> Array {
    let n: i64 = shape.iter().product();
    let data = (0..n).map(|i| (((i as f64 + 1.0) * 0.618 + seed).sin() * 2.0 + 0.5) * scale);
    Array::new(DType::F32, shape, data.collect()).unwrap()
}

fn step_args() -> Vec<Array> {
    vec![
        values(&[WIDTH, WIDTH], 0.0, 0.2),
        values(&[WIDTH, WIDTH], 1.0, 0.2),
        values(&[WIDTH, WIDTH], 3.0, 0.5),
        Array::scalar(DType::F32, 0.5),
        values(&[MBS, ROWS, WIDTH], 10.0, 1.0),
        values(&[MBS, ROWS, WIDTH], 20.0, 1.0),
    ]
}

fn mesh(groups: i64) -> MpmdMesh {
    MpmdMesh::new(
        Mesh::auto(&[("stage", groups), ("data", 8 / groups)]).unwrap(),
        "stage",
    )
    .unwrap()
}

/// Each result of `got` within 1e-6 (relative above 1) of the interpreter's `want`.
fn assert_close(got: &[tessera_pjrt::HostArray], want: &[Array], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: the number of results");
    for (k, (got, want)) in got.iter().zip(want).enumerate() {
        let got = tessera::jit::from_host(got, want.dtype()).unwrap();
        assert_eq!(got.shape(), want.shape(), "{what}: result {k}");
        for (a, b) in got.to_vec().iter().zip(want.to_vec()) {
            let tolerance = 1e-6 * b.abs().max(1.0);
            assert!(
                (a - b).abs() <= tolerance,
                "{what}: result {k}: {a} vs interpreter {b}"
            );
        }
    }
}

/// Runs `program` on `groups` groups (`fusion` as given) and checks every result against the
/// interpreter; whether it ran as one program.
fn check(program: &ClosedJaxpr, groups: i64, fusion: Fusion, what: &str) -> bool {
    let client = Client::cpu(8).unwrap();
    let options = MpmdJitOptions {
        fusion,
        ..MpmdJitOptions::default()
    };
    let jit = mpmd_jit_with(&client, &mesh(groups), program, &options).unwrap();
    let args = step_args();
    let want = eval_closed(program, &args).unwrap();
    let host: Vec<_> = args.iter().map(|a| to_host(a).unwrap()).collect();
    let run = jit.call(&host).unwrap();
    assert_close(&run.outputs, &want, what);
    if !jit.is_fused() {
        assert_eq!(run.losses.len(), MBS as usize, "{what}");
    }
    jit.is_fused()
}

/// The gradients `program` returns (results `from..from + 2`) differ from `other`'s, so the
/// comparison with the interpreter tells the two semantics apart.
fn grads_differ(program: &ClosedJaxpr, other: &ClosedJaxpr, from: usize, other_from: usize) {
    let args = step_args();
    let (a, b) = (
        eval_closed(program, &args).unwrap(),
        eval_closed(other, &args).unwrap(),
    );
    for k in 0..2 {
        let (x, y) = (a[from + k].to_vec(), b[other_from + k].to_vec());
        let gap = x
            .iter()
            .zip(&y)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0, f64::max);
        assert!(gap > 1e-4, "gradient {k} differs by only {gap}");
    }
}

#[test]
fn values_computed_before_the_loop_are_differentiated_like_parameters() {
    for (scale_both, schedule) in [(true, "1f1b"), (false, "1f1b"), (true, "gpipe")] {
        let program = computed_step(scale_both, schedule);
        let what = format!("scale_both {scale_both}, {schedule}");
        assert!(!check(&program, 2, Fusion::Auto, &what));
    }
    // The gradient is with respect to the computed value: scaling w1 by 1/2 before the loop
    // changes it (the interpreter, which the pipelined step matches, says so).
    grads_differ(
        &computed_step(true, "1f1b"),
        &computed_step(false, "1f1b"),
        3,
        3,
    );
}

#[test]
fn computed_values_train_over_steps_from_weights_left_on_the_groups() {
    // Step two and three read the weights the step before left on the groups: the masked and
    // scaled weights are computed there and moved to the stages reading them.
    let program = computed_step(true, "1f1b");
    let client = Client::cpu(8).unwrap();
    let jit = mpmd_jit(&client, &mesh(2), &program).unwrap();
    let mut want_args = step_args();
    let mut call: Vec<StepArg> = want_args
        .iter()
        .map(|a| StepArg::Host(to_host(a).unwrap()))
        .collect();
    for n in 1..=3 {
        let want = eval_closed(&program, &want_args).unwrap();
        let run = jit.call_mpmd(&call).unwrap();
        let got: Vec<_> = run.outputs.iter().map(|o| o.to_host().unwrap()).collect();
        assert_close(&got, &want, &format!("step {n}"));
        assert_eq!(jit.before_loop_runs().map(|r| r.on_groups), Some(n));
        for (arg, out) in call.iter_mut().zip(&run.outputs).take(2) {
            *arg = out.clone().into_arg();
        }
        assert!(matches!(call[0], StepArg::Mpmd(_)), "w0' stays on a group");
        want_args[..2].clone_from_slice(&want[..2]);
    }
}

#[test]
fn values_computed_before_the_loop_are_differentiated_on_one_group() {
    // Both stages on one group: one program, or pipelined under interleaved 1F1B.
    let program = computed_step(true, "interleaved-1f1b");
    assert!(check(&program, 1, Fusion::Auto, "one group"));
    assert!(!check(&program, 1, Fusion::Never, "one group, pipelined"));
}

#[test]
fn a_parameter_read_outside_the_call_keeps_the_calls_gradient() {
    for schedule in ["1f1b", "gpipe"] {
        let program = reread_step(schedule);
        assert!(!check(&program, 2, Fusion::Auto, schedule));
    }
    // The regularizer is a constant of the call: the gradients are those of the plain loss, not
    // of the loss plus the regularizer (which would add 0.02 w mean(mask) per micro-batch).
    let args = step_args();
    let reread = eval_closed(&reread_step("1f1b"), &args).unwrap();
    let unregularized = {
        let loss = loss(false);
        trace(&avals(), |a| {
            let outs = treduce(&[&a[0], &a[1]], &[&a[4], &a[5]], 0, "1f1b", &[], |w, mb| {
                value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]])
            });
            vec![outs[1].clone(), outs[2].clone()]
        })
        .unwrap()
    };
    let want = eval_closed(&unregularized, &args).unwrap();
    for k in 0..2 {
        let gap = reread[4 + k]
            .to_vec()
            .iter()
            .zip(want[k].to_vec())
            .map(|(p, q)| (p - q).abs())
            .fold(0.0, f64::max);
        assert!(
            gap <= 1e-6,
            "gradient {k}: {gap} from the unregularized loss's"
        );
    }
    let program = reread_step("interleaved-1f1b");
    assert!(check(&program, 1, Fusion::Auto, "one group"));
    assert!(!check(&program, 1, Fusion::Never, "one group, pipelined"));
}

#[test]
fn a_differentiated_value_the_body_computes_from_invariants_is_computed_before_the_loop() {
    for schedule in ["1f1b", "gpipe"] {
        assert!(!check(&in_body_step(schedule), 2, Fusion::Auto, schedule));
    }
    let program = in_body_step("interleaved-1f1b");
    assert!(check(&program, 1, Fusion::Auto, "one group"));
    assert!(!check(&program, 1, Fusion::Never, "one group, pipelined"));
}

/// A differentiated value computed from the micro-batch differs per micro-batch: its gradient
/// is per micro-batch, summed by the loop (more combinations, and sliced differentiated
/// arguments, in `tests/mpmd_jit_concat_grads.rs`).
#[test]
fn a_differentiated_value_computed_per_micro_batch_is_differentiated_per_micro_batch() {
    let loss = loss(false);
    let program = trace(&avals(), |a| {
        treduce(&[&a[0], &a[1]], &[&a[4], &a[5]], 0, "1f1b", &[], |w, mb| {
            // Depends on the micro-batch: no loop invariant.
            let scaled = &w[1] * &mb[0].mean(&[0, 1]);
            value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &scaled, &mb[1]])
        })
    })
    .unwrap();
    assert!(!check(
        &program,
        2,
        Fusion::Auto,
        "per micro-batch, 2 groups"
    ));
}

/// `loss(x, w0, w0, y)` differentiated at both weight positions (one weight read by both
/// stages): JAX gives each position's partial derivative, which differ; the pipeline gives each
/// position a parameter of its own and equals the step interpreted, pipelined and as one
/// program, the update summing the two partials as a tied weight's.
#[test]
fn a_parameter_differentiated_at_two_positions_gets_each_partial() {
    let loss = loss(false);
    let step = |schedule: &str| {
        trace(&avals(), |a| {
            let (w0, lr) = (&a[0], &a[3]);
            let outs = treduce(&[w0], &[&a[4], &a[5]], 0, schedule, &[], |w, mb| {
                value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[0], &mb[1]])
            });
            let g = &(&outs[1] + &outs[2]) / MBS as f64;
            vec![
                w0 - &(lr * &g),
                outs[0].mean(&[0]),
                outs[1].clone(),
                outs[2].clone(),
            ]
        })
        .unwrap()
    };
    let want = eval_closed(&step("1f1b"), &step_args()).unwrap();
    let gap = want[2]
        .to_vec()
        .iter()
        .zip(&want[3].to_vec())
        .map(|(p, q)| (p - q).abs())
        .fold(0.0, f64::max);
    assert!(gap > 1e-4, "the two partials differ by only {gap}");
    for schedule in ["1f1b", "gpipe"] {
        assert!(!check(&step(schedule), 2, Fusion::Auto, schedule));
    }
    let program = step("interleaved-1f1b");
    assert!(check(&program, 1, Fusion::Auto, "one group"));
    assert!(!check(&program, 1, Fusion::Never, "one group, pipelined"));
}
