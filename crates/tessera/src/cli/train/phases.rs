//! Where a training step's time goes: the host's batch, the parts of the pipelined call
//! (`tessera_mpmd::StepPhases`: arguments, micro-batches, tasks, the rest of the loop, results,
//! update), reading the loss back, and whatever remains, so that the parts add up to the step's
//! wall time. Reported for the median step (`step_phases_ms` in `--json`, and a line at the end).

use tessera_mpmd::StepPhases;

use crate::cli::out::outln;

/// One step's parts, in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepTime {
    /// From the start of the step to the loss on the host.
    pub wall_ms: f64,
    /// The step's batch and learning rate: made, and placed where the step takes them, on
    /// another thread while the step before ran (made here for the first step); this is taking
    /// them, and waiting at the end of the step for the next step's to be ready.
    pub batch_ms: f64,
    /// The pipelined call's parts.
    pub call: StepPhases,
    /// Reading the loss back to the host.
    pub loss_ms: f64,
}

impl StepTime {
    /// The time no part accounts for (the call's own bookkeeping, the host's scheduling).
    pub fn other_ms(&self) -> f64 {
        self.wall_ms - self.batch_ms - self.call.total_ms() - self.loss_ms
    }

    /// The parts as `--json` reports them.
    pub fn to_json(self) -> serde_json::Value {
        let c = self.call;
        serde_json::json!({
            "wall": self.wall_ms,
            "batch": self.batch_ms,
            "arguments": c.arguments_ms,
            "microbatches": c.microbatches_ms,
            "tasks": c.tasks_ms,
            "pipeline_rest": c.pipeline_rest_ms,
            "results": c.results_ms,
            "update": c.update_ms,
            "release": c.release_ms,
            "loss": self.loss_ms,
            "other": self.other_ms(),
        })
    }
}

/// The step of median wall time, leaving out the first of several (it warms the caches).
pub fn median_step(steps: &[StepTime]) -> Option<StepTime> {
    let mut settled: Vec<StepTime> = steps
        .iter()
        .skip(usize::from(steps.len() > 1))
        .copied()
        .collect();
    settled.sort_by(|a, b| a.wall_ms.total_cmp(&b.wall_ms));
    settled.get(settled.len() / 2).copied()
}

/// Prints the median step's parts on one line.
pub fn print(step: &StepTime) -> anyhow::Result<()> {
    let c = step.call;
    outln!(
        "step time (median step): {:.2} ms = batch {:.2} + arguments {:.2} + micro-batches {:.2} \
         + tasks {:.2} + rest of the loop {:.2} + results {:.2} + update {:.2} + release {:.2} + \
         loss {:.2} + other {:.2}",
        step.wall_ms,
        step.batch_ms,
        c.arguments_ms,
        c.microbatches_ms,
        c.tasks_ms,
        c.pipeline_rest_ms,
        c.results_ms,
        c.update_ms,
        c.release_ms,
        step.loss_ms,
        step.other_ms()
    )?;
    Ok(())
}
