//! The JSON report: parameters, statistics, per-actor action lists and their spans.

use serde::Serialize;

use crate::schedule::Plan;
use crate::simulate::{Costs, Simulation};
use crate::task::Action;
use crate::validate::Span;

/// Everything `tessera schedule --json` prints.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report<'a> {
    /// The schedule's name.
    pub schedule: &'a str,
    /// The number of stages.
    pub stages: u32,
    /// The number of actors (MPMD groups).
    pub mpmd_dim: u32,
    /// The number of microbatches.
    pub microbatches: u32,
    /// `actor_of_stage[s]`: the actor that runs stage `s`.
    pub actor_of_stage: Vec<u32>,
    /// The costs simulated.
    pub costs: &'a Costs,
    /// When the last action ends.
    pub makespan: f64,
    /// Total idle time over actors × makespan.
    pub bubble_ratio: f64,
    /// Each actor's idle time.
    pub idle: &'a [f64],
    /// Each actor's peak live activations.
    pub peak_activations: &'a [u32],
    /// Each actor's actions, in order.
    pub actors: &'a [Vec<Action>],
    /// `spans[a][i]`: when `actors[a][i]` runs.
    pub spans: &'a [Vec<Span>],
}

impl<'a> Report<'a> {
    /// The report of `plan` simulated with `costs` as `sim`.
    pub fn new(plan: &'a Plan, costs: &'a Costs, sim: &'a Simulation) -> Report<'a> {
        Report {
            schedule: &plan.name,
            stages: plan.num_stages,
            mpmd_dim: plan.num_actors(),
            microbatches: plan.num_microbatches,
            actor_of_stage: (0..plan.num_stages)
                .filter_map(|s| plan.placement.actor(s))
                .collect(),
            costs,
            makespan: sim.makespan,
            bubble_ratio: sim.bubble_ratio,
            idle: &sim.idle,
            peak_activations: &sim.peak_activations,
            actors: &plan.actors,
            spans: &sim.spans,
        }
    }
}

/// The report as pretty-printed JSON.
pub fn json(plan: &Plan, costs: &Costs, sim: &Simulation) -> String {
    serde_json::to_string_pretty(&Report::new(plan, costs, sim))
        .expect("a report always serialises")
}
