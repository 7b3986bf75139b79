//! From a schedule to a runtime plan: the dataflow contract between pipeline stage programs.
//!
//! A pipelined training step splits a model into `S` stages. Stage `s` reads values that earlier
//! stages export (any number, from any earlier stage: a residual may skip stages) and exports
//! values to later stages; `inputs(s)` lists the `(stage, k)` values it reads, `consumers(s,k)`
//! the stages that read its export `k`. For stage `s` and microbatch `m` the stage partitioner
//! produces programs whose arguments and results follow this contract (lists in this order;
//! `P_s` parameters, `R_s` residuals, `W_s` weight-gradient residuals):
//!
//! | task | inputs | outputs |
//! |---|---|---|
//! | `Fwd(s,m)` | params(s), x(p,m,k) for (p,k) in inputs(s), data(s,m) | x(s,m,k) for every export k if `s < S-1`, else loss(m), aux(m,k) for k < A; residuals(s,m) |
//! | `Bwd(s,m)` | params(s), residuals(s,m), ct(s,m,k→c) for every export k and consumer c; acc(s,i) if i > 0 | ct(p,m,k→s) for (p,k) in inputs(s); acc(s,i+1) |
//! | `BwdI(s,m)` | params(s), residuals(s,m), ct(s,m,k→c) as `Bwd` | ct(p,m,k→s) as `Bwd`; wres(s,m) |
//! | `BwdW(s,m)` | wres(s,m), acc(s,i) if i > 0 | acc(s,i+1) |
//!
//! Stage 0 reads no exports: it reads the microbatch only through `data(0,m)`, the data inputs
//! assigned to it (e.g. the tokens; the last stage reads the labels). `ct(p,m,k→c)` is stage
//! `c`'s part of the cotangent of export `k` of stage `p`; the producer's backward sums the parts
//! of every consumer (one cotangent per use, summed where they meet). Each export is sent once
//! to each consuming stage's group. `acc(s,i)` are the `P_s` gradient accumulators after the
//! `i`-th weight gradient of stage `s` (in the order its actor runs them). There is no `acc(s,0)`:
//! the stage's first weight gradient *is* `acc(s,1)` (that task takes no accumulator and runs the
//! stage's `*_first` program, [`PartSignature::starts_accumulators`]), so no zeros are made or
//! placed before the run; only a stage no backward runs has an `acc(s,0)` placed (zeros), which
//! is then its result. `acc(s,M)` is a result, as is every `loss(m)` and every `aux(m,k)` (the `A`
//! auxiliary results of the last stage: per-micro-batch metrics) — gradients accumulate on the
//! devices that own the parameters, as in JAXPP.
//!
//! A forward-only plan ([`tessera_schedule::ForwardOnly`]: an eval loss, inference) runs only
//! `Fwd` tasks: they save no residuals, and no accumulator is placed or returned; its results
//! are the losses and auxiliary results.
//!
//! A fused action is one program: its inputs are its tasks' inputs that no earlier task of the
//! action produces, its outputs are its tasks' outputs that no later task of the action consumes.

use std::collections::{BTreeMap, HashMap};

use tessera_schedule::{Action, Task, TaskKind};

use crate::runtime::{Plan, TaskSpec, ValueId};

/// An export of an earlier stage that a stage reads: export `k` of stage `stage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActRef {
    /// The producing stage.
    pub stage: u32,
    /// Its export's index.
    pub k: usize,
}

/// The sizes of the contract for one stage, and how its values flow to and from other stages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageShape {
    /// Number of parameters (and so of gradient accumulators).
    pub params: usize,
    /// Number of data inputs per microbatch that this stage reads.
    pub data: usize,
    /// Number of residuals its forward saves for its backward.
    pub residuals: usize,
    /// Number of residuals its input-gradient backward saves for its weight-gradient backward.
    pub weight_residuals: usize,
    /// The earlier stages' exports it reads, in argument order.
    pub inputs: Vec<ActRef>,
    /// For each of its exports (none for the last stage, which returns the loss), the stages
    /// that read it, in increasing order.
    pub consumers: Vec<Vec<u32>>,
    /// The last stage only: how many auxiliary results (per-micro-batch metrics, not
    /// differentiated) its forward returns after the loss.
    pub aux: usize,
}

impl StageShape {
    /// Stage `stage` of a chain of `stages` stages, each passing one activation to the next.
    pub fn chain(
        stage: u32,
        stages: u32,
        params: usize,
        data: usize,
        residuals: usize,
        weight_residuals: usize,
    ) -> StageShape {
        StageShape {
            params,
            data,
            residuals,
            weight_residuals,
            inputs: stage
                .checked_sub(1)
                .map(|previous| ActRef {
                    stage: previous,
                    k: 0,
                })
                .into_iter()
                .collect(),
            consumers: if stage + 1 < stages {
                vec![vec![stage + 1]]
            } else {
                Vec::new()
            },
            aux: 0,
        }
    }

    /// The cotangents its backward reads: one per export and consumer.
    fn cotangents_in(&self, stage: u32, mb: u32) -> Vec<Key> {
        self.consumers
            .iter()
            .enumerate()
            .flat_map(|(k, users)| users.iter().map(move |&to| Key::Cot { stage, mb, k, to }))
            .collect()
    }

    /// The cotangents its backward produces: one per value it reads.
    fn cotangents_out(&self, stage: u32, mb: u32) -> Vec<Key> {
        self.inputs
            .iter()
            .map(|r| Key::Cot {
                stage: r.stage,
                mb,
                k: r.k,
                to: stage,
            })
            .collect()
    }
}

/// A named value of the pipeline. Fields: `stage`, microbatch `mb`, index `k` within a list,
/// `step` the number of weight gradients accumulated so far.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// Parameter `k` of stage `s`.
    Param { stage: u32, k: usize },
    /// Data input `k` of stage `s` for microbatch `mb`.
    Data { stage: u32, mb: u32, k: usize },
    /// Export `k` of stage `stage` for microbatch `mb` (a value later stages read).
    Act { stage: u32, mb: u32, k: usize },
    /// The loss of microbatch `mb`.
    Loss { mb: u32 },
    /// Auxiliary result `k` of the last stage (a metric) for microbatch `mb`.
    Aux { mb: u32, k: usize },
    /// Residual `k` of stage `stage`, microbatch `mb`.
    Resid { stage: u32, mb: u32, k: usize },
    /// Weight-gradient residual `k`.
    WResid { stage: u32, mb: u32, k: usize },
    /// Stage `to`'s part of the cotangent of `Act { stage, mb, k }`.
    Cot {
        stage: u32,
        mb: u32,
        k: usize,
        to: u32,
    },
    /// Gradient accumulator `k` of stage `stage` after `step` microbatches.
    Acc { stage: u32, step: u32, k: usize },
}

/// Errors building a pipeline plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    /// The schedule has a different number of stages than the model.
    #[error(
        "the schedule has {schedule} stages but the model has {model}; use as many stage markers as stages"
    )]
    StageCount {
        /// Stages of the schedule.
        schedule: usize,
        /// Stages of the model.
        model: usize,
    },
    /// The schedule's placement puts a stage on no group of the mesh.
    #[error(
        "stage {stage} runs on no MPMD group: the schedule places it on {actor}, but the mesh has \
         {groups} groups, so {reads} would have nowhere to go; give the schedule as many actors \
         as the mesh has groups"
    )]
    NoSuchGroup {
        /// The stage.
        stage: u32,
        /// Where the schedule places it (`no actor`, or `actor A`).
        actor: String,
        /// Groups of the mesh.
        groups: usize,
        /// What the stage reads, in words.
        reads: String,
    },
}

/// One task of an action with its contract inputs and outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartSignature {
    /// The task.
    pub task: Task,
    /// Its inputs, in argument order.
    pub inputs: Vec<Key>,
    /// Its outputs, in result order.
    pub outputs: Vec<Key>,
}

impl PartSignature {
    /// Whether this task makes its stage's gradient accumulators (the stage's first `Bwd` or
    /// `BwdW` of the step): it reads no accumulator and returns its gradients as `acc(s,1)`, so
    /// it runs the stage's `bwd_first` / `bwd_w_first` program.
    pub fn starts_accumulators(&self) -> bool {
        matches!(self.task.kind, TaskKind::Bwd | TaskKind::BwdW)
            && !self.inputs.iter().any(|k| matches!(k, Key::Acc { .. }))
    }
}

/// What the program of one action takes and returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionSignature {
    /// The action's tasks, in execution order.
    pub parts: Vec<PartSignature>,
    /// The program's arguments.
    pub inputs: Vec<Key>,
    /// The program's results.
    pub outputs: Vec<Key>,
}

/// The plan and where each named value lives.
#[derive(Debug, Clone)]
pub struct PipelinePlan<T> {
    /// The runtime plan.
    pub plan: Plan<T>,
    /// Value ids by key.
    pub ids: HashMap<Key, ValueId>,
    /// Where each input value must be placed before the run: (key, group).
    pub inputs: Vec<(Key, usize)>,
}

/// Builds the runtime plan of a schedule's plan for a model with `stages`. `program` gives each
/// action's payload (e.g. the index of its compiled program) from the action's signature.
pub fn build_plan<T>(
    schedule: &tessera_schedule::Plan,
    stages: &[StageShape],
    mut program: impl FnMut(&ActionSignature) -> T,
) -> Result<PipelinePlan<T>, PipelineError> {
    let num_stages = schedule.num_stages as usize;
    if num_stages != stages.len() {
        return Err(PipelineError::StageCount {
            schedule: num_stages,
            model: stages.len(),
        });
    }
    let groups = schedule.actors.len();
    let group_of = |stage: u32| -> Result<usize, PipelineError> {
        let actor = schedule.placement.actor(stage);
        match actor {
            Some(a) if (a as usize) < groups => Ok(a as usize),
            _ => Err(PipelineError::NoSuchGroup {
                stage,
                actor: actor.map_or("no actor".into(), |a| format!("actor {a}")),
                groups,
                reads: stage_reads(&stages[stage as usize], stage),
            }),
        }
    };
    // Every stage must run somewhere, before any task is planned.
    for stage in 0..num_stages as u32 {
        group_of(stage)?;
    }
    let forward_only = is_forward_only(schedule);
    let mut ids = Ids::default();
    let mut steps: BTreeMap<u32, u32> = BTreeMap::new();
    let mut tasks = Vec::new();
    let mut order = vec![Vec::new(); groups];
    for (actor, actions) in schedule.actors.iter().enumerate() {
        for action in actions {
            let parts: Vec<PartSignature> = action
                .tasks()
                .iter()
                .map(|&task| {
                    let (inputs, mut outputs) = task_keys(&task, stages, num_stages, &mut steps);
                    if forward_only {
                        outputs.retain(|k| !matches!(k, Key::Resid { .. }));
                    }
                    PartSignature {
                        task,
                        inputs,
                        outputs,
                    }
                })
                .collect();
            let (inputs, outputs) = fuse(&parts);
            let signature = ActionSignature {
                parts,
                inputs,
                outputs,
            };
            order[actor].push(tasks.len());
            tasks.push(TaskSpec {
                name: action_name(action),
                group: actor,
                inputs: signature.inputs.iter().map(|k| ids.get(*k)).collect(),
                outputs: signature.outputs.iter().map(|k| ids.get(*k)).collect(),
                payload: program(&signature),
            });
        }
    }
    let mut inputs = Vec::new();
    let mut results = Vec::new();
    for (s, shape) in stages.iter().enumerate() {
        let stage = s as u32;
        let group = group_of(stage)?;
        let last = steps.get(&stage).copied().unwrap_or(0);
        for k in 0..shape.params {
            inputs.push((Key::Param { stage, k }, group));
            if forward_only {
                continue;
            }
            if last == 0 {
                // No backward of this stage runs: its gradients are the zeros placed here.
                inputs.push((Key::Acc { stage, step: 0, k }, group));
            }
            results.push((
                ids.get(Key::Acc {
                    stage,
                    step: last,
                    k,
                }),
                group,
            ));
        }
        for mb in 0..schedule.num_microbatches {
            for k in 0..shape.data {
                inputs.push((Key::Data { stage, mb, k }, group));
            }
        }
    }
    let last_group = group_of(num_stages.saturating_sub(1) as u32)?;
    for mb in 0..schedule.num_microbatches {
        results.push((ids.get(Key::Loss { mb }), last_group));
    }
    let aux = stages.last().map_or(0, |s| s.aux);
    for mb in 0..schedule.num_microbatches {
        for k in 0..aux {
            results.push((ids.get(Key::Aux { mb, k }), last_group));
        }
    }
    Ok(PipelinePlan {
        plan: Plan {
            tasks,
            order,
            results,
        },
        ids: ids.map,
        inputs,
    })
}

/// Whether `schedule` runs forwards only (a forward-only plan: no gradients, no residuals).
pub fn is_forward_only(schedule: &tessera_schedule::Plan) -> bool {
    schedule
        .actors
        .iter()
        .flatten()
        .flat_map(|a| a.tasks())
        .all(|t| t.kind == TaskKind::Fwd)
}

/// What stage `stage` reads, in words, for errors.
fn stage_reads(shape: &StageShape, stage: u32) -> String {
    let mut reads: Vec<String> = shape
        .inputs
        .iter()
        .map(|r| format!("value {} of stage {}", r.k, r.stage))
        .collect();
    if shape.params > 0 {
        reads.push(format!("its {} parameters", shape.params));
    }
    if shape.data > 0 {
        reads.push(format!("its {} micro-batch inputs", shape.data));
    }
    match reads.is_empty() {
        true => format!("the work of stage {stage}"),
        false => format!("the values it needs ({})", reads.join(", ")),
    }
}

#[derive(Default)]
struct Ids {
    map: HashMap<Key, ValueId>,
}

impl Ids {
    fn get(&mut self, key: Key) -> ValueId {
        let next = self.map.len();
        *self.map.entry(key).or_insert(next)
    }
}

/// The contract's inputs and outputs of one task.
fn task_keys(
    task: &Task,
    stages: &[StageShape],
    num_stages: usize,
    steps: &mut BTreeMap<u32, u32>,
) -> (Vec<Key>, Vec<Key>) {
    let (s, mb) = (task.stage, task.mb);
    let shape = &stages[s as usize];
    let last = s as usize + 1 == num_stages;
    let params = (0..shape.params).map(|k| Key::Param { stage: s, k });
    let resid = (0..shape.residuals).map(|k| Key::Resid { stage: s, mb, k });
    let wres = (0..shape.weight_residuals).map(|k| Key::WResid { stage: s, mb, k });
    let (ct_in, ct_out) = (shape.cotangents_in(s, mb), shape.cotangents_out(s, mb));
    let accumulate = |steps: &mut BTreeMap<u32, u32>| {
        let step = steps.entry(s).or_insert(0);
        *step += 1;
        let acc = |step: u32| {
            (0..shape.params)
                .map(|k| Key::Acc { stage: s, step, k })
                .collect::<Vec<_>>()
        };
        // The first weight gradient starts the accumulators: it reads none.
        let before = match *step {
            1 => Vec::new(),
            _ => acc(*step - 1),
        };
        (before, acc(*step))
    };
    match task.kind {
        TaskKind::Fwd => {
            let mut inputs: Vec<Key> = params.collect();
            inputs.extend(shape.inputs.iter().map(|r| Key::Act {
                stage: r.stage,
                mb,
                k: r.k,
            }));
            inputs.extend((0..shape.data).map(|k| Key::Data { stage: s, mb, k }));
            let mut outputs: Vec<Key> = if last {
                std::iter::once(Key::Loss { mb })
                    .chain((0..shape.aux).map(|k| Key::Aux { mb, k }))
                    .collect()
            } else {
                (0..shape.consumers.len())
                    .map(|k| Key::Act { stage: s, mb, k })
                    .collect()
            };
            outputs.extend(resid);
            (inputs, outputs)
        }
        TaskKind::Bwd => {
            let (before, after) = accumulate(steps);
            let inputs = params.chain(resid).chain(ct_in).chain(before).collect();
            (inputs, ct_out.into_iter().chain(after).collect())
        }
        TaskKind::BwdI => (
            params.chain(resid).chain(ct_in).collect(),
            ct_out.into_iter().chain(wres).collect(),
        ),
        TaskKind::BwdW => {
            let (before, after) = accumulate(steps);
            (wres.chain(before).collect(), after)
        }
    }
}

/// Inputs and outputs of a fused action (see the module docs).
fn fuse(parts: &[PartSignature]) -> (Vec<Key>, Vec<Key>) {
    let mut inputs = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        for key in &part.inputs {
            let made_earlier = parts[..i].iter().any(|p| p.outputs.contains(key));
            if !made_earlier && !inputs.contains(key) {
                inputs.push(*key);
            }
        }
    }
    let mut outputs = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        for key in &part.outputs {
            let used_later = parts[i + 1..].iter().any(|p| p.inputs.contains(key));
            if !used_later {
                outputs.push(*key);
            }
        }
    }
    (inputs, outputs)
}

/// A task name for timings: `F s1 mb3`, or `F s3 mb0 + B s3 mb0` for a fused action.
pub fn action_name(action: &Action) -> String {
    action
        .tasks()
        .iter()
        .map(|t| format!("{} s{} mb{}", t.kind.letter(), t.stage, t.mb))
        .collect::<Vec<_>>()
        .join(" + ")
}
