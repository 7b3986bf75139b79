//! `mpmd_jit`: a training step written with `treduce` (micro-batch loop of `value_and_grad_call`)
//! and an SGD update runs pipelined over MPMD groups, the update on the groups holding the
//! parameters, and gives the step's own (interpreted, sequential) results.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::jit::{from_host, to_host};
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{trace, treduce, value_and_grad_call};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_mpmd::{MpmdJitOptions, MpmdMesh, mpmd_jit, mpmd_jit_with};
use tessera_pjrt::Client;
use tessera_schedule::{Action, Placement, Registry, Schedule, ScheduleError, Task};
use tessera_sharding::Mesh;
use tessera_tests::assert_close;

const WIDTH: i64 = 8;

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

/// `x, w_0..w_{S-1}, y -> mean((tanh(... tanh(x w_0) ...) - y)^2)`, a stage marker per layer.
fn loss(stages: usize, rows: i64) -> ClosedJaxpr {
    loss_of(Values::Chain, stages, rows)
}

/// What crosses the stage boundaries of a test model.
#[derive(Clone, Copy)]
enum Values {
    /// One activation from each stage to the next.
    Chain,
    /// Also each stage's output into the stage after next (a skip connection).
    Skips,
    /// Two values at every boundary.
    TwoStreams,
    /// The first stage's weight used again by the last stage (a tied embedding and head).
    Tied,
}

/// The test model: a stage marker before each layer `s > 0`, values crossing as `kind` says.
fn loss_of(kind: Values, stages: usize, rows: i64) -> ClosedJaxpr {
    let mut avals = vec![f32(&[rows, WIDTH])];
    avals.extend((0..stages).map(|_| f32(&[WIDTH, WIDTH])));
    avals.push(f32(&[rows, WIDTH]));
    trace(&avals, |a| {
        let (mut h, mut older) = (a[0].clone(), a[0].clone());
        let mut g = a[0].sin();
        for s in 0..stages {
            let (x, y) = match s {
                0 => (h.clone(), g.clone()),
                _ => (h.enter_stage(s as i64), g.enter_stage(s as i64)),
            };
            let next = match kind {
                Values::Chain | Values::Tied => x.matmul(&a[1 + s]).tanh(),
                Values::Skips => &x.matmul(&a[1 + s]).tanh() + &(&older * 0.5),
                Values::TwoStreams => (&x.matmul(&a[1 + s]) + &y).tanh(),
            };
            if let Values::TwoStreams = kind {
                g = &(&y * 0.5) + &x.cos();
            }
            older = h;
            h = next;
        }
        let out = match kind {
            Values::TwoStreams => &h + &g,
            Values::Tied => h.matmul(&a[1].transpose(&[1, 0])).tanh(),
            _ => h,
        };
        vec![(&out - &a[stages + 1]).integer_pow(2).mean(&[0, 1])]
    })
    .unwrap()
}

/// `step(w_0..w_{S-1}, lr, xs, ys) -> (w'_0.., mean loss)` with `xs`, `ys` holding `mbs`
/// micro-batches along axis 0.
fn step(stages: usize, mbs: i64, rows: i64, schedule: &str) -> ClosedJaxpr {
    step_of(Values::Chain, None, stages, mbs, rows, schedule)
}

/// As [`step`], for the model `kind`, its gradients clipped to the global norm `clip` if given.
fn step_of(
    kind: Values,
    clip: Option<f64>,
    stages: usize,
    mbs: i64,
    rows: i64,
    schedule: &str,
) -> ClosedJaxpr {
    let loss = loss_of(kind, stages, rows);
    let mut avals: Vec<ShapedArray> = (0..stages).map(|_| f32(&[WIDTH, WIDTH])).collect();
    avals.push(f32(&[]));
    avals.push(f32(&[mbs, rows, WIDTH]));
    avals.push(f32(&[mbs, rows, WIDTH]));
    let argnums: Vec<usize> = (1..=stages).collect();
    trace(&avals, |a| {
        let weights: Vec<&_> = a[..stages].iter().collect();
        let xs = [&a[stages + 1], &a[stages + 2]];
        let outs = treduce(&weights, &xs, 0, schedule, &[], |w, mb| {
            let mut args = vec![&mb[0]];
            args.extend(w.iter());
            args.push(&mb[1]);
            value_and_grad_call(&loss, &argnums, &args)
        });
        let lr = &a[stages];
        // Scale every gradient by min(1, clip / global norm): one scalar over all the groups.
        let scale = clip.map(|c| {
            let squares = (0..stages)
                .map(|s| outs[1 + s].integer_pow(2).sum(&[0, 1]))
                .reduce(|x, y| &x + &y)
                .unwrap();
            let norm = &squares.sqrt() / mbs as f64;
            let bound = norm.full_like_scalar(c);
            &bound / &norm.maximum(&bound)
        });
        let mut results: Vec<_> = (0..stages)
            .map(|s| {
                let g = &outs[1 + s] / mbs as f64;
                let g = match &scale {
                    Some(k) => &g * k,
                    None => g,
                };
                &a[s] - &(lr * &g)
            })
            .collect();
        results.push(outs[0].mean(&[0]));
        results
    })
    .unwrap()
}

fn values(shape: &[i64], seed: f64) -> Array {
    let n: i64 = shape.iter().product();
    Array::new(
        DType::F32,
        shape,
        (0..n)
            .map(|i| ((i as f64 + 1.0) * 0.618 + seed).sin() * 0.5)
            .collect(),
    )
    .unwrap()
}

/// The step's arguments: one weight per stage, the learning rate 0.5, inputs and targets.
fn step_args(stages: usize, mbs: i64, rows: i64) -> Vec<Array> {
    let mut args: Vec<Array> = (0..stages)
        .map(|s| values(&[WIDTH, WIDTH], s as f64))
        .collect();
    args.push(Array::scalar(DType::F32, 0.5));
    args.push(values(&[mbs, rows, WIDTH], 10.0));
    args.push(values(&[mbs, rows, WIDTH], 20.0));
    args
}

/// The results of the last of `steps` interpreted steps, each fed the previous step's weights.
fn interpreted_steps(
    program: &ClosedJaxpr,
    args: &[Array],
    stages: usize,
    steps: usize,
) -> Vec<Array> {
    let mut args = args.to_vec();
    let mut results = Vec::new();
    for _ in 0..steps {
        results = eval_closed(program, &args).unwrap();
        args[..stages].clone_from_slice(&results[..stages]);
    }
    results
}

fn check(stages: usize, schedule: &str) {
    check_with(stages, schedule, &MpmdJitOptions::default());
}

fn mesh(stages: usize) -> MpmdMesh {
    MpmdMesh::new(
        Mesh::auto(&[("stage", stages as i64), ("data", 8 / stages as i64)]).unwrap(),
        "stage",
    )
    .unwrap()
}

/// Runs the `stages`-stage step under `schedule` (a name, resolved by `options`) and checks its
/// results against the interpreter and its order against the schedule's plan.
fn check_with(stages: usize, schedule: &str, options: &MpmdJitOptions) {
    check_model(Values::Chain, stages, schedule, options);
}

/// As [`check_with`], for the model `kind`.
fn check_model(kind: Values, stages: usize, schedule: &str, options: &MpmdJitOptions) {
    let (mbs, rows) = (4, 2);
    let program = step_of(kind, None, stages, mbs, rows, schedule);
    let client = Client::cpu(8).unwrap();
    let mesh = mesh(stages);
    let jit = mpmd_jit_with(&client, &mesh, &program, options).unwrap();
    // Each weight is updated on the group running its stage; the mean loss on the host.
    let mut places = jit.update_places();
    places.sort();
    let mut want: Vec<(Option<usize>, Vec<usize>)> = vec![(None, vec![stages])];
    for s in 0..stages {
        let group = jit.pipeline().group_of_stage(s);
        want.push((group, vec![s]));
    }
    want.sort();
    assert_eq!(places, want);
    let args = step_args(stages, mbs, rows);
    let want = eval_closed(&program, &args).unwrap();
    let host: Vec<_> = args.iter().map(|a| to_host(a).unwrap()).collect();
    let run = jit.call(&host).unwrap();
    assert_close(&run.outputs, &want);
    assert_eq!(run.losses.len(), mbs as usize);
    // Every action of the schedule ran, each group in the schedule's order.
    let plan = jit.pipeline().schedule_plan();
    let actions: usize = plan.actors.iter().map(Vec::len).sum();
    assert_eq!(run.timings.tasks.len(), actions);
    let orders = run.timings.group_orders(plan.actors.len());
    for (got, want) in orders.iter().zip(&plan.actors) {
        let want: Vec<String> = want
            .iter()
            .map(tessera_mpmd::pipeline::action_name)
            .collect();
        assert_eq!(got, &want);
    }
}

#[test]
fn a_treduce_step_runs_pipelined_over_two_and_four_groups() {
    check(2, "1f1b");
    check(4, "gpipe");
}

/// GPipe whose backwards run last micro-batch first: no built-in makes this plan.
struct LifoDrain(u32);

impl Schedule for LifoDrain {
    fn name(&self) -> String {
        "lifo-drain".into()
    }
    fn placement(&self) -> Placement {
        Placement::plain(self.0)
    }
    fn actions(&self, m: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        Ok((0..self.0)
            .map(|s| {
                (0..m)
                    .map(|mb| Task::fwd(s, mb))
                    .chain((0..m).rev().map(|mb| Task::bwd(s, mb)))
                    .map(Action::from)
                    .collect()
            })
            .collect())
    }
}

/// Every actor runs its backwards before its forwards: never valid.
struct BackwardsFirst(u32);

impl Schedule for BackwardsFirst {
    fn name(&self) -> String {
        "backwards-first".into()
    }
    fn placement(&self) -> Placement {
        Placement::plain(self.0)
    }
    fn actions(&self, m: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        Ok((0..self.0)
            .map(|s| {
                (0..m)
                    .map(|mb| Task::bwd(s, mb))
                    .chain((0..m).map(|mb| Task::fwd(s, mb)))
                    .map(Action::from)
                    .collect()
            })
            .collect())
    }
}

#[test]
fn values_skipping_stages_or_crossing_in_pairs_train_like_the_unpipelined_step() {
    let default = MpmdJitOptions::default();
    for schedule in ["1f1b", "zero-bubble"] {
        check_model(Values::Skips, 4, schedule, &default);
        check_model(Values::TwoStreams, 4, schedule, &default);
    }
    check_model(Values::Skips, 4, "interleaved-1f1b", &default);
}

#[test]
fn a_user_schedule_trains_as_an_object_or_from_an_extended_registry() {
    check_with(
        2,
        "lifo-drain",
        &MpmdJitOptions::with_schedule(LifoDrain(2)),
    );
    let mut registry = Registry::with_builtins();
    registry.register("lifo-drain", "GPipe draining LIFO", |p| {
        Ok(Box::new(LifoDrain(p.stages)) as Box<dyn Schedule>)
    });
    check_with(4, "lifo-drain", &MpmdJitOptions::with_registry(registry));
}

#[test]
fn a_user_schedule_that_does_not_fit_the_step_is_refused_with_the_validators_message() {
    let client = Client::cpu(8).unwrap();
    let program = step(2, 4, 2, "backwards-first");
    let compile = |options: &MpmdJitOptions| {
        mpmd_jit_with(&client, &mesh(2), &program, options)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let invalid = BackwardsFirst(2);
    let why = tessera_schedule::validate(&invalid.plan(4).unwrap())
        .unwrap_err()
        .to_string();
    let err = compile(&MpmdJitOptions::with_schedule(invalid));
    assert!(
        err.contains("schedule 'backwards-first' does not validate") && err.contains(&why),
        "{err}"
    );
    // A valid schedule for another stage count (and so another group count).
    let err = compile(&MpmdJitOptions::with_schedule(LifoDrain(4)));
    assert!(
        err.contains("the schedule runs on 4 MPMD groups but the mesh has 2"),
        "{err}"
    );
    // A name the registry does not know.
    let err = compile(&MpmdJitOptions::default());
    assert!(
        err.contains("the treduce's schedule 'backwards-first'") && err.contains("gpipe"),
        "{err}"
    );
}

#[test]
fn a_step_that_passes_its_deadline_fails_and_the_next_step_runs() {
    use tessera_mpmd::runtime::{RunError, RunOptions};
    let (stages, mbs, rows) = (2, 4, 2);
    let program = step(stages, mbs, rows, "1f1b");
    let client = Client::cpu(8).unwrap();
    let options = MpmdJitOptions {
        timeout: Some(std::time::Duration::from_nanos(1)),
        ..MpmdJitOptions::default()
    };
    let mut jit = mpmd_jit_with(&client, &mesh(stages), &program, &options).unwrap();
    let args = step_args(stages, mbs, rows);
    let host: Vec<_> = args.iter().map(|a| to_host(a).unwrap()).collect();
    match jit.call(&host) {
        Err(tessera_mpmd::driver::DriverError::Run(RunError::Timeout { task, .. })) => {
            assert!(!task.is_empty());
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    jit.set_run_options(RunOptions::default());
    let want = eval_closed(&program, &args).unwrap();
    for _ in 0..2 {
        let run = jit.call(&host).unwrap();
        for (got, want) in run.outputs.iter().zip(&want) {
            let got = from_host(got, DType::F32).unwrap();
            for (a, b) in got.to_vec().iter().zip(want.to_vec()) {
                assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
            }
        }
    }
}

/// Two steps of `program` with mpmd_jit, each step's weights fed back from the groups, against
/// two interpreted steps; the weights of each step, with the groups each one lives on.
fn two_steps(program: &ClosedJaxpr, stages: usize, schedule_groups: i64) -> Vec<Vec<usize>> {
    use tessera_mpmd::{StepArg, StepResult};
    let (mbs, rows) = (4, 2);
    let client = Client::cpu(8).unwrap();
    let mesh = MpmdMesh::new(
        Mesh::auto(&[("stage", schedule_groups), ("data", 8 / schedule_groups)]).unwrap(),
        "stage",
    )
    .unwrap();
    let jit = mpmd_jit(&client, &mesh, program).unwrap();
    let args = step_args(stages, mbs, rows);
    let want = interpreted_steps(program, &args, stages, 2);
    let mut call_args: Vec<StepArg> = args
        .iter()
        .map(|a| StepArg::Host(to_host(a).unwrap()))
        .collect();
    let mut got = Vec::new();
    let mut homes = Vec::new();
    for _ in 0..2 {
        got = jit.call_mpmd(&call_args).unwrap().outputs;
        homes.clear();
        for (s, out) in got.iter().take(stages).enumerate() {
            let StepResult::Mpmd(weights) = out else {
                panic!("weight {s} came back to the host");
            };
            homes.push(weights.mpmd_idxs());
            call_args[s] = out.clone().into_arg();
        }
    }
    let got: Vec<_> = got.iter().map(|g| g.to_host().unwrap()).collect();
    assert_close(&got, &want);
    homes
}

#[test]
fn a_tied_weight_gets_the_sum_of_its_stages_gradients_and_lives_on_both_groups() {
    for schedule in ["1f1b", "zero-bubble"] {
        let program = step_of(Values::Tied, None, 4, 4, 2, schedule);
        let homes = two_steps(&program, 4, 4);
        // w0 is read by stage 0 and by the last stage: updated once, copied to both groups.
        assert_eq!(
            homes,
            vec![vec![0, 3], vec![1], vec![2], vec![3]],
            "{schedule}"
        );
    }
}

#[test]
fn global_norm_clipping_mixes_the_groups_and_trains_like_the_unpipelined_step() {
    for (kind, schedule, groups) in [
        (Values::Chain, "1f1b", 4),
        (Values::Chain, "interleaved-1f1b", 2),
        (Values::Tied, "zero-bubble", 4),
    ] {
        let stages = 4;
        // A small bound, so the clipping scales every gradient.
        let program = step_of(kind, Some(0.001), stages, 4, 2, schedule);
        let unclipped = step_of(kind, None, stages, 4, 2, schedule);
        let args = step_args(stages, 4, 2);
        let (a, b) = (
            eval_closed(&program, &args).unwrap(),
            eval_closed(&unclipped, &args).unwrap(),
        );
        assert_ne!(a[0].to_vec(), b[0].to_vec(), "the bound does not clip");
        let homes = two_steps(&program, stages, groups);
        assert_eq!(homes.len(), stages);
        // Only the norm's parts cross groups: each weight is updated on its own stage's group.
        let client = Client::cpu(8).unwrap();
        let mesh = MpmdMesh::new(
            Mesh::auto(&[("stage", groups), ("data", 8 / groups)]).unwrap(),
            "stage",
        )
        .unwrap();
        let jit = mpmd_jit(&client, &mesh, &program).unwrap();
        let places = jit.update_places();
        for s in 0..stages {
            let (group, _) = places
                .iter()
                .find(|(_, outputs)| outputs.contains(&s))
                .unwrap();
            assert_eq!(*group, jit.pipeline().group_of_stage(s), "weight {s}");
        }
    }
}

#[test]
fn per_micro_batch_values_are_split_over_the_group_and_parameters_replicated() {
    use tessera_mpmd::driver::key_spec;
    use tessera_mpmd::pipeline::Key;
    let parts = tessera_mpmd::partition::partition(&loss(2, 4), &[1, 2]).unwrap();
    let mesh = MpmdMesh::new(Mesh::auto(&[("stage", 2), ("data", 4)]).unwrap(), "stage").unwrap();
    let group = mesh.lowering_mesh();
    let spec = |key| key_spec(&parts, key, group).to_string();
    assert_eq!(
        spec(Key::Data {
            stage: 0,
            mb: 0,
            k: 0
        }),
        "P('data',)"
    );
    assert_eq!(
        spec(Key::Act {
            stage: 0,
            mb: 3,
            k: 0
        }),
        "P('data',)"
    );
    assert_eq!(spec(Key::Param { stage: 1, k: 0 }), "P()");
    // Gradient accumulators and losses hold each device's partial sum until the step's end
    // (`GradReduce::PerStep`, the default); reduced per micro-batch they are replicated.
    let acc = Key::Acc {
        stage: 0,
        step: 2,
        k: 0,
    };
    assert_eq!(spec(acc), "P(unreduced={'data'})");
    assert_eq!(spec(Key::Loss { mb: 1 }), "P(unreduced={'data'})");
    let per_microbatch = tessera_mpmd::ValueSpecs::default()
        .with_grad_reduce(tessera_mpmd::GradReduce::PerMicrobatch);
    assert_eq!(per_microbatch.spec(&parts, acc, group).to_string(), "P()");
    // Rows that the group's 4 devices do not divide stay whole.
    let odd = tessera_mpmd::partition::partition(&loss(2, 3), &[1, 2]).unwrap();
    assert_eq!(
        key_spec(
            &odd,
            Key::Data {
                stage: 0,
                mb: 0,
                k: 0
            },
            group
        )
        .to_string(),
        "P()"
    );
}

#[test]
fn parameters_stay_on_their_groups_between_steps() {
    use tessera_mpmd::{StepArg, StepResult};
    let (stages, mbs, rows) = (2, 4, 2);
    let program = step(stages, mbs, rows, "1f1b");
    let client = Client::cpu(8).unwrap();
    let mesh = MpmdMesh::new(Mesh::auto(&[("stage", 2), ("data", 4)]).unwrap(), "stage").unwrap();
    let jit = mpmd_jit(&client, &mesh, &program).unwrap();
    let args = step_args(stages, mbs, rows);
    // Two steps in the interpreter.
    let want = interpreted_steps(&program, &args, stages, 2);
    // Two steps with mpmd_jit, the weights fed back from the groups.
    let mut call_args: Vec<StepArg> = args
        .iter()
        .map(|a| StepArg::Host(to_host(a).unwrap()))
        .collect();
    let mut got = Vec::new();
    for _ in 0..2 {
        got = jit.call_mpmd(&call_args).unwrap().outputs;
        for (s, out) in got.iter().take(stages).enumerate() {
            let StepResult::Mpmd(weights) = out else {
                panic!("weight {s} came back to the host");
            };
            assert_eq!(
                weights.mpmd_idxs(),
                vec![jit.pipeline().group_of_stage(s).unwrap()]
            );
            call_args[s] = out.clone().into_arg();
        }
    }
    let got: Vec<_> = got.iter().map(|g| g.to_host().unwrap()).collect();
    assert_close(&got, &want);
    // A weight on the wrong group is refused with a clear error.
    let mut wrong = call_args.clone();
    wrong.swap(0, 1);
    let err = jit
        .call_mpmd(&wrong)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("lives on groups"), "{err}");
}

#[test]
fn a_step_donating_its_parameters_updates_them_in_place() {
    use tessera_mpmd::{StepArg, StepResult};
    let (stages, mbs, rows) = (2, 4, 2);
    let program = step(stages, mbs, rows, "1f1b");
    let client = Client::cpu(8).unwrap();
    let options = MpmdJitOptions {
        donate_argnums: vec![0, 1],
        ..MpmdJitOptions::default()
    };
    let jit = mpmd_jit_with(&client, &mesh(stages), &program, &options).unwrap();
    let args = step_args(stages, mbs, rows);
    let want = interpreted_steps(&program, &args, stages, 3);
    let mut call_args: Vec<StepArg> = args
        .iter()
        .map(|a| StepArg::Host(to_host(a).unwrap()))
        .collect();
    // Host weights: their device copies are donated.
    let mut got = jit.call_mpmd_donated(&mut call_args).unwrap().outputs;
    for _ in 0..2 {
        for s in 0..stages {
            call_args[s] = got[s].clone().into_arg();
        }
        let before: Vec<StepArg> = call_args[..stages].to_vec();
        // Weights on their groups are consumed only by the donating call.
        let err = jit.call_mpmd(&call_args).err().map(|e| e.to_string());
        assert!(err.unwrap_or_default().contains("call_mpmd_donated"));
        got = jit.call_mpmd_donated(&mut call_args).unwrap().outputs;
        for s in 0..stages {
            let StepArg::Mpmd(m) = &call_args[s] else {
                panic!("weight {s} is not on its group");
            };
            assert!(m.is_deleted(), "weight {s} was not deleted");
            // Another handle on the donated buffers reads nothing stale.
            let stale = before[s].clone();
            let StepArg::Mpmd(old) = stale else { panic!() };
            let err = old
                .first_mpmd_replica()
                .unwrap()
                .to_host()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains("deleted or donated"), "{err}");
        }
    }
    let host: Vec<_> = got
        .iter()
        .map(|g| StepResult::to_host(g).unwrap())
        .collect();
    assert_close(&host, &want);
    // The donated (deleted) weights passed again are named.
    let err = jit
        .call_mpmd_donated(&mut call_args)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("argument 0") && err.contains("deleted"),
        "{err}"
    );
    // What no update on a group reuses cannot be donated.
    let lr = MpmdJitOptions {
        donate_argnums: vec![stages],
        ..MpmdJitOptions::default()
    };
    let err = mpmd_jit_with(&client, &mesh(stages), &program, &lr)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains(&format!("argument {stages} is donated")),
        "{err}"
    );
    // Donated where possible, it is kept and the weights are donated.
    let maybe = MpmdJitOptions {
        donate_where_possible: (0..=stages).collect(),
        ..MpmdJitOptions::default()
    };
    let jit = mpmd_jit_with(&client, &mesh(stages), &program, &maybe).unwrap();
    assert_eq!(jit.donated(), (0..stages).collect::<Vec<_>>());
    let mut call_args: Vec<StepArg> = args
        .iter()
        .map(|a| StepArg::Host(to_host(a).unwrap()))
        .collect();
    let first = jit.call_mpmd_donated(&mut call_args).unwrap().outputs;
    for s in 0..stages {
        call_args[s] = first[s].clone().into_arg();
    }
    let outputs = jit.call_mpmd_donated(&mut call_args).unwrap().outputs;
    for (s, arg) in call_args[..stages].iter().enumerate() {
        assert!(
            matches!(arg, StepArg::Mpmd(m) if m.is_deleted()),
            "weight {s}"
        );
    }
    let host: Vec<_> = outputs
        .iter()
        .map(|g| StepResult::to_host(g).unwrap())
        .collect();
    assert_close(&host, &interpreted_steps(&program, &args, stages, 2));
}

#[test]
fn a_step_takes_and_gives_parameter_trees() {
    use tessera::nn::Tree;
    use tessera::trees::TreeStep;
    use tessera_mpmd::StepArg;
    let (stages, mbs, rows) = (2, 4, 2);
    let program = step(stages, mbs, rows, "1f1b");
    let avals = program.jaxpr.in_avals();
    let named = |names: &[&str], leaves: &[ShapedArray]| {
        Tree::node(
            names
                .iter()
                .zip(leaves)
                .map(|(n, a)| (n.to_string(), Tree::Leaf(a.clone()))),
        )
    };
    // (weights {w0, w1}, lr, data {x, y}) -> (weights {w0, w1}, loss)
    let inputs = vec![
        named(&["w0", "w1"], &avals[..2]),
        Tree::Leaf(avals[2].clone()),
        named(&["x", "y"], &avals[3..]),
    ];
    let outs = program.jaxpr.out_avals();
    let outputs = vec![
        named(&["w0", "w1"], &outs[..2]),
        Tree::Leaf(outs[2].clone()),
    ];
    let client = Client::cpu(8).unwrap();
    let tree_step = TreeStep::new(
        &client,
        &mesh(stages),
        &program,
        inputs.clone(),
        outputs,
        &MpmdJitOptions::default(),
    )
    .unwrap();
    let args = step_args(stages, mbs, rows);
    let host = |a: &Array| StepArg::Host(to_host(a).unwrap());
    let trees: Vec<Tree<StepArg>> = inputs
        .iter()
        .scan(0, |next, tree| {
            let leaves: Vec<StepArg> = args[*next..*next + tree.len()].iter().map(host).collect();
            *next += tree.len();
            Some(tree.unflatten(leaves).unwrap())
        })
        .collect();
    let run = tree_step.call(&trees).unwrap();
    let want = eval_closed(&program, &args).unwrap();
    let w1 = run.outputs[0].leaf("w1").unwrap().to_host().unwrap();
    let w1 = from_host(&w1, DType::F32).unwrap().to_vec();
    for (a, b) in w1.iter().zip(want[1].to_vec()) {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
    }
    assert_eq!(run.outputs[1].len(), 1);
    // Trees of another shape are refused, naming the path.
    let mut swapped = trees.clone();
    swapped[0] = named(&["w0", "v1"], &avals[..2]).map(&mut |_, a| {
        StepArg::Host(tessera_pjrt::HostArray::zeros(&ShapedArray::new(
            DType::F32,
            &a.shape,
        )))
    });
    let err = tree_step
        .call(&swapped)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("v1") || err.contains("w1"), "{err}");
}

/// One MPMD group (two devices splitting the data) runs both stages.
fn one_group() -> MpmdMesh {
    MpmdMesh::new(Mesh::auto(&[("stage", 1), ("data", 2)]).unwrap(), "stage").unwrap()
}

#[test]
fn a_step_on_one_group_runs_as_one_program_like_its_pipelined_tasks() {
    use tessera_mpmd::{FUSED_TASK, Fusion, StepArg, StepResult};
    let (stages, mbs, rows) = (2, 4, 2);
    let program = step(stages, mbs, rows, "interleaved-1f1b");
    let client = Client::cpu(8).unwrap();
    let args = step_args(stages, mbs, rows);
    let host: Vec<_> = args.iter().map(|a| to_host(a).unwrap()).collect();
    let want = eval_closed(&program, &args).unwrap();
    // The pipeline's tasks and update programs, on request.
    let never = MpmdJitOptions {
        fusion: Fusion::Never,
        ..MpmdJitOptions::default()
    };
    let tasks = mpmd_jit_with(&client, &one_group(), &program, &never).unwrap();
    assert!(!tasks.is_fused());
    let by_tasks = tasks.call(&host).unwrap();
    let plan = tasks.pipeline().schedule_plan();
    assert_eq!(
        by_tasks.timings.tasks.len(),
        plan.actors.iter().map(Vec::len).sum::<usize>()
    );
    // By default: one program, one task, the same results and per-micro-batch losses.
    let fused = mpmd_jit(&client, &one_group(), &program).unwrap();
    assert!(fused.is_fused());
    let run = fused.call(&host).unwrap();
    assert_close(&run.outputs, &want);
    assert_close(&run.outputs, &by_tasks.outputs);
    assert_eq!(run.timings.tasks.len(), 1);
    assert_eq!(run.timings.tasks[0].name, FUSED_TASK);
    assert_eq!(run.losses.len(), mbs as usize);
    for (a, b) in run.losses.iter().zip(&by_tasks.losses) {
        assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{a} vs {b}");
    }
    // Donating the weights: three steps on the group, each consuming the last one's weights.
    let donating = MpmdJitOptions {
        donate_argnums: vec![0, 1],
        ..MpmdJitOptions::default()
    };
    let jit = mpmd_jit_with(&client, &one_group(), &program, &donating).unwrap();
    assert!(jit.is_fused());
    assert_eq!(jit.donated(), [0, 1]);
    let mut call_args: Vec<StepArg> = host.iter().cloned().map(StepArg::Host).collect();
    let mut got = jit.call_mpmd_donated(&mut call_args).unwrap().outputs;
    for _ in 0..2 {
        for s in 0..stages {
            call_args[s] = got[s].clone().into_arg();
        }
        got = jit.call_mpmd_donated(&mut call_args).unwrap().outputs;
        for (s, arg) in call_args[..stages].iter().enumerate() {
            assert!(
                matches!(arg, StepArg::Mpmd(m) if m.is_deleted()),
                "weight {s} was not donated"
            );
        }
    }
    let host_out: Vec<_> = got
        .iter()
        .map(|g| StepResult::to_host(g).unwrap())
        .collect();
    assert_close(&host_out, &interpreted_steps(&program, &args, stages, 3));
    // The learning rate's buffer may take the mean loss (a free result of its type), as in
    // `jax.jit`; the data's fits no result and is refused, naming it.
    let lr = MpmdJitOptions {
        donate_argnums: vec![stages],
        ..MpmdJitOptions::default()
    };
    let jit = mpmd_jit_with(&client, &one_group(), &program, &lr).unwrap();
    assert_eq!(jit.donated(), [stages]);
    let data = MpmdJitOptions {
        donate_argnums: vec![stages + 1],
        ..MpmdJitOptions::default()
    };
    let err = mpmd_jit_with(&client, &one_group(), &program, &data)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    let named = format!("argument {} is donated", stages + 1);
    assert!(err.contains(&named), "{err}");
    // Two groups run the pipeline.
    assert!(
        !mpmd_jit(&client, &mesh(2), &step(2, mbs, rows, "1f1b"))
            .unwrap()
            .is_fused()
    );
}

#[test]
fn a_weight_left_on_its_group_by_a_step_is_an_argument_of_a_jit_program() {
    use tessera::jit::{Jit, JitArg, JitError};
    use tessera_mpmd::StepResult;
    use tessera_sharding::NamedSharding;
    let (stages, mbs, rows) = (2, 4, 2);
    let client = Client::cpu(8).unwrap();
    let mesh = MpmdMesh::new(Mesh::auto(&[("stage", 2), ("data", 4)]).unwrap(), "stage").unwrap();
    let jit = mpmd_jit(&client, &mesh, &step(stages, mbs, rows, "1f1b")).unwrap();
    let args: Vec<tessera_mpmd::StepArg> = step_args(stages, mbs, rows)
        .iter()
        .map(|a| tessera_mpmd::StepArg::Host(to_host(a).unwrap()))
        .collect();
    let outputs = jit.call_mpmd(&args).unwrap().outputs;
    let StepResult::Mpmd(weight) = &outputs[1] else {
        panic!("stage 1's weight came back to the host");
    };
    let weight: &tessera_mpmd::MpmdArray = weight;
    let group = weight.mpmd_idxs()[0];
    let want = from_host(
        &weight.first_mpmd_replica().unwrap().to_host().unwrap(),
        DType::F32,
    )
    .unwrap();
    let double = trace(&[f32(weight.shape())], |a| vec![&a[0] * 2.0]).unwrap();
    let on = |g: usize| weight.mpmd_sharding().group_sharding(g).unwrap();
    let compiled = Jit::new(double.clone(), vec![on(group)], vec![on(group)])
        .unwrap()
        .lower()
        .unwrap()
        .compile(&client)
        .unwrap();
    let out = compiled.call_with(&[JitArg::from(weight)]).unwrap();
    let got = from_host(&out[0].to_host().unwrap(), DType::F32).unwrap();
    let doubled: Vec<f64> = want.to_vec().iter().map(|w| w * 2.0).collect();
    assert_eq!(got.to_vec(), doubled);
    // Compiled for the whole array over its groups, it takes the global view.
    let global: NamedSharding = weight.mpmd_sharding().sharding().unwrap();
    let compiled = Jit::new(double.clone(), vec![global.clone()], vec![global])
        .unwrap()
        .lower()
        .unwrap()
        .compile(&client)
        .unwrap();
    let out = compiled.call_with(&[weight.into()]).unwrap();
    let got = from_host(&out[0].to_host().unwrap(), DType::F32).unwrap();
    assert_eq!(got.to_vec(), doubled);
    // Compiled for the other group's devices, it is refused with the reshard hint.
    let other = 1 - group;
    let compiled = Jit::new(double, vec![on(other)], vec![on(other)])
        .unwrap()
        .lower()
        .unwrap()
        .compile(&client)
        .unwrap();
    let err = compiled.call_with(&[weight.into()]).unwrap_err();
    assert!(matches!(err, JitError::Layout { index: 0, .. }), "{err}");
}

#[test]
fn compiler_options_reach_every_program_of_a_step() {
    use tessera_mpmd::Fusion;
    use tessera_pjrt::OptionOverride;
    let (stages, mbs, rows) = (2, 4, 2);
    let client = Client::cpu(8).unwrap();
    let cases = [
        (Fusion::Auto, one_group(), "interleaved-1f1b"),
        (Fusion::Never, mesh(stages), "1f1b"),
    ];
    for (fusion, mesh, schedule) in cases {
        let program = step(stages, mbs, rows, schedule);
        let dump = std::env::temp_dir().join(format!(
            "tessera-mpmd-dump-{fusion:?}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dump);
        let mut options = MpmdJitOptions {
            fusion,
            ..MpmdJitOptions::default()
        };
        options.compiler_options.insert(
            "xla_dump_to".into(),
            OptionOverride::String(dump.to_string_lossy().into_owned()),
        );
        let jit = mpmd_jit_with(&client, &mesh, &program, &options).unwrap();
        let dumped: Vec<String> = std::fs::read_dir(&dump)
            .unwrap_or_else(|e| panic!("XLA wrote nothing to {}: {e}", dump.display()))
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".txt") && n.contains("after_optimizations"))
            .collect();
        // One program fused; else the stages' tasks and the update pieces.
        let least = if jit.is_fused() { 1 } else { 2 * stages };
        assert!(dumped.len() >= least, "{fusion:?}: {dumped:?}");
        std::fs::remove_dir_all(&dump).unwrap();
        options.compiler_options.clear();
        options
            .compiler_options
            .insert("xla_no_such_option".into(), OptionOverride::Bool(true));
        let err = mpmd_jit_with(&client, &mesh, &program, &options)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("xla_no_such_option"), "{fusion:?}: {err}");
    }
}

/// `eval(w_0..w_{S-1}, xs, ys) -> mean loss`: a forward-only `treduce` (its body the loss, no
/// `value_and_grad_call`) over `mbs` micro-batches.
fn eval_step(kind: Values, stages: usize, mbs: i64, rows: i64, schedule: &str) -> ClosedJaxpr {
    let loss = loss_of(kind, stages, rows);
    let mut avals: Vec<ShapedArray> = (0..stages).map(|_| f32(&[WIDTH, WIDTH])).collect();
    avals.push(f32(&[mbs, rows, WIDTH]));
    avals.push(f32(&[mbs, rows, WIDTH]));
    trace(&avals, |a| {
        let weights: Vec<&_> = a[..stages].iter().collect();
        let xs = [&a[stages], &a[stages + 1]];
        let outs = treduce(&weights, &xs, 0, schedule, &[], |w, mb| {
            let mut args = vec![&mb[0]];
            args.extend(w.iter());
            args.push(&mb[1]);
            tessera_ir::trace::call_closed(&loss, &args)
        });
        vec![outs[0].mean(&[0])]
    })
    .unwrap()
}

#[test]
fn a_forward_only_treduce_runs_the_forwards_pipelined_on_the_training_groups() {
    use tessera_mpmd::{StepArg, StepResult};
    let rows = 2;
    // (model, stages, groups, training schedule, eval micro-batches): the eval's micro-batch
    // count need not suit the training schedule (interleaved 1F1B, 3 micro-batches).
    let cases = [
        (Values::Chain, 2, 2, "1f1b", 4),
        (Values::Chain, 4, 2, "interleaved-1f1b", 3),
        (Values::Skips, 4, 4, "gpipe", 5),
        (Values::Tied, 2, 2, "1f1b", 2),
    ];
    for (kind, stages, groups, schedule, mbs) in cases {
        let client = Client::cpu(8).unwrap();
        let mesh = MpmdMesh::new(
            Mesh::auto(&[("stage", groups), ("data", 8 / groups)]).unwrap(),
            "stage",
        )
        .unwrap();
        // A training step leaves the weights on their groups.
        let train = step_of(kind, None, stages, 4, rows, schedule);
        let train_jit = mpmd_jit(&client, &mesh, &train).unwrap();
        let train_args = step_args(stages, 4, rows);
        let host: Vec<StepArg> = train_args
            .iter()
            .map(|a| StepArg::Host(to_host(a).unwrap()))
            .collect();
        let trained = train_jit.call_mpmd(&host).unwrap().outputs;
        let weights: Vec<Array> = eval_closed(&train, &train_args).unwrap()[..stages].to_vec();
        // The eval, forward only, on those weights where they are.
        let program = eval_step(kind, stages, mbs, rows, schedule);
        let jit = mpmd_jit(&client, &mesh, &program).unwrap();
        assert!(jit.pipeline().is_forward_only());
        let (xs, ys) = (
            values(&[mbs, rows, WIDTH], 30.0),
            values(&[mbs, rows, WIDTH], 40.0),
        );
        let mut args: Vec<StepArg> = trained[..stages]
            .iter()
            .cloned()
            .map(StepResult::into_arg)
            .collect();
        args.push(StepArg::Host(to_host(&xs).unwrap()));
        args.push(StepArg::Host(to_host(&ys).unwrap()));
        let run = jit.call_mpmd(&args).unwrap();
        let mut interp_args = weights;
        interp_args.extend([xs, ys]);
        let want = eval_closed(&program, &interp_args).unwrap();
        let got: Vec<_> = run.outputs.iter().map(|o| o.to_host().unwrap()).collect();
        assert_close(&got, &want);
        assert_eq!(run.losses.len(), mbs as usize);
        // Only forwards ran, each group its stages' in the plan's order; the weights are still
        // live on their groups (not donated).
        let plan = jit.pipeline().schedule_plan();
        assert_eq!(run.timings.tasks.len(), stages * mbs as usize);
        assert!(run.timings.tasks.iter().all(|t| t.name.starts_with("F ")));
        for (g, list) in plan.actors.iter().enumerate() {
            for a in list {
                let stage = a.tasks()[0].stage as usize;
                assert_eq!(jit.pipeline().group_of_stage(stage), Some(g));
            }
        }
        for (s, arg) in args.iter().take(stages).enumerate() {
            let StepArg::Mpmd(m) = arg else {
                panic!("weight {s} is not on the groups");
            };
            assert!(!m.is_deleted(), "{schedule}: weight {s} was deleted");
        }
    }
}
