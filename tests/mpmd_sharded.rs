//! `mpmd_jit` with sharded stages: a two-stage step whose first weight is column-parallel and
//! second row-parallel over a `model` axis (and optionally FSDP over `data`), its micro-batches'
//! rows split over `data`, on `stage=2, data=2, model=2`. Its losses and weights equal the
//! interpreted step's, the weights, their gradients and optimizer state stay sharded on their
//! groups (each device holds its block only), and bad specs are refused naming the argument,
//! the dimension and the axis.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::jit::{from_host, to_host};
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{trace, treduce, value_and_grad_call};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_mpmd::driver::DriverError;
use tessera_mpmd::{MpmdJitOptions, MpmdMesh, SpecError, StepArg, StepResult, mpmd_jit_with};
use tessera_pjrt::Client;
use tessera_sharding::{Mesh, PartitionSpec};

const MBS: i64 = 4;
const ROWS: i64 = 4;
const WIDTH: i64 = 6;
const HIDDEN: i64 = 8;

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

/// `step(w0 [W, H], w1 [H, W], m0, m1, lr, xs, ys) -> (w0', w1', m0', m1', mean loss)`: a
/// two-stage MLP under SGD with momentum (`m` mirrors each weight, as optimizer state does).
fn step(schedule: &str) -> ClosedJaxpr {
    let loss = trace(
        &[
            f32(&[ROWS, WIDTH]),
            f32(&[WIDTH, HIDDEN]),
            f32(&[HIDDEN, WIDTH]),
            f32(&[ROWS, WIDTH]),
        ],
        |a| {
            let h = a[0].matmul(&a[1]).tanh().enter_stage(1);
            let out = h.matmul(&a[2]).tanh();
            vec![(&out - &a[3]).integer_pow(2).mean(&[0, 1])]
        },
    )
    .unwrap();
    let batch = f32(&[MBS, ROWS, WIDTH]);
    let (w0, w1) = (f32(&[WIDTH, HIDDEN]), f32(&[HIDDEN, WIDTH]));
    let avals = [
        w0.clone(),
        w1.clone(),
        w0,
        w1,
        f32(&[]),
        batch.clone(),
        batch,
    ];
    trace(&avals, |a| {
        let outs = treduce(
            &[&a[0], &a[1]],
            &[&a[5], &a[6]],
            0,
            schedule,
            &[],
            |w, mb| value_and_grad_call(&loss, &[1, 2], &[&mb[0], &w[0], &w[1], &mb[1]]),
        );
        let m0 = &(&a[2] * 0.9) + &(&outs[1] / MBS as f64);
        let m1 = &(&a[3] * 0.9) + &(&outs[2] / MBS as f64);
        vec![
            &a[0] - &(&a[4] * &m0),
            &a[1] - &(&a[4] * &m1),
            m0,
            m1,
            outs[0].mean(&[0]),
        ]
    })
    .unwrap()
}

fn values(shape: &[i64], seed: f64, scale: f64) -> Array {
    let n: i64 = shape.iter().product();
    let data = (0..n)
        .map(|i| ((i as f64 + 1.0) * 0.618 + seed).sin() * scale)
        .collect();
    Array::new(DType::F32, shape, data).unwrap()
}

fn args() -> Vec<Array> {
    vec![
        values(&[WIDTH, HIDDEN], 0.5, 0.6),
        values(&[HIDDEN, WIDTH], 1.5, 0.6),
        Array::zeros(&f32(&[WIDTH, HIDDEN])),
        Array::zeros(&f32(&[HIDDEN, WIDTH])),
        Array::scalar(DType::F32, 0.3),
        values(&[MBS, ROWS, WIDTH], 3.0, 1.0),
        values(&[MBS, ROWS, WIDTH], 7.0, 0.8),
    ]
}

fn mesh() -> MpmdMesh {
    let mesh = Mesh::auto(&[("stage", 2), ("data", 2), ("model", 2)]).unwrap();
    MpmdMesh::new(mesh, "stage").unwrap()
}

fn p(text: &str) -> Option<PartitionSpec> {
    Some(PartitionSpec::parse(text).unwrap())
}

/// Megatron's pair (column- then row-parallel), with FSDP over `data` when `fsdp`.
fn options(fsdp: bool) -> MpmdJitOptions {
    let (w0, w1) = match fsdp {
        true => (p("P('data', 'model')"), p("P('model', 'data')")),
        false => (p("P(None, 'model')"), p("P('model', None)")),
    };
    let data = p("P(None, 'data')");
    MpmdJitOptions {
        in_specs: vec![w0.clone(), w1.clone(), w0, w1, None, data.clone(), data],
        donate_argnums: vec![0, 1, 2, 3],
        ..MpmdJitOptions::default()
    }
}

/// Three steps interpreted, each feeding its weights and state to the next: the mean losses and
/// the last step's carried values.
fn interpreted(program: &ClosedJaxpr) -> (Vec<f64>, Vec<Array>) {
    let mut args = args();
    let mut losses = Vec::new();
    for _ in 0..3 {
        let outs = eval_closed(program, &args).unwrap();
        losses.push(outs[4].to_vec()[0]);
        args.splice(0..4, outs[..4].iter().cloned());
    }
    (losses, args[..4].to_vec())
}

fn close(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(b) {
        assert!(
            (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
            "{what}: {a:?} against {b:?}"
        );
    }
}

#[test]
fn tensor_parallel_and_fsdp_stages_train_like_the_interpreted_step() {
    let client = Client::cpu(8).unwrap();
    for (fsdp, schedule) in [(false, "1f1b"), (true, "zero-bubble")] {
        let program = step(schedule);
        let (want_losses, want_carried) = interpreted(&program);
        let jit = mpmd_jit_with(&client, &mesh(), &program, &options(fsdp)).unwrap();
        let mut carried: Vec<StepArg> = args()[..4]
            .iter()
            .map(|a| StepArg::Host(to_host(a).unwrap()))
            .collect();
        let mut losses = Vec::new();
        for _ in 0..3 {
            let mut call: Vec<StepArg> = std::mem::take(&mut carried);
            call.extend(
                args()[4..]
                    .iter()
                    .map(|a| StepArg::Host(to_host(a).unwrap())),
            );
            let mut outputs = jit.call_mpmd_donated(&mut call).unwrap().outputs;
            let loss = outputs.pop().unwrap().to_host().unwrap();
            losses.push(from_host(&loss, DType::F32).unwrap().to_vec()[0]);
            check_layouts(&outputs, &jit.in_specs()[..4]);
            carried = outputs.into_iter().map(StepResult::into_arg).collect();
        }
        close(&losses, &want_losses, schedule);
        for (k, (got, want)) in carried.iter().zip(&want_carried).enumerate() {
            let StepArg::Mpmd(m) = got else {
                panic!("carried value {k} came back to the host")
            };
            let host = from_host(
                &m.first_mpmd_replica().unwrap().to_host().unwrap(),
                DType::F32,
            );
            close(
                &host.unwrap().to_vec(),
                &want.to_vec(),
                &format!("carried value {k}"),
            );
        }
    }
}

/// Each carried result lies on one group with the argument's spec, every device holding only
/// its block (a quarter of the weight under TP × FSDP, a half under TP).
fn check_layouts(outputs: &[StepResult], specs: &[PartitionSpec]) {
    for (k, (out, spec)) in outputs.iter().zip(specs).enumerate() {
        let StepResult::Mpmd(m) = out else {
            panic!("result {k} is on the host")
        };
        assert_eq!(m.spec(), spec, "result {k}");
        let arrays = m.to_mpmd_local_arrays().unwrap();
        assert_eq!(arrays.len(), 1, "result {k} lives on one group");
        let array = arrays.values().next().unwrap();
        let factor: i64 = spec
            .used_axes()
            .map(|_| 2) // every axis of the group has 2 devices
            .product();
        let total = array.shape().iter().product::<i64>() as u64 * 4;
        for shard in array.addressable_shards().unwrap() {
            let bytes = shard.buffer.on_device_size().unwrap();
            assert_eq!(
                bytes,
                total / factor as u64,
                "result {k} on device {}",
                shard.device
            );
        }
    }
}

#[test]
fn a_parameter_passed_in_another_layout_is_resharded_onto_its_spec() {
    let client = Client::cpu(8).unwrap();
    let program = step("1f1b");
    let options = MpmdJitOptions {
        donate_argnums: Vec::new(),
        ..options(false)
    };
    let jit = mpmd_jit_with(&client, &mesh(), &program, &options).unwrap();
    // A first step's results, then the same weights passed back replicated on their groups.
    let host: Vec<StepArg> = args()
        .iter()
        .map(|a| StepArg::Host(to_host(a).unwrap()))
        .collect();
    let first = jit.call_mpmd(&host).unwrap();
    let mut replicated = Vec::new();
    for out in &first.outputs[..4] {
        let StepResult::Mpmd(m) = out else {
            panic!("on the host")
        };
        let group = m.mpmd_idxs()[0];
        let sharding =
            tessera_mpmd::MpmdSharding::new(&mesh(), [group], &PartitionSpec::replicated())
                .unwrap();
        let whole = m
            .first_mpmd_replica()
            .unwrap()
            .reshard(&client, &sharding.group_sharding(group).unwrap())
            .unwrap();
        let array = tessera_mpmd::MpmdArray::new(vec![whole], sharding).unwrap();
        replicated.push(StepArg::Mpmd(Box::new(array)));
    }
    replicated.extend(host[4..].iter().cloned());
    let again: Vec<StepArg> = first.outputs[..4]
        .iter()
        .cloned()
        .map(StepResult::into_arg)
        .chain(host[4..].iter().cloned())
        .collect();
    let a = jit.call_mpmd(&replicated).unwrap();
    let b = jit.call_mpmd(&again).unwrap();
    assert_eq!(a.losses, b.losses);
    for (x, y) in a.outputs.iter().zip(&b.outputs) {
        assert_eq!(x.to_host().unwrap().bytes(), y.to_host().unwrap().bytes());
    }
    check_layouts(&a.outputs[..4], &jit.in_specs()[..4]);
}

#[test]
fn bad_specs_are_refused_naming_the_argument_dimension_and_axis() {
    let client = Client::cpu(8).unwrap();
    let program = step("1f1b");
    let refused = |k: usize, spec: &str| -> SpecError {
        let mut options = options(false);
        options.in_specs[k] = p(spec);
        match mpmd_jit_with(&client, &mesh(), &program, &options) {
            Err(DriverError::Spec(e)) => e,
            Err(other) => panic!("{spec}: not a spec error: {other}"),
            Ok(_) => panic!("{spec} was accepted"),
        }
    };
    let err = refused(0, "P(None, 'stage')");
    assert!(matches!(err, SpecError::MpmdAxis { dim: 1, .. }), "{err}");
    assert!(err.to_string().contains("step argument 0"), "{err}");
    let err = refused(1, "P('tensor', None)");
    assert!(
        matches!(err, SpecError::UnknownAxis { dim: 0, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("step argument 1 (f32[8,6])"),
        "{err}"
    );
    // 6 rows over data × model (4 devices).
    let err = refused(2, "P(('data', 'model'), None)");
    assert!(
        matches!(
            err,
            SpecError::Indivisible {
                dim: 0,
                size: 6,
                devices: 4,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("step argument 2"), "{err}");
    let err = refused(5, "P('data', None, None)");
    assert!(matches!(err, SpecError::LoopAxis { dim: 0, .. }), "{err}");
    assert!(err.to_string().contains("step argument 5"), "{err}");
}
