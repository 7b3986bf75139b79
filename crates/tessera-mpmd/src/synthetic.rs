//! Synthetic execution: the runtime's own overhead measured without XLA. A schedule's plan runs
//! through the real pipeline plan, workers and transport code, with an executor whose actions
//! sleep for their `F`/`B`/`W` costs (in time units) and a transport that delivers each value a
//! given latency after it is sent; the measured makespan is compared with the simulator's for
//! the same costs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera_schedule::{Costs, Plan as SchedulePlan, simulate};

use crate::driver::DriverError;
use crate::pipeline::{StageShape, build_plan};
use crate::runtime::{BoxError, Executor, LocalTransport, RunOptions, TaskSpec, Timings, run};

/// An executor whose tasks sleep for their payload, a duration.
#[derive(Debug, Clone, Copy, Default)]
pub struct SleepExecutor;

impl Executor<Duration, ()> for SleepExecutor {
    fn run(&self, task: &TaskSpec<Duration>, _inputs: &[&()]) -> Result<Vec<()>, BoxError> {
        sleep_until(Instant::now() + task.payload);
        Ok(vec![(); task.outputs.len()])
    }
}

/// How long before its deadline a task stops sleeping and yields instead: the operating
/// system wakes a sleeping thread late (about 0.1 ms), which would be charged to the runtime.
const SPIN: Duration = Duration::from_micros(250);

/// Sleeps until `deadline`: a plain sleep until [`SPIN`] before it, then yields until it.
fn sleep_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > SPIN {
            std::thread::sleep(left - SPIN);
        } else {
            std::thread::yield_now();
        }
    }
}

/// What a synthetic run measured.
#[derive(Debug, Clone)]
pub struct SyntheticRun {
    /// From the first task's start to the last task's end, in milliseconds.
    pub measured_makespan_ms: f64,
    /// The simulator's makespan for the same costs, in milliseconds.
    pub simulated_makespan_ms: f64,
    /// When each task ran.
    pub timings: Timings,
}

/// Runs `plan` with tasks sleeping `costs` time units of `unit` each (a fused action the sum of
/// its tasks) and values arriving `costs.latency` units after they are sent.
pub fn run_synthetic(
    plan: &SchedulePlan,
    costs: &Costs,
    unit: Duration,
    options: &RunOptions,
) -> Result<SyntheticRun, DriverError> {
    let simulated = simulate(plan, costs).map_err(|e| DriverError::Config(e.to_string()))?;
    let n = plan.num_stages;
    let shapes: Vec<StageShape> = (0..n)
        .map(|s| StageShape::chain(s, n, 1, 1, 1, 1))
        .collect();
    let built = build_plan(plan, &shapes, |sig| {
        let units: f64 = sig.parts.iter().map(|p| costs.task(&p.task)).sum();
        unit.mul_f64(units)
    })
    .map_err(|e| DriverError::Config(e.to_string()))?;
    let initial = built
        .inputs
        .iter()
        .map(|(key, group)| (built.ids[key], *group, ()))
        .collect();
    let latency = unit.mul_f64(costs.latency);
    let out = run(
        Arc::new(built.plan),
        initial,
        Arc::new(SleepExecutor),
        Arc::new(LocalTransport::cloning().with_latency(latency)),
        options,
    )?;
    let start = out
        .timings
        .tasks
        .iter()
        .map(|t| t.start_us)
        .fold(f64::INFINITY, f64::min);
    let end = out
        .timings
        .tasks
        .iter()
        .map(|t| t.start_us + t.duration_us)
        .fold(0.0, f64::max);
    let unit_ms = unit.as_secs_f64() * 1000.0;
    Ok(SyntheticRun {
        measured_makespan_ms: (end - start) / 1000.0,
        simulated_makespan_ms: simulated.makespan * unit_ms,
        timings: out.timings,
    })
}
