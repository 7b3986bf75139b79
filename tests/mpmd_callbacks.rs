//! Host callbacks inside pipelined training steps (`mpmd_jit`): a `debug_callback` in a stage's
//! forward, in the loop body beside the `value_and_grad_call`, before the loop and in the update
//! after it; a `pure_callback` computing a value the loss uses; ordered `io_callback`s in stages
//! on different groups. Each step runs under 1F1B over 2 groups and as one program on one group
//! (`Fusion::Auto`), its results equal to the step interpreted and each callback counted; what
//! the pipeline cannot run as the step says (ordered callbacks in two stages, an `io_callback`
//! the loss reads, callbacks outside the loop) is refused with a `CallbackStageError` naming the
//! fix, before any callback runs; on groups of several devices each callback still runs once
//! per micro-batch.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tessera::jit::to_host;
use tessera_ir::interp::eval_closed;
use tessera_ir::prim::{ReduceOp, VmapMethod};
use tessera_ir::trace::{
    Tensor, debug_callback, io_callback, pure_callback, trace, treduce, value_and_grad_call,
};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_mpmd::driver::DriverError;
use tessera_mpmd::effects::CallbackStageError;
use tessera_mpmd::{Fusion, MpmdJit, MpmdJitOptions, MpmdMesh, Remat, RematPolicy, mpmd_jit_with};
use tessera_pjrt::Client;
use tessera_sharding::Mesh;
use tessera_tests::assert_close;

const WIDTH: i64 = 4;
const ROWS: i64 = 2;
const MBS: i64 = 4;

/// The calls of ordered callbacks: `(stage, first element of the operand)`.
type Log = Arc<Mutex<Vec<(usize, f64)>>>;

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

/// Where the test puts its callbacks.
#[derive(Clone, Default)]
struct Callbacks {
    /// A `debug_callback` on the first stage's activation, counted here.
    in_stage: Option<Arc<AtomicUsize>>,
    /// A `pure_callback` scaling the targets (`y * 0.5 + 1`) before the loss reads them.
    pure_in_stage: Option<Arc<AtomicUsize>>,
    /// A `debug_callback` on the micro-batch in the loop body, beside the call.
    in_body: Option<Arc<AtomicUsize>>,
    /// A `debug_callback` on the first weight before the loop.
    before: Option<Arc<AtomicUsize>>,
    /// A `debug_callback` on the updated first weight after the loop.
    after: Option<Arc<AtomicUsize>>,
    /// Ordered `io_callback`s in the stages listed, logging `(stage, first element)`.
    ordered: Option<(Log, Vec<usize>)>,
    /// An `io_callback` in stage 1 returning `h + 1`, which the loss reads.
    io_read: bool,
    /// A `debug_callback` on the first weight alone, in stage 0, counted by `in_stage`.
    on_weight: bool,
}

fn counter(calls: &Arc<AtomicUsize>) -> impl Fn(&[Array]) + Send + Sync + 'static {
    let calls = calls.clone();
    move |_: &[Array]| {
        calls.fetch_add(1, Ordering::SeqCst);
    }
}

fn first(a: &Array) -> f64 {
    a.values().iter().next().copied().unwrap_or(f64::NAN)
}

fn logger(
    log: &Log,
    stage: usize,
) -> impl Fn(&[Array]) -> Result<Vec<Array>, String> + Send + Sync + 'static {
    let log = log.clone();
    move |a: &[Array]| {
        log.lock().unwrap().push((stage, first(&a[0])));
        Ok(vec![])
    }
}

/// `x, w0, w1, y -> mean((tanh(tanh(x w0) w1) - y')^2)`, the second layer in stage 1, with the
/// callbacks of `cb` in the stages.
fn loss(cb: &Callbacks) -> ClosedJaxpr {
    let avals = [
        f32(&[ROWS, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[ROWS, WIDTH]),
    ];
    trace(&avals, |a| {
        let h = a[0].matmul(&a[1]).tanh();
        if let Some(calls) = &cb.in_stage {
            debug_callback(counter(calls), &[&h]);
            if cb.on_weight {
                debug_callback(counter(calls), &[&a[1]]);
            }
        }
        let log_in = |stage: usize, h: &Tensor| {
            if let Some((log, stages)) = &cb.ordered
                && stages.contains(&stage)
            {
                io_callback(logger(log, stage), &[], &[h], true);
            }
        };
        log_in(0, &h);
        let mut h = h.enter_stage(1);
        log_in(1, &h);
        if cb.io_read {
            let plus_one = |a: &[Array]| {
                Ok(vec![Array::from_values(
                    a[0].dtype(),
                    a[0].values().mapv(|v| v + 1.0),
                )])
            };
            let held = h.stop_gradient();
            let bumped = io_callback(plus_one, &[f32(&[ROWS, WIDTH])], &[&held], false).remove(0);
            h = &h + &bumped;
        }
        let mut y = a[3].clone();
        if let Some(calls) = &cb.pure_in_stage {
            let calls = calls.clone();
            let f = move |args: &[Array]| {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok(vec![Array::from_values(
                    args[0].dtype(),
                    args[0].values().mapv(|v| v * 0.5 + 1.0),
                )])
            };
            let held = y.stop_gradient();
            y = pure_callback(
                f,
                &[f32(&[ROWS, WIDTH])],
                &[&held],
                Some(VmapMethod::Sequential),
            )
            .remove(0);
        }
        let out = h.matmul(&a[2]).tanh();
        vec![(&out - &y).integer_pow(2).mean(&[0, 1])]
    })
    .unwrap()
}

/// `step(w0, w1, lr, xs, ys) -> (w0', w1', loss)`: `treduce` of the loss's gradients over
/// `MBS` micro-batches under 1F1B, then SGD.
fn step(cb: &Callbacks, schedule: &str) -> ClosedJaxpr {
    let loss = loss(cb);
    let avals = [
        f32(&[WIDTH, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[]),
        f32(&[MBS, ROWS, WIDTH]),
        f32(&[MBS, ROWS, WIDTH]),
    ];
    trace(&avals, |a| {
        if let Some(calls) = &cb.before {
            debug_callback(counter(calls), &[&a[0]]);
        }
        let ops = [ReduceOp::Add, ReduceOp::Add, ReduceOp::Add];
        let outs = treduce(
            &[&a[0], &a[1]],
            &[&a[3], &a[4]],
            0,
            schedule,
            &ops,
            |w, mb| {
                if let Some(calls) = &cb.in_body {
                    debug_callback(counter(calls), &[&mb[0]]);
                }
                value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]])
            },
        );
        let scale = &a[2] / MBS as f64;
        let w0 = &a[0] - &(&scale * &outs[1]);
        let w1 = &a[1] - &(&scale * &outs[2]);
        if let Some(calls) = &cb.after {
            debug_callback(counter(calls), &[&w0]);
        }
        vec![w0, w1, outs[0].clone()]
    })
    .unwrap()
}

fn values(shape: &[i64], seed: f64) -> Array {
    let n: i64 = shape.iter().product();
    let data = (0..n).map(|i| ((i as f64 + 1.0) * 0.618 + seed).sin() * 0.5);
    Array::new(DType::F32, shape, data.collect()).unwrap()
}

fn args() -> Vec<Array> {
    vec![
        values(&[WIDTH, WIDTH], 0.0),
        values(&[WIDTH, WIDTH], 1.0),
        Array::scalar(DType::F32, 0.5),
        values(&[MBS, ROWS, WIDTH], 10.0),
        values(&[MBS, ROWS, WIDTH], 20.0),
    ]
}

/// A mesh of `groups` groups of `per_group` devices each, and a client with those devices.
fn mesh(groups: i64, per_group: i64) -> (Client, MpmdMesh) {
    let client = Client::cpu(groups * per_group).unwrap();
    let mesh = MpmdMesh::new(
        Mesh::auto(&[("stage", groups), ("data", per_group)]).unwrap(),
        "stage",
    )
    .unwrap();
    (client, mesh)
}

fn options(fusion: Fusion) -> MpmdJitOptions {
    MpmdJitOptions {
        fusion,
        ..MpmdJitOptions::default()
    }
}

/// Compiles and runs `program` on `groups` groups of `per_group` devices, then checks the
/// results against the interpreter's (run after, so callbacks count the device run first).
fn run(
    program: &ClosedJaxpr,
    groups: i64,
    per_group: i64,
    fusion: Fusion,
) -> Result<MpmdJit, DriverError> {
    run_with(program, groups, per_group, &options(fusion))
}

/// [`run`] with the step's options.
fn run_with(
    program: &ClosedJaxpr,
    groups: i64,
    per_group: i64,
    options: &MpmdJitOptions,
) -> Result<MpmdJit, DriverError> {
    let (client, mesh) = mesh(groups, per_group);
    let jit = mpmd_jit_with(&client, &mesh, program, options)?;
    let args = args();
    let host: Vec<_> = args.iter().map(|a| to_host(a).unwrap()).collect();
    let got = jit.call(&host)?;
    let want = eval_closed(program, &args).unwrap();
    assert_close(&got.outputs, &want);
    Ok(jit)
}

fn refusal(program: &ClosedJaxpr, groups: i64, per_group: i64) -> CallbackStageError {
    match run(program, groups, per_group, Fusion::Never) {
        Err(DriverError::Callbacks(e)) => e,
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("ran"),
    }
}

fn calls() -> Option<Arc<AtomicUsize>> {
    Some(Arc::new(AtomicUsize::new(0)))
}

/// The calls counted so far (then zero).
fn taken(counter: &Option<Arc<AtomicUsize>>) -> usize {
    counter.as_ref().unwrap().swap(0, Ordering::SeqCst)
}

/// 1F1B and zero-bubble (split backwards) over 2 groups, and one program on one group.
const SETUPS: [(i64, Fusion, &str); 3] = [
    (2, Fusion::Never, "1f1b"),
    (2, Fusion::Never, "zero-bubble"),
    (1, Fusion::Auto, "interleaved-1f1b"),
];

const N: usize = MBS as usize;

#[test]
fn a_debug_callback_in_a_stage_runs_once_per_micro_batch_in_that_stage() {
    for (groups, fusion, schedule) in SETUPS {
        // Two callbacks: on stage 0's activation, and on stage 0's weight alone.
        let cb = Callbacks {
            in_stage: calls(),
            on_weight: true,
            ..Callbacks::default()
        };
        let program = step(&cb, schedule);
        let jit = run(&program, groups, 1, fusion).unwrap();
        assert_eq!(jit.is_fused(), groups == 1);
        // Once per micro-batch each on the devices (the backward's recomputation of the
        // stage's forward does not call them again), then on the interpreter.
        assert_eq!(taken(&cb.in_stage), 2 * N + 2 * N, "{schedule}");
        if groups == 2 {
            // The callback on the first weight runs in stage 0: the weight stays on group 0.
            assert_eq!(jit.pipeline().groups_of_param(0), vec![0], "{schedule}");
            assert_eq!(jit.pipeline().groups_of_param(1), vec![1], "{schedule}");
        }
    }
}

#[test]
fn a_debug_callback_beside_the_call_runs_once_per_micro_batch() {
    for (groups, fusion, schedule) in SETUPS {
        let cb = Callbacks {
            in_body: calls(),
            ..Callbacks::default()
        };
        run(&step(&cb, schedule), groups, 1, fusion).unwrap();
        assert_eq!(taken(&cb.in_body), N + N, "{schedule}");
    }
}

#[test]
fn callbacks_before_and_after_the_loop_run_in_one_program_and_are_refused_pipelined() {
    let cb = Callbacks {
        before: calls(),
        after: calls(),
        ..Callbacks::default()
    };
    run(&step(&cb, "interleaved-1f1b"), 1, 1, Fusion::Auto).unwrap();
    assert_eq!((taken(&cb.before), taken(&cb.after)), (2, 2));
    for (cb, place) in [
        (
            Callbacks {
                before: calls(),
                ..Callbacks::default()
            },
            "before the treduce",
        ),
        (
            Callbacks {
                after: calls(),
                ..Callbacks::default()
            },
            "after the treduce",
        ),
    ] {
        let err = refusal(&step(&cb, "1f1b"), 2, 1);
        assert_eq!(
            err,
            CallbackStageError::OutsideTheLoop {
                prim: "debug_callback",
                place
            }
        );
        assert!(err.to_string().contains("Fusion::Auto"), "{err}");
        // A step on one group compiled as tasks is refused too.
        let one = step(&cb, "interleaved-1f1b");
        assert!(matches!(
            refusal(&one, 1, 1),
            CallbackStageError::OutsideTheLoop { .. }
        ));
    }
}

#[test]
fn a_pure_callback_the_loss_reads_gives_the_interpreters_results() {
    for (groups, fusion, schedule) in SETUPS {
        for policy in [
            RematPolicy::EverythingSaveable,
            RematPolicy::NothingSaveable,
        ] {
            let cb = Callbacks {
                pure_in_stage: calls(),
                ..Callbacks::default()
            };
            let options = MpmdJitOptions {
                remat: Remat::all(policy),
                ..options(fusion)
            };
            run_with(&step(&cb, schedule), groups, 1, &options).unwrap();
            // Pipelined and recomputing, the backward runs the stage's forward again, calling
            // it again (a pure_callback may be called any number of times, as in JAX); saving
            // the forward's residuals, it does not.
            let recomputes = groups > 1 && policy == RematPolicy::NothingSaveable;
            let device = if recomputes { 2 * N } else { N };
            assert_eq!(taken(&cb.pure_in_stage), device + N, "{schedule} {policy}");
        }
    }
    // On groups of two devices too: at least once per micro-batch on the device (XLA may call
    // it on one device or on each; here, with the residuals saved, once), then the
    // interpreter's.
    let cb = Callbacks {
        pure_in_stage: calls(),
        ..Callbacks::default()
    };
    run(&step(&cb, "1f1b"), 2, 2, Fusion::Never).unwrap();
    let taken = taken(&cb.pure_in_stage);
    assert!(taken >= N + N, "{taken}");
}

fn ordered(stages: &[usize]) -> (Callbacks, Log) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let cb = Callbacks {
        ordered: Some((log.clone(), stages.to_vec())),
        ..Callbacks::default()
    };
    (cb, log)
}

/// The device's calls (logged first), then the interpreter's: equal in order, up to float
/// rounding of the logged value.
fn assert_same_order(log: &Mutex<Vec<(usize, f64)>>, calls_per_run: usize) {
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 2 * calls_per_run, "{log:?}");
    let (device, interpreter) = log.split_at(calls_per_run);
    for (d, i) in device.iter().zip(interpreter) {
        assert_eq!(d.0, i.0, "{log:?}");
        assert!((d.1 - i.1).abs() < 1e-5, "{log:?}");
    }
}

#[test]
fn ordered_io_callbacks_in_two_stages_are_refused_pipelined_and_kept_in_one_program() {
    let (cb, log) = ordered(&[0, 1]);
    let err = refusal(&step(&cb, "1f1b"), 2, 1);
    assert_eq!(
        err,
        CallbackStageError::OrderedAcrossStages { stages: vec![0, 1] }
    );
    assert!(err.to_string().contains("ordered=false"), "{err}");
    assert!(log.lock().unwrap().is_empty());
    // As one program the step keeps program order: stage 0 then 1, micro-batch by micro-batch.
    let (cb, log) = ordered(&[0, 1]);
    run(&step(&cb, "interleaved-1f1b"), 1, 1, Fusion::Auto).unwrap();
    assert_same_order(&log, 2 * N);
    assert_eq!(
        log.lock().unwrap()[..2]
            .iter()
            .map(|c| c.0)
            .collect::<Vec<_>>(),
        [0, 1]
    );
}

#[test]
fn ordered_io_callbacks_in_one_stage_keep_program_order_pipelined() {
    for schedule in ["1f1b", "zero-bubble"] {
        let (cb, log) = ordered(&[1]);
        run(&step(&cb, schedule), 2, 1, Fusion::Never).unwrap();
        assert_same_order(&log, N);
    }
}

#[test]
fn an_io_callback_the_loss_reads_is_refused_pipelined_and_runs_in_one_program() {
    let cb = Callbacks {
        io_read: true,
        ..Callbacks::default()
    };
    let err = refusal(&step(&cb, "1f1b"), 2, 1);
    assert_eq!(err, CallbackStageError::RecomputedIoCallback { stage: 1 });
    assert!(err.to_string().contains("pure_callback"), "{err}");
    run(&step(&cb, "interleaved-1f1b"), 1, 1, Fusion::Auto).unwrap();
}

/// On groups of two devices each callback still runs once per micro-batch: programs holding
/// callbacks on several devices are lowered for GSPMD, the call carrying JAX's maximal sharding
/// on the group's first device.
#[test]
fn callbacks_on_groups_of_several_devices_run_once_per_micro_batch() {
    for (groups, fusion, schedule) in SETUPS {
        let cb = Callbacks {
            in_stage: calls(),
            in_body: calls(),
            ..Callbacks::default()
        };
        run(&step(&cb, schedule), groups, 2, fusion).unwrap();
        // On the devices, then on the interpreter.
        assert_eq!(taken(&cb.in_stage), N + N, "{schedule} on {groups} groups");
        assert_eq!(taken(&cb.in_body), N + N, "{schedule} on {groups} groups");
    }
}

#[test]
fn body_callbacks_on_a_weight_and_on_a_value_the_body_computes_run_once_per_micro_batch() {
    for (groups, fusion, schedule) in SETUPS {
        let c = Arc::new(AtomicUsize::new(0));
        let cc = c.clone();
        let avals = [
            f32(&[WIDTH, WIDTH]),
            f32(&[WIDTH, WIDTH]),
            f32(&[]),
            f32(&[MBS, ROWS, WIDTH]),
            f32(&[MBS, ROWS, WIDTH]),
        ];
        let l = loss(&Callbacks::default());
        let program = trace(&avals, |a| {
            let ops = [ReduceOp::Add, ReduceOp::Add, ReduceOp::Add];
            let outs = treduce(
                &[&a[0], &a[1]],
                &[&a[3], &a[4]],
                0,
                schedule,
                &ops,
                |w, mb| {
                    debug_callback(counter(&cc), &[&w[1]]);
                    let y = &mb[1] * 2.0;
                    debug_callback(counter(&cc), &[&y]);
                    value_and_grad_call(&l, &[1, 2], &[&mb[0], &w[0], &w[1], &y])
                },
            );
            vec![&a[0] - &outs[1], &a[1] - &outs[2], outs[0].clone()]
        })
        .unwrap();
        run(&program, groups, 1, fusion).unwrap();
        // Two callbacks, once per micro-batch each on the devices, then on the interpreter.
        assert_eq!(c.load(Ordering::SeqCst), 2 * N + 2 * N, "{schedule}");
    }
}

#[test]
fn a_callback_between_two_loops_is_refused_naming_where_it_sits() {
    let l = loss(&Callbacks::default());
    let avals = [
        f32(&[WIDTH, WIDTH]),
        f32(&[WIDTH, WIDTH]),
        f32(&[]),
        f32(&[MBS, ROWS, WIDTH]),
        f32(&[MBS, ROWS, WIDTH]),
    ];
    let calls = calls();
    let program = trace(&avals, |a| {
        let ops = [ReduceOp::Add, ReduceOp::Add, ReduceOp::Add];
        let body = |w: &[Tensor], mb: &[Tensor]| {
            value_and_grad_call(&l, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]])
        };
        let first = treduce(&[&a[0], &a[1]], &[&a[3], &a[4]], 0, "1f1b", &ops, body);
        let w0 = &a[0] - &(&a[2] * &first[1]);
        debug_callback(counter(calls.as_ref().unwrap()), &[&w0]);
        let second = treduce(&[&w0, &a[1]], &[&a[3], &a[4]], 0, "1f1b", &ops, body);
        vec![&w0 - &(&a[2] * &second[1]), second[0].clone()]
    })
    .unwrap();
    for (groups, fusion) in [(2, Fusion::Never), (1, Fusion::Auto)] {
        let (client, mesh) = mesh(groups, 1);
        let err = match mpmd_jit_with(&client, &mesh, &program, &options(fusion)) {
            Err(DriverError::Callbacks(e)) => e,
            other => panic!("{:?}", other.map(|_| ()).map_err(|e| e.to_string())),
        };
        assert_eq!(
            err,
            CallbackStageError::OutsideTheLoop {
                prim: "debug_callback",
                place: "between two treduces"
            }
        );
    }
    assert_eq!(taken(&calls), 0);
}
