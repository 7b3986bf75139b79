//! A discrete-event simulator: per-stage costs in, timeline and statistics out.
//!
//! Costs follow the notation of DeepSeek's DualPipe table: per stage, `F` is the forward, `B`
//! the whole backward and `W` its weight-gradient part, so `BwdI` costs `B - W`, `BwdW` costs
//! `W` and `Bwd` costs `B`. Where a split backward costs more in all than the whole one (two
//! programs instead of one), [`Costs::split`] gives `I + W`, and `BwdI` costs `I + W - W`
//! while a whole `Bwd` of the same plan still costs `B`. A fused action costs the sum of its
//! tasks with measured factors (one program instead of several): a forward fused with its own
//! backward pays [`Costs::fused_chain`] of itself, both parts of a split backward in one
//! program cost the whole backward, and independent work in one program (other stages or
//! micro-batches) costs [`Costs::fused_apart`] of its sum. A value that crosses actors arrives `latency` after its producing
//! action ends.
//!
//! Statistics: the makespan; each actor's idle time (makespan minus busy time) and the bubble
//! ratio (total idle over actors × makespan); each actor's peak live activations, counting a
//! stage-microbatch live from the start of its forward to the end of its backward (the end of
//! `BwdW` when split).

use serde::Serialize;

use crate::error::{CostError, SimulateError};
use crate::schedule::Plan;
use crate::task::{Action, Task, TaskKind};
use crate::validate::{Index, Span, run};

/// Per-stage task costs and the transfer latency.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Costs {
    /// `F` per stage: the forward.
    pub forward: Vec<f64>,
    /// `B` per stage: the whole backward.
    pub backward: Vec<f64>,
    /// `W` per stage: the weight-gradient part of `B`.
    pub weight: Vec<f64>,
    /// `I + W` per stage: what a split backward costs in all, its input part (`BwdI`) this
    /// less `W`. Empty: a split backward costs the whole backward `B`.
    pub split: Vec<f64>,
    /// Time for a value to go from one actor to another.
    pub latency: f64,
    /// The share of its forward that a fused action of one stage's forward and backward on one
    /// micro-batch (a chain, e.g. the last stage's) still pays: in one program the two share
    /// work (the residuals never leave it, and XLA fuses across the two), measured (1: the
    /// sum).
    pub fused_chain: f64,
    /// What a fused action of tasks on different stages or micro-batches (independent work in
    /// one program, as DualPipeV's forward-backward pairs) costs, as a fraction of its tasks'
    /// sum (1: the sum).
    pub fused_apart: f64,
    /// Time an actor spends starting each action (dispatch), added to every action's cost.
    pub dispatch: f64,
}

impl Costs {
    /// The same `F`, `B`, `W` for each of `stages` stages, and no transfer latency.
    pub fn uniform(stages: u32, f: f64, b: f64, w: f64) -> Costs {
        let n = stages as usize;
        Costs {
            forward: vec![f; n],
            backward: vec![b; n],
            weight: vec![w; n],
            split: Vec::new(),
            latency: 0.0,
            fused_chain: 1.0,
            fused_apart: 1.0,
            dispatch: 0.0,
        }
    }

    /// Parses `F,B,W` (or `F,B`, meaning `W = 0`) as uniform costs for `stages` stages.
    pub fn parse(text: &str, stages: u32) -> Result<Costs, CostError> {
        let parsed: Result<Vec<f64>, _> =
            text.split(',').map(|x| x.trim().parse::<f64>()).collect();
        match parsed.as_deref() {
            Ok([f, b]) => Ok(Costs::uniform(stages, *f, *b, 0.0)),
            Ok([f, b, w]) => Ok(Costs::uniform(stages, *f, *b, *w)),
            _ => Err(CostError::Parse(text.to_owned())),
        }
    }

    /// With transfer latency `latency`.
    pub fn with_latency(mut self, latency: f64) -> Costs {
        self.latency = latency;
        self
    }

    /// Checks lengths and signs against a plan of `stages` stages.
    pub fn check(&self, stages: u32) -> Result<(), CostError> {
        let split = (!self.split.is_empty()).then_some(("I + W", &self.split));
        for (what, list) in [
            ("F", &self.forward),
            ("B", &self.backward),
            ("W", &self.weight),
        ]
        .into_iter()
        .chain(split)
        {
            if list.len() != stages as usize {
                return Err(CostError::Length {
                    what,
                    got: list.len(),
                    stages,
                });
            }
            if let Some((stage, &value)) = list
                .iter()
                .enumerate()
                .find(|(_, v)| !(v.is_finite() && **v >= 0.0))
            {
                return Err(CostError::Negative {
                    what,
                    stage: stage as u32,
                    value,
                });
            }
        }
        if let Some(s) = (0..stages as usize).find(|&s| self.weight[s] > self.split_total(s)) {
            return Err(CostError::WeightExceedsBackward {
                stage: s as u32,
                b: self.split_total(s),
                w: self.weight[s],
            });
        }
        if !(self.latency.is_finite() && self.latency >= 0.0) {
            return Err(CostError::Latency(self.latency));
        }
        if !(self.fused_chain.is_finite() && self.fused_chain >= 0.0) {
            return Err(CostError::FusedFactor {
                what: "fused chain",
                value: self.fused_chain,
            });
        }
        if !(self.dispatch.is_finite() && self.dispatch >= 0.0) {
            return Err(CostError::Negative {
                what: "dispatch",
                stage: 0,
                value: self.dispatch,
            });
        }
        if !(self.fused_apart.is_finite() && self.fused_apart > 0.0) {
            return Err(CostError::FusedFactor {
                what: "fused apart",
                value: self.fused_apart,
            });
        }
        Ok(())
    }

    /// The cost of one task.
    pub fn task(&self, task: &Task) -> f64 {
        let s = task.stage as usize;
        match task.kind {
            TaskKind::Fwd => self.forward[s],
            TaskKind::Bwd => self.backward[s],
            TaskKind::BwdI => self.split_total(s) - self.weight[s],
            TaskKind::BwdW => self.weight[s],
        }
    }

    /// What stage `s`'s split backward costs in all: `I + W` where given, else `B`.
    fn split_total(&self, s: usize) -> f64 {
        self.split.get(s).copied().unwrap_or(self.backward[s])
    }

    /// The cost of one action: [`Costs::dispatch`] plus its tasks. A single task costs
    /// [`Costs::task`]. A fused action groups its tasks by stage and micro-batch (chains): a
    /// chain holding both parts of a split backward runs them as one backward (`B`), a forward
    /// chained with its backward pays [`Costs::fused_chain`] of itself, and several chains in
    /// one action cost [`Costs::fused_apart`] of their sum.
    pub fn action(&self, action: &Action) -> f64 {
        self.dispatch + self.fused(action.tasks())
    }

    /// The tasks of one action, without its dispatch.
    fn fused(&self, tasks: &[Task]) -> f64 {
        if let [task] = tasks {
            return self.task(task);
        }
        let mut chains: Vec<Vec<&Task>> = Vec::new();
        for t in tasks {
            match chains
                .iter_mut()
                .find(|c| c[0].stage == t.stage && c[0].mb == t.mb)
            {
                Some(chain) => chain.push(t),
                None => chains.push(vec![t]),
            }
        }
        let apart = match chains.len() > 1 {
            true => self.fused_apart,
            false => 1.0,
        };
        let sum: f64 = chains.iter().map(|c| self.chain(c)).sum();
        sum * apart
    }

    /// One stage's fused tasks on one micro-batch: each at [`Costs::task`], except that a
    /// forward with its backward in the same program pays its share `fused_chain`, and both
    /// parts of a split backward cost one whole backward.
    fn chain(&self, tasks: &[&Task]) -> f64 {
        let has = |k: TaskKind| tasks.iter().any(|t| t.kind == k);
        let whole_split = has(TaskKind::BwdI) && has(TaskKind::BwdW);
        let with_backward = tasks.iter().any(|t| t.kind != TaskKind::Fwd);
        tasks
            .iter()
            .map(|t| match (t.kind, with_backward, whole_split) {
                (TaskKind::Fwd, true, _) => self.task(t) * self.fused_chain,
                (TaskKind::BwdI, _, true) => self.backward[t.stage as usize],
                (TaskKind::BwdW, _, true) => 0.0,
                _ => self.task(t),
            })
            .sum()
    }
}

/// The result of a simulation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Simulation {
    /// When the last action ends.
    pub makespan: f64,
    /// `spans[a][i]`: when actor `a`'s `i`-th action runs.
    pub spans: Vec<Vec<Span>>,
    /// Each actor's busy time.
    pub busy: Vec<f64>,
    /// Each actor's idle time within the makespan.
    pub idle: Vec<f64>,
    /// Total idle time over `actors × makespan`.
    pub bubble_ratio: f64,
    /// Each actor's peak number of live stage-microbatch activations.
    pub peak_activations: Vec<u32>,
}

/// Validates `plan` and simulates it with `costs`.
pub fn simulate(plan: &Plan, costs: &Costs) -> Result<Simulation, SimulateError> {
    costs.check(plan.placement.num_stages())?;
    let index = Index::build(plan)?;
    let spans = run(plan, &index, |a| costs.action(a), costs.latency)?;
    let makespan = spans.iter().flatten().map(|s| s.end).fold(0.0, f64::max);
    let busy: Vec<f64> = plan
        .actors
        .iter()
        .map(|list| list.iter().map(|a| costs.action(a)).sum())
        .collect();
    let idle: Vec<f64> = busy.iter().map(|b| makespan - b).collect();
    let total = makespan * plan.actors.len() as f64;
    let bubble_ratio = if total > 0.0 {
        idle.iter().sum::<f64>() / total
    } else {
        0.0
    };
    let peak_activations = plan.actors.iter().map(|l| peak_live(l)).collect();
    Ok(Simulation {
        makespan,
        spans,
        busy,
        idle,
        bubble_ratio,
        peak_activations,
    })
}

/// The peak number of stage-microbatches whose forward started and whose backward has not ended.
/// An actor runs its actions one after another, so walking its list is walking its time line:
/// an action's forwards acquire before its peak is taken, its backwards release after.
fn peak_live(list: &[Action]) -> u32 {
    let (mut live, mut peak) = (0_i64, 0_i64);
    for action in list {
        let tasks = action.tasks();
        live += tasks.iter().filter(|t| t.kind == TaskKind::Fwd).count() as i64;
        peak = peak.max(live);
        live -= tasks
            .iter()
            .filter(|t| matches!(t.kind, TaskKind::Bwd | TaskKind::BwdW))
            .count() as i64;
    }
    peak as u32
}
