//! The planner's search: from a model's measured costs, the pipeline configurations (stages,
//! boundaries, MPMD groups, devices per group, micro-batches, schedule) ranked by predicted step
//! time, each with its predicted peak bytes per device.
//!
//! For every number of MPMD groups `G` dividing the devices (each group then splits every
//! micro-batch's rows over its `devices / G` devices: data parallelism), every stage count that
//! is a multiple of `G` (up to [`Space::max_stages_per_group`] stages per group), every
//! micro-batch count `m` dividing the batch into rows each device can take, and every schedule
//! of the registry that accepts the shape, the search
//! 1. places the stage boundaries with [`crate::plan::partition`] over the measured part costs
//!    at that micro-batch size per device (if the fastest split does not fit the memory limit,
//!    the fastest that does);
//! 2. predicts the step time with [`crate::simulate()`] from the stages' times: those of the
//!    stage measured as one program where [`RowCosts::stages`] has it ([`crate::stage_costs`]),
//!    else its summed part times (a
//!    stage's forward and backward are the sums of its parts'; a split backward pays the
//!    measured input and weight parts, a whole one the whole backward, also in schedules that
//!    split only some, as DualPipeV), with a hop between groups costing
//!    [`Link::seconds`] of the boundary bytes; with devices sharing [`Space::cores`] host
//!    cores, tasks of different groups running at once share them: with every group busy a
//!    task takes its fair share of the cores times the measured [`RowCosts::contention`], with
//!    two busy as measured with two ([`RowCosts::contention_two`]), and in between as the
//!    cores' throughput interpolated between those two ([`crate::shared`]);
//!    plus the measured time a step spends
//!    outside its tasks ([`RowCosts::step_overhead`]);
//! 3. predicts each group's peak live bytes per device with
//!    [`crate::memory::predict_peak_bytes`] (parameters and their accumulators replicated in a
//!    group; a stage keeps its inputs per micro-batch in flight, as the runtime does; a
//!    backward holds the cotangents it receives and sends; a split backward keeps its parts'
//!    weight residuals) and drops candidates over [`Space::device_memory`].
//!
//! Step times within half a percent rank as ties, fewer bytes first; schedules with the same
//! prediction for a layout fold into one candidate ([`Candidate::same_prediction`]).
//! Tensor-parallel splits inside a group are not searched (no measured costs of the split
//! layers); the search is pure: the costs come from the caller ([`RowCosts`], one per
//! micro-batch size per device and group size), so a Rust user can plan from costs of their
//! own.
//!
//! ```
//! use tessera_schedule::plan::{Part, Profile};
//! use tessera_schedule::search::{Link, RowCosts, Space, search};
//!
//! let part = |f: f64| Part { forward: f, backward: 2.0 * f, activation_bytes: 1000, parameter_bytes: 4000 };
//! let costs = |rows: u32, _data: u32| Some(RowCosts::uniform_bytes(rows, Profile {
//!     embedding: part(0.001 * rows as f64),
//!     layers: vec![part(0.004 * rows as f64); 4],
//!     head: part(0.004 * rows as f64),
//! }));
//! let space = Space { devices: 4, batch: 16, layers: 4, ..Space::default() };
//! let ranked = search(&costs, &space)?;
//! assert!(ranked[0].step_seconds <= ranked[1].step_seconds * 1.005); // ties: fewer bytes first
//! # Ok::<(), tessera_schedule::search::SearchError>(())
//! ```

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::memory::{StageBytes, peak_inflight, predict_peak_bytes};
use crate::plan::{MemoryLimit, PartitionOptions, Profile, partition, stage_loads};
use crate::stage_costs::{LayoutFactors, StageCosts, part_ranges};
use crate::{Costs, Registry, ScheduleParams, Sharing, simulate, simulate_shared};

/// A model's measured costs at one micro-batch size per device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowCosts {
    /// Examples (rows) of one micro-batch on one device.
    pub rows: u32,
    /// Devices of the group the costs were measured on (each running `rows` rows of a
    /// micro-batch split over them); times are the group's, bytes one device's.
    #[serde(default = "one")]
    pub data: u32,
    /// Each part's forward and backward seconds and its activation bytes per micro-batch;
    /// `parameter_bytes` is what the part holds from the start of a step (its parameters and
    /// their initial gradient accumulators).
    pub profile: Profile,
    /// Per part (embedding, each layer, head), the gradient accumulators its first weight
    /// gradient makes.
    pub accumulator_bytes: Vec<u64>,
    /// Per part (embedding, each layer, head), its data inputs of one micro-batch.
    pub data_bytes: Vec<u64>,
    /// Bytes one micro-batch sends across a stage boundary (the hidden state).
    pub boundary_bytes: u64,
    /// Seconds a step spends outside the span of the pipeline's tasks (the optimizer's update,
    /// placing arguments), added to every prediction.
    #[serde(default)]
    pub step_overhead: f64,
    /// Per part, the weight-gradient part of its split backward (`W`), in seconds (empty: the
    /// search's [`Space::weight_fraction`] of the backward).
    #[serde(default)]
    pub weight_seconds: Vec<f64>,
    /// Per part, its split backward's input and weight parts together (`I + W`), in seconds:
    /// what a schedule that splits the backward pays instead of the whole backward (empty: the
    /// whole backward).
    #[serde(default)]
    pub split_seconds: Vec<f64>,
    /// Per part, what a split backward's input part keeps for its weight part, per micro-batch
    /// (empty: 0).
    #[serde(default)]
    pub weight_residual_bytes: Vec<u64>,
    /// A layer's MLP hidden activation for one micro-batch: a layer measured alone hands it
    /// from its split backward's input part to its weight part, a layer followed by another
    /// part of its own stage does not (0: not known).
    #[serde(default)]
    pub layer_hidden_bytes: u64,
    /// How many times longer a task takes, beyond its fair share of the host's cores, while
    /// every group of the run works at once (measured by running the groups' work together;
    /// 1: no contention, or each device has a processor of its own; below 1: the tasks leave
    /// cores idle alone and overlap better than their fair share). See [`crate::shared`].
    #[serde(default = "one_f64")]
    pub contention: f64,
    /// The same with two groups working at once (`None`: not measured, or the run has two
    /// groups); between two and all, the slowdown follows the throughput interpolated between
    /// the two ([`crate::shared`]).
    #[serde(default)]
    pub contention_two: Option<f64>,
    /// A fused action of one stage's forward and backward on one micro-batch against its tasks
    /// run apart ([`Costs::fused_chain`]; 1: the sum).
    #[serde(default = "one_f64")]
    pub fused_chain: f64,
    /// A fused action of independent tasks (another stage or micro-batch) against its tasks
    /// run apart ([`Costs::fused_apart`]; 1: the sum).
    #[serde(default = "one_f64")]
    pub fused_apart: f64,
    /// Seconds from one task's end to the next one's start on a group (dispatch), added to
    /// every action ([`Costs::dispatch`]).
    #[serde(default)]
    pub dispatch: f64,
    /// Stage compositions measured as one stage each, used in place of their parts' summed
    /// times ([`crate::stage_costs`]; empty: every stage is the sum of its parts).
    #[serde(default)]
    pub stages: Vec<StageCosts>,
    /// Per layout whose stages were measured as they run, the contention and fused factors
    /// measured with them, used in place of [`RowCosts::contention`], [`RowCosts::fused_chain`]
    /// and [`RowCosts::fused_apart`] for that layout.
    #[serde(default)]
    pub layout_factors: Vec<LayoutFactors>,
}

fn one() -> u32 {
    1
}

fn one_f64() -> f64 {
    1.0
}

impl RowCosts {
    /// Costs with no accumulators, no data and nothing crossing boundaries, measured on one
    /// device.
    pub fn uniform_bytes(rows: u32, profile: Profile) -> RowCosts {
        let parts = profile.layers.len() + 2;
        RowCosts {
            rows,
            data: 1,
            profile,
            accumulator_bytes: vec![0; parts],
            data_bytes: vec![0; parts],
            boundary_bytes: 0,
            step_overhead: 0.0,
            weight_seconds: Vec::new(),
            split_seconds: Vec::new(),
            weight_residual_bytes: Vec::new(),
            layer_hidden_bytes: 0,
            contention: 1.0,
            contention_two: None,
            fused_chain: 1.0,
            fused_apart: 1.0,
            dispatch: 0.0,
            stages: Vec::new(),
            layout_factors: Vec::new(),
        }
    }
}

/// A candidate's step time in whole picoseconds: the ranking's key, so that costs read back
/// from JSON (equal to the last bit or so) rank and merge candidates as the measured ones did.
/// The ranking's order: step times within half a percent are a tie (well inside what a
/// measurement repeats to), which the fewer bytes break.
pub(crate) fn rank_order(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    let bucket = |c: &Candidate| match c.step_seconds > 0.0 {
        true => (c.step_seconds.ln() / 1.005_f64.ln()).round() as i64,
        false => i64::MIN,
    };
    bucket(a)
        .cmp(&bucket(b))
        .then(a.peak_bytes.cmp(&b.peak_bytes))
        .then(picoseconds(a).cmp(&picoseconds(b)))
        .then(a.schedule.cmp(&b.schedule))
        .then(a.remat.cmp(&b.remat))
        .then(a.fsdp_gather.cmp(&b.fsdp_gather))
}

fn picoseconds(c: &Candidate) -> i64 {
    (c.step_seconds * 1e12).round() as i64
}

/// What the split backward of the stage of parts `range` (0 the embedding, then the layers, then
/// the head) keeps from its input part for its weight part, per micro-batch, from the parts
/// measured one per stage (`tessera train --json`'s `weight_residual_bytes` of a stage agrees
/// with this for the GPT and Llama presets):
/// - a later stage keeps what its parts keep alone, less a layer's MLP hidden activation for
///   each part followed by another in the stage (that layer's output gradient is computed
///   inside the stage, not received);
/// - the first stage of several sends no input gradient back (its input is token ids): its
///   input part hands on the embedding's residuals and, with layers, every gradient of the
///   stage (the embedding's and the layers' parameter bytes);
/// - a single stage (both ends of the pipeline) computes every weight gradient in its input
///   part and hands them on split over the group's devices: its parameters' bytes over `data`
///   on each device (`--json` reports the group's whole residual: those gradients and the
///   micro-batch's token ids and targets, which the device already holds as its data).
fn stage_weight_residual(measured: &RowCosts, range: std::ops::Range<usize>, stages: usize) -> u64 {
    let residuals = &measured.weight_residual_bytes;
    let profile = &measured.profile;
    let parts = range.len() as u64;
    match (range.start, stages) {
        (0, 1) => {
            let params = profile.embedding.parameter_bytes
                + profile
                    .layers
                    .iter()
                    .map(|l| l.parameter_bytes)
                    .sum::<u64>()
                + profile.head.parameter_bytes;
            params / u64::from(measured.data.max(1))
        }
        (0, _) => {
            let embedding = residuals.first().copied().unwrap_or(0);
            let layers = profile.layers.get(range.start..range.end.saturating_sub(1));
            match layers {
                Some(layers) if !layers.is_empty() => {
                    let params: u64 = layers.iter().map(|l| l.parameter_bytes).sum();
                    embedding + profile.embedding.parameter_bytes + params
                }
                _ => embedding,
            }
        }
        _ => {
            let alone: u64 = residuals.get(range).map_or(0, |v| v.iter().sum());
            alone.saturating_sub(measured.layer_hidden_bytes * parts.saturating_sub(1))
        }
    }
}

/// The link between two devices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Bytes per second (0: instant).
    pub bandwidth: f64,
    /// Seconds per transfer.
    pub latency: f64,
}

impl Link {
    /// The seconds to move `bytes`.
    pub fn seconds(&self, bytes: u64) -> f64 {
        match self.bandwidth > 0.0 {
            true => self.latency + bytes as f64 / self.bandwidth,
            false => self.latency,
        }
    }
}

/// What the search tries.
#[derive(Clone, Debug, PartialEq)]
pub struct Space {
    /// Devices of the run.
    pub devices: u32,
    /// Examples per step.
    pub batch: u32,
    /// Tokens per example (for tokens per second).
    pub tokens_per_example: u64,
    /// Decoder layers.
    pub layers: usize,
    /// Micro-batch counts to try (empty: every divisor of the batch up to 64).
    pub microbatches: Vec<u32>,
    /// Schedules to try (empty: every built-in).
    pub schedules: Vec<String>,
    /// The most stages per group.
    pub max_stages_per_group: u32,
    /// Drop candidates whose predicted peak bytes on a device exceed this.
    pub device_memory: Option<u64>,
    /// Host cores the devices share (0: each device has its own processor).
    pub cores: u32,
    /// The weight-gradient part of each backward (`W / B`), for the split-backward schedules.
    pub weight_fraction: f64,
    /// The link between groups.
    pub link: Link,
}

impl Default for Space {
    fn default() -> Self {
        Space {
            devices: 1,
            batch: 1,
            tokens_per_example: 1,
            layers: 1,
            microbatches: Vec::new(),
            schedules: Vec::new(),
            max_stages_per_group: 2,
            device_memory: None,
            cores: 0,
            weight_fraction: 0.5,
            link: Link::default(),
        }
    }
}

/// The shape of a candidate before costs: what the caller must measure for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shape {
    /// MPMD groups.
    pub groups: u32,
    /// Pipeline stages.
    pub stages: u32,
    /// Micro-batches per step.
    pub microbatches: u32,
    /// Devices per group (the data-parallel ways inside a group).
    pub data: u32,
}

impl Shape {
    /// Rows of one micro-batch on one device.
    pub fn rows(&self, batch: u32) -> u32 {
        batch / (self.microbatches * self.data)
    }
}

/// One ranked configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Pipeline stages.
    pub stages: u32,
    /// Decoder layers per stage (`tessera train --stage-layers`).
    pub stage_layers: Vec<usize>,
    /// MPMD groups (`--mpmd-dim`).
    pub groups: u32,
    /// Devices per group (data-parallel ways).
    pub data: u32,
    /// Devices in all.
    pub devices: u32,
    /// Micro-batches per step.
    pub microbatches: u32,
    /// Rows of one micro-batch on one device.
    pub rows_per_device: u32,
    /// The schedule's name.
    pub schedule: String,
    /// The predicted step time, in seconds.
    pub step_seconds: f64,
    /// The simulator's makespan (the step time with a processor per device), in seconds.
    pub simulated_seconds: f64,
    /// The simulator's bubble ratio.
    pub bubble: f64,
    /// The predicted peak live bytes on the fullest device.
    pub peak_bytes: u64,
    /// Per group, the predicted peak live bytes of one of its devices.
    pub peak_bytes_per_group: Vec<u64>,
    /// Predicted tokens per second.
    pub tokens_per_second: f64,
    /// Other schedules with the same prediction for this layout.
    #[serde(default)]
    pub same_prediction: Vec<String>,
    /// Whether every stage's times are those of its composition measured as one stage
    /// ([`crate::stage_costs`]), not the sums of its parts'.
    #[serde(default)]
    pub measured_stages: bool,
    /// The remat policy whose measured costs made the prediction, where the caller searched
    /// several ([`crate::variants::merge_rankings`]; `None`: the costs did not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remat: Option<String>,
    /// How the stages' fully sharded (FSDP) parameters are gathered in the variant whose costs
    /// made the prediction (`per-step` or `per-microbatch`; `None`: not FSDP, or not said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fsdp_gather: Option<String>,
    /// The factor its prediction was scaled by against whole steps the caller timed: its own
    /// measured over predicted step where it was timed ([`Candidate::timed_step_ms`]), else
    /// its group shape's, times any level the caller measured the machine at last (`None`:
    /// not calibrated; the search never sets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<f64>,
    /// Its whole step as the caller timed it to calibrate the ranking, in milliseconds (the
    /// caller's last timings where it timed again after ranking; `None`: not timed; its
    /// prediction then comes from the time model and its shape's factor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_step_ms: Option<f64>,
}

/// Why nothing was ranked; each message names the fix.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum SearchError {
    /// No layout uses this many devices.
    #[error(
        "no layout uses {devices} devices for a batch of {batch} and {layers} layers (every group \
         needs the same devices, a stage per group or more, and rows that split over them); {}",
        match nearest {
            Some(n) => format!("use {n} devices"),
            None => "use a larger --batch or more --layers".to_string(),
        }
    )]
    NoLayout {
        /// The devices asked for.
        devices: u32,
        /// The batch.
        batch: u32,
        /// The layers.
        layers: usize,
        /// The nearest device count below that has a layout.
        nearest: Option<u32>,
    },
    /// Every candidate is over the memory limit.
    #[error(
        "no configuration fits {limit} bytes per device; the least any needs is {least} bytes \
         ({schedule}, {stages} stages on {groups} groups, {microbatches} micro-batches{}{}): \
         pass --device-memory {least} or more",
        remat.as_ref().map_or(String::new(), |r| format!(", remat {r}")),
        fsdp_gather.as_ref().map_or(String::new(), |g| format!(", FSDP gathered {g}"))
    )]
    NothingFits {
        /// The limit.
        limit: u64,
        /// The least peak of any candidate.
        least: u64,
        /// That candidate's schedule.
        schedule: String,
        /// Its stages.
        stages: u32,
        /// Its groups.
        groups: u32,
        /// Its micro-batches.
        microbatches: u32,
        /// Its remat policy, where the search covered several.
        remat: Option<String>,
        /// Its FSDP gather mode, where the search covered FSDP variants.
        fsdp_gather: Option<String>,
    },
    /// The simulator refused a schedule's plan (a bug of the schedule or the simulator: a
    /// candidate is never dropped, or ranked last, in silence).
    #[error(
        "the simulator failed on {schedule} with {stages} stages on {groups} groups and \
         {microbatches} micro-batches: {reason}; this is a bug of the schedule or the simulator \
         (please report it); leave that schedule out with --schedules meanwhile"
    )]
    Simulation {
        /// The schedule.
        schedule: String,
        /// Its stages.
        stages: u32,
        /// Its groups.
        groups: u32,
        /// Its micro-batches.
        microbatches: u32,
        /// The simulator's error.
        reason: String,
    },
    /// The costs of a shape's micro-batch size were not given.
    #[error("no measured costs for {rows} rows per device on groups of {data} devices")]
    MissingCosts {
        /// The rows.
        rows: u32,
        /// The devices per group.
        data: u32,
    },
    /// The costs do not describe the model's layers.
    #[error("the costs have {got} layers but the model has {layers}")]
    Layers {
        /// Layers in the costs.
        got: usize,
        /// Layers of the model.
        layers: usize,
    },
}

/// The divisors of `n` in increasing order, found in `O(√n)` steps.
fn divisors(n: u32) -> Vec<u32> {
    let (mut low, mut high) = (Vec::new(), Vec::new());
    let mut d: u32 = 1;
    while u64::from(d) * u64::from(d) <= u64::from(n) {
        if n.is_multiple_of(d) {
            low.push(d);
            if d != n / d {
                high.push(n / d);
            }
        }
        d += 1;
    }
    low.extend(high.into_iter().rev());
    low
}

/// The shapes the search tries for `space` (every one the schedules may accept).
pub fn shapes(space: &Space) -> Vec<Shape> {
    let mut out = Vec::new();
    let counts: Vec<u32> = match space.microbatches.is_empty() {
        true => (1..=space.batch.min(64))
            .filter(|m| space.batch.is_multiple_of(*m))
            .collect(),
        false => space.microbatches.clone(),
    };
    // In 64 bits: the stage and split counts of hostile spaces (`max_stages_per_group` near
    // `u32::MAX`, huge micro-batch counts) neither overflow nor loop past the useful range.
    let most_stages = u64::try_from(space.layers)
        .unwrap_or(u64::MAX)
        .saturating_add(2);
    for groups in divisors(space.devices) {
        let data = space.devices / groups;
        let per_group_max =
            u64::from(space.max_stages_per_group.max(1)).min(most_stages / u64::from(groups));
        for per_group in 1..=per_group_max {
            // On one group, one stage (its schedule's tasks run one after another).
            let Ok(stages) = u32::try_from(u64::from(groups) * per_group) else {
                break;
            };
            if groups == 1 && stages > 1 {
                continue;
            }
            for &microbatches in &counts {
                let split = u64::from(microbatches) * u64::from(data);
                if split == 0 || !u64::from(space.batch).is_multiple_of(split) {
                    continue;
                }
                out.push(Shape {
                    groups,
                    stages,
                    microbatches,
                    data,
                });
            }
        }
    }
    out
}

/// Every candidate of `space` that fits its memory, fastest first. `costs(rows, data)` gives
/// the costs measured on a group of `data` devices at `rows` rows per device per micro-batch
/// (see [`shapes`] for the pairs; costs measured on one device may stand for every group size
/// where a group's devices run in parallel without overhead).
pub fn search(
    costs: &dyn Fn(u32, u32) -> Option<RowCosts>,
    space: &Space,
) -> Result<Vec<Candidate>, SearchError> {
    let shapes = shapes(space);
    let registry = Registry::with_builtins();
    let names = match space.schedules.is_empty() {
        true => registry.names(),
        false => space.schedules.clone(),
    };
    let mut fitting = Vec::new();
    let mut least: Option<Candidate> = None;
    let mut any_layout = false;
    for shape in shapes {
        let rows = shape.rows(space.batch);
        let measured = costs(rows, shape.data).ok_or(SearchError::MissingCosts {
            rows,
            data: shape.data,
        })?;
        if measured.profile.layers.len() != space.layers {
            return Err(SearchError::Layers {
                got: measured.profile.layers.len(),
                layers: space.layers,
            });
        }
        for name in &names {
            let params = ScheduleParams {
                stages: shape.stages,
                mpmd_dim: shape.groups,
            };
            let Ok(schedule) = registry.create(name, params) else {
                continue;
            };
            let Ok(plan) = schedule.plan(shape.microbatches) else {
                continue;
            };
            let Some(candidate) = evaluate(&measured, space, shape, name, &plan, None)? else {
                continue;
            };
            any_layout = true;
            let candidate = match space.device_memory {
                Some(limit) if candidate.peak_bytes > limit => {
                    // The fastest split that fits, if another does.
                    match evaluate(&measured, space, shape, name, &plan, Some(limit))? {
                        Some(c) if c.peak_bytes <= limit => c,
                        _ => {
                            if least
                                .as_ref()
                                .is_none_or(|l| candidate.peak_bytes < l.peak_bytes)
                            {
                                least = Some(candidate);
                            }
                            continue;
                        }
                    }
                }
                _ => candidate,
            };
            fitting.push(candidate);
        }
    }
    if !any_layout {
        let nearest = (1..space.devices).rev().find(|&d| {
            let smaller = Space {
                devices: d,
                ..space.clone()
            };
            !shapes_with_schedules(&smaller, &registry, &names).is_empty()
        });
        return Err(SearchError::NoLayout {
            devices: space.devices,
            batch: space.batch,
            layers: space.layers,
            nearest,
        });
    }
    if fitting.is_empty() {
        let least = least.ok_or(SearchError::NoLayout {
            devices: space.devices,
            batch: space.batch,
            layers: space.layers,
            nearest: None,
        })?;
        return Err(SearchError::NothingFits {
            limit: space.device_memory.unwrap_or(0),
            least: least.peak_bytes,
            schedule: least.schedule,
            stages: least.stages,
            groups: least.groups,
            microbatches: least.microbatches,
            remat: least.remat,
            fsdp_gather: least.fsdp_gather,
        });
    }
    fitting.sort_by(rank_order);
    // Schedules that make the same prediction for the same layout are one row.
    let mut ranked: Vec<Candidate> = Vec::with_capacity(fitting.len());
    for c in fitting {
        let same = ranked.iter_mut().find(|r| {
            (
                r.stages,
                &r.stage_layers,
                r.groups,
                r.microbatches,
                r.peak_bytes,
            ) == (
                c.stages,
                &c.stage_layers,
                c.groups,
                c.microbatches,
                c.peak_bytes,
            ) && picoseconds(r) == picoseconds(&c)
                && (r.bubble - c.bubble).abs() <= 1e-9
        });
        match same {
            Some(r) => r.same_prediction.push(c.schedule),
            None => ranked.push(c),
        }
    }
    Ok(ranked)
}

/// The shapes of `space` that some schedule of `names` accepts.
fn shapes_with_schedules(space: &Space, registry: &Registry, names: &[String]) -> Vec<Shape> {
    shapes(space)
        .into_iter()
        .filter(|shape| {
            names.iter().any(|name| {
                let params = ScheduleParams {
                    stages: shape.stages,
                    mpmd_dim: shape.groups,
                };
                registry
                    .create(name, params)
                    .is_ok_and(|s| s.plan(shape.microbatches).is_ok())
            })
        })
        .collect()
}

/// The prediction for one shape and schedule: boundaries from [`partition`] (under `limit`,
/// counting each stage's in-flight micro-batches under `plan`, when given), step time from the
/// simulator, peak bytes from the memory model. `None` when no split exists; an error where the
/// simulator fails ([`SearchError::Simulation`]).
pub fn evaluate(
    measured: &RowCosts,
    space: &Space,
    shape: Shape,
    schedule: &str,
    plan: &crate::Plan,
    limit: Option<u64>,
) -> Result<Option<Candidate>, SearchError> {
    let stages = shape.stages as usize;
    let inflight = peak_inflight(plan);
    let memory = limit.map(|bytes| {
        // Parameters once; their accumulators (about their size) again.
        MemoryLimit {
            bytes,
            parameter_copies: 2,
            in_flight: inflight.clone(),
        }
    });
    let options = PartitionOptions {
        empty_ends: true,
        memory,
    };
    let Ok(split) = partition(&measured.profile, stages, &options) else {
        return Ok(None);
    };
    predict(measured, space, shape, schedule, plan, &split.counts).map(Some)
}

/// The prediction for one configuration with the stage boundaries `counts` given; an error where
/// the simulator fails on the plan ([`SearchError::Simulation`]).
pub fn predict(
    measured: &RowCosts,
    space: &Space,
    shape: Shape,
    schedule: &str,
    plan: &crate::Plan,
    counts: &[usize],
) -> Result<Candidate, SearchError> {
    let profile = &measured.profile;
    let loads = stage_loads(profile, counts);
    // Per stage, its parts' indices in the per-part lists (embedding 0, layers, head last).
    let parts = part_ranges(counts);
    let sum = |list: &[u64], s: usize| -> u64 {
        parts
            .get(s)
            .map_or(0, |r| list.get(r.clone()).map_or(0, |v| v.iter().sum()))
    };
    let forward: Vec<f64> = stage_times(profile, counts, |p| p.forward);
    let parts_count = profile.layers.len() + 2;
    let backward: Vec<f64> = stage_times(profile, counts, |p| p.backward);
    // A split backward pays its measured input and weight parts; a whole one (the schedules
    // that split only some, as DualPipeV's) the whole backward.
    let split: Vec<f64> = match measured.split_seconds.len() == parts_count {
        true => parts
            .iter()
            .map(|r| {
                measured
                    .split_seconds
                    .get(r.clone())
                    .map_or(0.0, |v| v.iter().sum())
            })
            .collect(),
        false => Vec::new(),
    };
    let split_total: Vec<f64> = match split.is_empty() {
        true => backward.clone(),
        false => split.clone(),
    };
    let weight: Vec<f64> = match measured.weight_seconds.len() == parts_count {
        true => parts
            .iter()
            .zip(&split_total)
            .map(|(r, b)| {
                // The first stage's input part computes nothing (see the bytes below).
                let w: f64 = match r.start {
                    0 => *b,
                    _ => measured
                        .weight_seconds
                        .get(r.clone())
                        .map_or(0.0, |v| v.iter().sum()),
                };
                w.clamp(0.0, *b)
            })
            .collect(),
        false => split_total
            .iter()
            .map(|b| b * space.weight_fraction.clamp(0.0, 1.0))
            .collect(),
    };
    let (forward, backward, weight, split) =
        with_measured_stages(measured, &parts, forward, backward, weight, split);
    let factors = measured.factors_of(counts);
    let costs = Costs {
        forward,
        backward,
        weight,
        split,
        latency: space.link.seconds(measured.boundary_bytes),
        fused_chain: factors.fused_chain,
        fused_apart: factors.fused_apart,
        dispatch: measured.dispatch,
    };
    let failed = |reason: String| SearchError::Simulation {
        schedule: schedule.to_string(),
        stages: shape.stages,
        groups: shape.groups,
        microbatches: shape.microbatches,
        reason,
    };
    let sim = simulate(plan, &costs).map_err(|e| failed(e.to_string()))?;
    let (simulated, bubble) = (sim.makespan, sim.bubble_ratio);
    // Devices sharing `cores` host cores: tasks of different groups running at once share them
    // (a group's task keeps up to `data` of them busy, one per device) and contend beyond their
    // share by the measured factor ([`crate::shared`]).
    let sharing = Sharing {
        cores: space.cores,
        demand: shape.data.min(space.cores).max(1),
        contention: factors.contention,
        contention_two: factors.contention_two,
    };
    let on_cores = match space.cores {
        0 => simulated,
        _ => {
            simulate_shared(plan, &costs, &sharing)
                .map_err(|e| failed(e.to_string()))?
                .0
        }
    };
    let step_seconds = on_cores + measured.step_overhead.max(0.0);
    let stage_bytes: Vec<StageBytes> = (0..counts.len())
        .map(|s| StageBytes {
            activation: stage_activation(measured, parts.get(s).cloned().unwrap_or(0..0)),
            weight_residual: stage_weight_residual(
                measured,
                parts.get(s).cloned().unwrap_or(0..0),
                counts.len(),
            ),
            // A backward holds the cotangent it receives and the one it sends (the runtime's
            // accounting shows both: one boundary each, none past the ends).
            backward: measured.boundary_bytes
                * (u64::from(s > 0) + u64::from(s + 1 < counts.len())),
            accumulators: sum(&measured.accumulator_bytes, s),
        })
        .collect();
    let groups = plan.actors.len();
    let resident: Vec<u64> = (0..groups)
        .map(|g| {
            plan.placement
                .stages_of(g as u32)
                .iter()
                .map(|&s| {
                    let s = s as usize;
                    loads.get(s).map_or(0, |l| l.parameter_bytes)
                        + sum(&measured.data_bytes, s) * u64::from(shape.microbatches)
                })
                .sum()
        })
        .collect();
    let per_group = predict_peak_bytes(plan, &resident, &stage_bytes);
    let peak_bytes = per_group.iter().copied().max().unwrap_or(0);
    let tokens = f64::from(space.batch) * space.tokens_per_example as f64;
    Ok(Candidate {
        stages: shape.stages,
        stage_layers: counts.to_vec(),
        groups: shape.groups,
        data: shape.data,
        devices: shape.groups * shape.data,
        microbatches: shape.microbatches,
        rows_per_device: shape.rows(space.batch),
        schedule: schedule.to_string(),
        step_seconds,
        simulated_seconds: simulated,
        bubble,
        peak_bytes,
        peak_bytes_per_group: per_group,
        tokens_per_second: match step_seconds > 0.0 {
            true => tokens / step_seconds,
            false => 0.0,
        },
        same_prediction: Vec::new(),
        measured_stages: measured.has_stages(counts),
        remat: None,
        fsdp_gather: None,
        calibration: None,
        timed_step_ms: None,
    })
}

/// A stage's activation bytes per micro-batch from its parts': a part measured alone keeps its
/// input hidden state as a residual, which inside a stage of several parts is computed by the
/// part before (a residual connection's sum, which the backward recomputes rather than keeps),
/// so a stage keeps its first part's activations and, of each later part, what goes beyond the
/// hidden state it receives.
fn stage_activation(measured: &RowCosts, range: std::ops::Range<usize>) -> u64 {
    let profile = &measured.profile;
    let all: Vec<u64> = std::iter::once(&profile.embedding)
        .chain(&profile.layers)
        .chain(std::iter::once(&profile.head))
        .map(|p| p.activation_bytes)
        .collect();
    let parts = all.get(range).unwrap_or(&[]);
    parts.first().copied().unwrap_or(0)
        + parts
            .iter()
            .skip(1)
            .map(|b| b.saturating_sub(measured.boundary_bytes))
            .sum::<u64>()
}

/// The stage times with those of every stage measured as a composition
/// ([`RowCosts::stages`]) in place of its parts' sums: forward, whole backward, weight part and
/// split backward (when the split is known per stage, or a composition gives it).
fn with_measured_stages(
    measured: &RowCosts,
    parts: &[std::ops::Range<usize>],
    mut forward: Vec<f64>,
    mut backward: Vec<f64>,
    mut weight: Vec<f64>,
    mut split: Vec<f64>,
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    if measured.stages.is_empty() {
        return (forward, backward, weight, split);
    }
    if split.len() != parts.len() {
        split = backward.clone();
    }
    for (s, range) in parts.iter().enumerate() {
        let Some(stage) = measured.stage(range) else {
            continue;
        };
        let put = |list: &mut Vec<f64>, value: f64| {
            if let Some(slot) = list.get_mut(s) {
                *slot = value.max(0.0);
            }
        };
        put(&mut forward, stage.forward);
        put(&mut backward, stage.backward);
        put(&mut split, stage.split);
        put(&mut weight, stage.weight.clamp(0.0, stage.split.max(0.0)));
    }
    (forward, backward, weight, split)
}

/// Per stage, the sum of `of` over its parts.
fn stage_times(profile: &Profile, counts: &[usize], of: fn(&crate::plan::Part) -> f64) -> Vec<f64> {
    let all: Vec<f64> = std::iter::once(&profile.embedding)
        .chain(&profile.layers)
        .chain(std::iter::once(&profile.head))
        .map(of)
        .collect();
    part_ranges(counts)
        .into_iter()
        .map(|r| all.get(r).map_or(0.0, |v| v.iter().sum()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Part;

    fn costs(rows: u32, _data: u32) -> Option<RowCosts> {
        let r = f64::from(rows);
        let part = |f: f64, act: u64| Part {
            forward: f * r,
            backward: 2.0 * f * r,
            activation_bytes: act * u64::from(rows),
            parameter_bytes: 1000,
        };
        let profile = Profile {
            embedding: part(0.001, 10),
            layers: vec![part(0.004, 100); 6],
            head: part(0.008, 50),
        };
        Some(RowCosts {
            accumulator_bytes: vec![500; 8],
            data_bytes: vec![8; 8],
            boundary_bytes: 64 * u64::from(rows),
            ..RowCosts::uniform_bytes(rows, profile)
        })
    }

    fn space() -> Space {
        Space {
            devices: 8,
            batch: 32,
            tokens_per_example: 16,
            layers: 6,
            ..Space::default()
        }
    }

    #[test]
    fn ranks_fastest_first_and_covers_groups_and_schedules() {
        let ranked = search(&costs, &space()).expect("candidates");
        assert!(
            ranked
                .windows(2)
                .all(|w| w[0].step_seconds <= w[1].step_seconds * 1.005)
        );
        for c in &ranked {
            assert_eq!(c.stage_layers.iter().sum::<usize>(), 6);
            assert_eq!(c.stage_layers.len(), c.stages as usize);
            assert_eq!(c.groups * c.data, 8);
            assert!(c.stages.is_multiple_of(c.groups));
        }
        let groups: std::collections::BTreeSet<u32> = ranked.iter().map(|c| c.groups).collect();
        assert_eq!(groups.into_iter().collect::<Vec<_>>(), vec![1, 2, 4, 8]);
        let named = |n: &str| {
            ranked
                .iter()
                .any(|c| c.schedule == n || c.same_prediction.iter().any(|s| s == n))
        };
        assert!(named("interleaved-1f1b"));
        assert!(named("dualpipev"));
    }

    #[test]
    fn memory_limit_drops_and_names_the_least() {
        let all = search(&costs, &space()).expect("candidates");
        let least = all.iter().map(|c| c.peak_bytes).min().expect("one");
        let limited = Space {
            device_memory: Some(least),
            ..space()
        };
        let fitting = search(&costs, &limited).expect("the least fits");
        assert!(fitting.iter().all(|c| c.peak_bytes <= least));
        let below = Space {
            device_memory: Some(least - 1),
            ..space()
        };
        match search(&costs, &below) {
            Err(SearchError::NothingFits { least: l, .. }) => assert_eq!(l, least),
            other => panic!("expected NothingFits, got {other:?}"),
        }
    }

    #[test]
    fn device_count_without_layout_names_the_nearest() {
        // 5 devices: 1 group of 5 cannot split 32 rows; 5 groups need 5 stages of 1 group each,
        // but 3 layers hold at most 5 stages... so use 2 layers (4 stages at most).
        let cost2 = |rows: u32, data: u32| {
            costs(rows, data).map(|mut c| {
                c.profile.layers.truncate(2);
                c.accumulator_bytes.truncate(4);
                c.data_bytes.truncate(4);
                c
            })
        };
        let s = Space {
            devices: 5,
            layers: 2,
            ..space()
        };
        match search(&cost2, &s) {
            Err(SearchError::NoLayout { nearest, .. }) => assert_eq!(nearest, Some(4)),
            other => panic!("expected NoLayout, got {other:?}"),
        }
    }

    #[test]
    fn shared_cores_bound_the_step() {
        let free = search(&costs, &space()).expect("candidates");
        let shared = search(
            &costs,
            &Space {
                cores: 2,
                ..space()
            },
        )
        .expect("candidates");
        assert!(shared[0].step_seconds >= free[0].step_seconds);
        assert!(shared.iter().all(|c| c.step_seconds >= c.simulated_seconds));
    }

    /// The GPT preset's parts measured one per stage (32 rows a micro-batch), and what
    /// `tessera train --json` measured for stages of several parts (`--stage-layers`).
    #[test]
    fn stage_weight_residuals_follow_the_measured_stages() {
        let part = |parameter_bytes| crate::plan::Part {
            forward: 0.0,
            backward: 0.0,
            activation_bytes: 0,
            parameter_bytes,
        };
        let measured = RowCosts {
            weight_residual_bytes: vec![
                266_240, 8_650_752, 8_650_752, 8_650_752, 8_650_752, 1_835_008,
            ],
            layer_hidden_bytes: 32 * 32 * 256 * 4,
            ..RowCosts::uniform_bytes(
                32,
                Profile {
                    embedding: part(73_728),
                    layers: vec![part(199_936); 4],
                    head: part(66_048),
                },
            )
        };
        let at = |counts: &[usize]| -> Vec<u64> {
            part_ranges(counts)
                .into_iter()
                .map(|r| stage_weight_residual(&measured, r, counts.len()))
                .collect()
        };
        // Measured: 1,2,1 -> 539648, 16252928, 9437184; 0,3,1 -> 266240, 23855104, 9437184;
        // 2,2 -> 739584, 17039360 (the model's first stages differ by 256 bytes).
        assert_eq!(at(&[1, 2, 1]), vec![539_904, 16_252_928, 9_437_184]);
        assert_eq!(at(&[0, 3, 1]), vec![266_240, 23_855_104, 9_437_184]);
        assert_eq!(at(&[2, 2]), vec![739_840, 17_039_360]);
        assert_eq!(at(&[4, 0]), vec![1_139_712, 1_835_008]);
        // One stage on 1, 2 and 8 devices: the peak per device of `zero-bubble` exceeds
        // 1F1B's by 939,520, 469,760 and 117,440 bytes (GPT preset, batch 64, 2 micro-batches).
        for (data, extra) in [(1, 939_520), (2, 469_760), (8, 117_440)] {
            let single = RowCosts {
                data,
                ..measured.clone()
            };
            assert_eq!(stage_weight_residual(&single, 0..6, 1), extra);
        }
    }
}
