//! Typed errors: bad schedule parameters, invalid schedules, bad costs.
//!
//! Every message says what was wrong and what would be accepted.

use thiserror::Error;

use crate::task::{Action, ActorId, Microbatch, StageId, Task};

/// Parameters a schedule cannot be built with.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ScheduleError {
    /// Zero stages.
    #[error("{schedule}: needs at least 1 stage (got 0)")]
    NoStages {
        /// The schedule.
        schedule: String,
    },
    /// Zero actors.
    #[error("{schedule}: needs an MPMD size of at least 1 (got 0)")]
    NoActors {
        /// The schedule.
        schedule: String,
    },
    /// The stages cannot be spread evenly over the actors.
    #[error(
        "{stages} stages are not a multiple of the MPMD size {mpmd_dim}: pick a stage count that \
         is a multiple of the MPMD size (e.g. {})",
        mpmd_dim.max(&1) * (stages / mpmd_dim.max(&1) + 1)
    )]
    StagesNotMultiple {
        /// The stage count.
        stages: u32,
        /// The MPMD size (number of actors).
        mpmd_dim: u32,
    },
    /// A schedule with one stage per actor was given another MPMD size.
    #[error(
        "{schedule}: runs one stage per actor, so the MPMD size must equal the stage count \
         {stages} (got {mpmd_dim}); use an interleaved schedule for several stages per actor"
    )]
    OneStagePerActor {
        /// The schedule.
        schedule: String,
        /// The stage count.
        stages: u32,
        /// The MPMD size given.
        mpmd_dim: u32,
    },
    /// DualPipeV needs exactly two stages per actor.
    #[error(
        "dualpipev: needs exactly 2 stages per actor, i.e. stages = 2 × mpmd_dim (got {stages} \
         stages for mpmd_dim {mpmd_dim}; use --stages {} or --mpmd-dim {})",
        2 * mpmd_dim, stages / 2
    )]
    DualPipeVStages {
        /// The stage count.
        stages: u32,
        /// The MPMD size.
        mpmd_dim: u32,
    },
    /// Too few microbatches for the schedule.
    #[error("{schedule}: needs at least {needed} microbatches ({why}), got {got}")]
    TooFewMicrobatches {
        /// The schedule.
        schedule: String,
        /// The least accepted count.
        needed: u32,
        /// The count given.
        got: u32,
        /// Where the bound comes from.
        why: String,
    },
    /// A placement table leaves an actor without a stage.
    #[error("placement: actor {actor} runs no stage; number the actors 0.. without gaps")]
    ActorWithoutStage {
        /// The actor.
        actor: ActorId,
    },
    /// A name the registry does not know.
    #[error("unknown schedule {name:?}; known schedules: {known}")]
    UnknownSchedule {
        /// The name asked for.
        name: String,
        /// The names the registry knows, comma-separated.
        known: String,
    },
    /// Any other reason a user-written schedule rejects its parameters.
    #[error("{schedule}: {reason}")]
    Invalid {
        /// The schedule.
        schedule: String,
        /// What is wrong and what would be accepted.
        reason: String,
    },
}

/// Where an action sits: actor and position in that actor's list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    /// The actor.
    pub actor: ActorId,
    /// The index of the action in the actor's list.
    pub index: usize,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "actor {} action #{}", self.actor, self.index)
    }
}

/// Why a schedule (a plan of per-actor task lists) is not valid.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ValidationError {
    /// The plan has a different number of task lists than its placement has actors.
    #[error(
        "the plan has {lists} task lists but its placement has {actors} actors; give one list per actor"
    )]
    ActorCount {
        /// Task lists given.
        lists: usize,
        /// Actors in the placement.
        actors: u32,
    },
    /// The plan's stage count differs from its placement's.
    #[error("the plan says {plan} stages but its placement places {placement}; make them agree")]
    StageCount {
        /// The plan's `num_stages`.
        plan: u32,
        /// Stages in the placement.
        placement: u32,
    },
    /// A fused action with no task.
    #[error("{at}: an empty fused action; a fused action needs at least one task")]
    EmptyAction {
        /// Where.
        at: Position,
    },
    /// A task names a stage or microbatch outside the plan.
    #[error("{at}: {task} is out of range ({stages} stages, {microbatches} microbatches)")]
    OutOfRange {
        /// Where.
        at: Position,
        /// The task.
        task: Task,
        /// Stages in the plan.
        stages: u32,
        /// Microbatches in the plan.
        microbatches: u32,
    },
    /// A task placed on an actor that does not run its stage.
    #[error("{at}: {task} is on actor {} but the placement puts stage {} on actor {expected}", at.actor, task.stage)]
    WrongActor {
        /// Where.
        at: Position,
        /// The task.
        task: Task,
        /// The actor the placement names.
        expected: ActorId,
    },
    /// The same work appears twice (a `Bwd` covers both `BwdI` and `BwdW`).
    #[error(
        "{task} at {at} repeats work already done by {first} at {first_at}; every task must appear exactly once"
    )]
    Duplicate {
        /// The second occurrence.
        task: Task,
        /// Where.
        at: Position,
        /// The first occurrence.
        first: Task,
        /// Where the first one is.
        first_at: Position,
    },
    /// Work that no task covers.
    #[error("the {what} of stage {stage} on microbatch {mb} is never run; add {hint}")]
    Missing {
        /// `forward`, `input gradient` or `weight gradient`.
        what: &'static str,
        /// The stage.
        stage: StageId,
        /// The microbatch.
        mb: Microbatch,
        /// The task(s) that would cover it.
        hint: String,
    },
    /// A backward task in a forward-only plan ([`crate::forward`]).
    #[error("{at}: {task} is a backward, but the plan runs forwards only; drop it")]
    BackwardInForwardOnly {
        /// Where.
        at: Position,
        /// The task.
        task: Task,
    },
    /// Inside a fused action, a task comes before one it depends on.
    #[error(
        "{at}: in {action}, {task} needs {needs}, which comes later in the same fused action; reorder the fused tasks"
    )]
    FusedOrder {
        /// Where.
        at: Position,
        /// The fused action.
        action: Action,
        /// The task that waits.
        task: Task,
        /// What it waits for.
        needs: String,
    },
    /// Running every actor's list in order with blocking receives never finishes.
    #[error("deadlock: running each actor's list in order, these actions wait forever:\n{}", format_blocked(.blocked))]
    Deadlock {
        /// Each stuck actor's next action and what it waits for.
        blocked: Vec<Blocked>,
    },
}

/// An actor stuck in a deadlock: its next action and the first thing that action waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// Where the stuck action is.
    pub at: Position,
    /// The stuck action.
    pub action: Action,
    /// What it waits for, and where that is scheduled.
    pub waits_for: String,
}

fn format_blocked(blocked: &[Blocked]) -> String {
    let lines: Vec<String> = blocked
        .iter()
        .map(|b| format!("  {}: {} waits for {}", b.at, b.action, b.waits_for))
        .collect();
    lines.join("\n")
}

/// Costs a simulation cannot use.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum CostError {
    /// A per-stage list has the wrong length.
    #[error(
        "costs: {what} has {got} entries but the schedule has {stages} stages; give one per stage"
    )]
    Length {
        /// Which list.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The stage count.
        stages: u32,
    },
    /// A negative or non-finite cost.
    #[error("costs: {what} = {value} for stage {stage}; costs must be finite and ≥ 0")]
    Negative {
        /// Which cost.
        what: &'static str,
        /// The stage.
        stage: StageId,
        /// The value.
        value: f64,
    },
    /// A fused action's factor that is not a positive finite number.
    #[error(
        "costs: the {what} factor is {value}; a fused action's factor must be finite, ≥ 0 for the chain and > 0 apart (1: the sum of its tasks)"
    )]
    FusedFactor {
        /// Which factor.
        what: &'static str,
        /// The value.
        value: f64,
    },
    /// The weight-gradient part is larger than the whole backward.
    #[error(
        "costs: W = {w} exceeds B = {b} for stage {stage}; W is the weight-gradient part of B, so W ≤ B"
    )]
    WeightExceedsBackward {
        /// The stage.
        stage: StageId,
        /// The whole backward.
        b: f64,
        /// The weight-gradient part.
        w: f64,
    },
    /// A negative or non-finite transfer latency.
    #[error("costs: transfer latency {0} must be finite and ≥ 0")]
    Latency(f64),
    /// `F,B,W` text that does not parse.
    #[error("costs: {0:?} is not F,B,W (three numbers, e.g. 1,2,1) or F,B (W = 0)")]
    Parse(String),
}

/// Why a simulation could not run.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum SimulateError {
    /// The schedule is not valid.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// The costs are not usable.
    #[error(transparent)]
    Costs(#[from] CostError),
}
