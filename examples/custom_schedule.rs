//! Your own pipeline schedule, end to end: `cargo run -p tessera-examples --example
//! custom_schedule` (and `cargo test -p tessera-examples --example custom_schedule`, which
//! `cargo xtask test` runs).
//!
//! `LifoDrain` is written with the public `Schedule` trait: every stage runs all its forwards,
//! then its backwards last micro-batch first, the last stage fusing its final forward with the
//! backward that follows it. No built-in schedule makes this plan (checked below). The example
//! validates and draws it, then trains a 4-stage model through `mpmd_jit_with` over 4 MPMD
//! groups of 2 CPU devices, checking every step against the same step unpipelined under `jit`.

use tessera::ir::trace::{trace, treduce, value_and_grad_call};
use tessera::ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera::jit::run_on_device;
use tessera::mpmd::{MpmdJitOptions, MpmdMesh, mpmd_jit_with};
use tessera::pjrt::Client;
use tessera::schedule::{
    Action, Costs, Placement, Registry, Schedule, ScheduleError, ScheduleParams, Task, render,
    simulate, validate,
};
use tessera::sharding::Mesh;

const STAGES: usize = 4;
const MICRO_BATCHES: i64 = 8;
const ROWS: i64 = 4;
const WIDTH: i64 = 8;
const STEPS: usize = 3;

/// All forwards, then the backwards in reverse micro-batch order (last in, first out).
struct LifoDrain {
    stages: u32,
}

impl Schedule for LifoDrain {
    fn name(&self) -> String {
        "lifo-drain".into()
    }

    fn placement(&self) -> Placement {
        Placement::plain(self.stages)
    }

    fn actions(&self, m: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        let last = self.stages - 1;
        Ok((0..self.stages)
            .map(|s| {
                let mut list: Vec<Action> = (0..m).map(|mb| Task::fwd(s, mb).into()).collect();
                let mut backwards = (0..m).rev();
                if s == last {
                    list.pop();
                    backwards.next();
                    list.push(Action::fuse(Task::fwd(s, m - 1), Task::bwd(s, m - 1)));
                }
                list.extend(backwards.map(|mb| Action::from(Task::bwd(s, mb))));
                list
            })
            .collect())
    }
}

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

fn values(shape: &[i64], seed: f64, scale: f64) -> anyhow::Result<Array> {
    let n: i64 = shape.iter().product();
    let data = (0..n)
        .map(|i| ((i as f64 + 1.0) * 0.618 + seed).sin() * scale)
        .collect();
    Ok(Array::new(DType::F32, shape, data)?)
}

/// `step(w_0..w_3, lr, xs, ys) -> (w'_0..w'_3, mean loss)`: a `treduce` over micro-batches of a
/// 4-layer tanh network's squared error (one stage per layer), then SGD.
fn step(schedule: &str) -> anyhow::Result<ClosedJaxpr> {
    let mut avals = vec![f32(&[ROWS, WIDTH])];
    avals.extend((0..STAGES).map(|_| f32(&[WIDTH, WIDTH])));
    avals.push(f32(&[ROWS, WIDTH]));
    let loss = trace(&avals, |a| {
        let mut h = a[0].clone();
        for s in 0..STAGES {
            if s > 0 {
                h = h.enter_stage(s as i64);
            }
            h = h.matmul(&a[1 + s]).tanh();
        }
        vec![(&h - &a[STAGES + 1]).integer_pow(2).mean(&[0, 1])]
    })?;
    let mut avals: Vec<ShapedArray> = (0..STAGES).map(|_| f32(&[WIDTH, WIDTH])).collect();
    avals.push(f32(&[]));
    avals.push(f32(&[MICRO_BATCHES, ROWS, WIDTH]));
    avals.push(f32(&[MICRO_BATCHES, ROWS, WIDTH]));
    let argnums: Vec<usize> = (1..=STAGES).collect();
    Ok(trace(&avals, |a| {
        let weights: Vec<&_> = a[..STAGES].iter().collect();
        let data = [&a[STAGES + 1], &a[STAGES + 2]];
        let outs = treduce(&weights, &data, 0, schedule, &[], |w, mb| {
            let mut args = vec![&mb[0]];
            args.extend(w.iter());
            args.push(&mb[1]);
            value_and_grad_call(&loss, &argnums, &args)
        });
        let scale = &a[STAGES] / MICRO_BATCHES as f64;
        let mut results: Vec<_> = (0..STAGES)
            .map(|s| &a[s] - &(&scale * &outs[1 + s]))
            .collect();
        results.push(outs[0].mean(&[0]));
        results
    })?)
}

/// Validates and draws the schedule, and checks that no built-in makes the same plan.
fn check_schedule(schedule: &LifoDrain) -> anyhow::Result<()> {
    let plan = schedule.plan(MICRO_BATCHES as u32)?;
    validate(&plan)?;
    let sim = simulate(&plan, &Costs::uniform(STAGES as u32, 1.0, 2.0, 0.0))?;
    println!("{}", render::ascii(&plan, &sim));
    let params = ScheduleParams {
        stages: STAGES as u32,
        mpmd_dim: STAGES as u32,
    };
    let builtins = Registry::with_builtins();
    for name in builtins.names() {
        let Ok(builtin) = builtins.create(&name, params) else {
            continue;
        };
        if let Ok(other) = builtin.plan(MICRO_BATCHES as u32) {
            anyhow::ensure!(
                other.actors != plan.actors,
                "the built-in '{name}' makes the same plan"
            );
        }
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let schedule = LifoDrain {
        stages: STAGES as u32,
    };
    check_schedule(&schedule)?;
    // The step names its schedule; the options hand `mpmd_jit` the object behind the name.
    let program = step("lifo-drain")?;
    let client = Client::cpu(8)?;
    let mesh = MpmdMesh::new(
        Mesh::auto(&[("stage", STAGES as i64), ("data", 2)])?,
        "stage",
    )?;
    let jit = mpmd_jit_with(
        &client,
        &mesh,
        &program,
        &MpmdJitOptions::with_schedule(schedule),
    )?;
    let mut weights: Vec<Array> = (0..STAGES)
        .map(|s| values(&[WIDTH, WIDTH], s as f64, 0.5))
        .collect::<anyhow::Result<_>>()?;
    let data = [
        Array::scalar(DType::F32, 0.5),
        values(&[MICRO_BATCHES, ROWS, WIDTH], 3.0, 1.0)?,
        values(&[MICRO_BATCHES, ROWS, WIDTH], 7.0, 0.8)?,
    ];
    for n in 1..=STEPS {
        let args: Vec<Array> = weights.iter().chain(&data).cloned().collect();
        let want = run_on_device(&client, &program, &args, 0)?;
        // Host arrays are the interpreter's arrays: they go in and come out as they are.
        let got = jit.call(&args)?.outputs;
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
                anyhow::ensure!(
                    (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                    "step {n}, result {k}: pipelined {a} but unpipelined {b}"
                );
            }
        }
        let loss = got[STAGES].to_vec()[0];
        println!("step {n}  loss {loss:.6}  (equal to the unpipelined step)");
        weights = got[..STAGES].to_vec();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn trains_through_mpmd_jit_like_the_unpipelined_step() -> anyhow::Result<()> {
        super::main()
    }
}
