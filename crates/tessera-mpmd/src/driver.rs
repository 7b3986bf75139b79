//! A compiled pipelined training step: a traced loss (with stage markers) partitioned, every
//! action of a schedule compiled for its MPMD group, and a `step` that runs the schedule over
//! microbatches and returns the accumulated gradients and the per-microbatch losses.
//!
//! Inside a group, programs run SPMD over the group's devices, every value laid out as
//! [`ValueSpecs`] says: parameters and gradients by the parameter's spec (replicated unless
//! given; an FSDP parameter read whole over the data axes, gathered once before the run),
//! per-micro-batch values (data, activations, their cotangents and the residuals) split along
//! their leading (batch) dimension over the data-parallel axes where it divides; gradient
//! accumulators, losses and metrics held as partial sums over those axes, which
//! `keep_partial_sums` makes each task compute and one program per group reduces after the run
//! (`relayout.rs`; or, per micro-batch, the parameter's spec and replicated). Every compiled
//! action carries these specs on its arguments and results (explicit shardings, so a value
//! crossing groups has one layout on both sides and moves shard by shard); XLA's partitioner
//! decides what lies inside and adds the collectives (tensor parallelism's all-reduces). The
//! optimizer update is left to the caller (`mpmd_jit` runs it on the groups).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tessera_ir::passes::keep_partial_sums;
use tessera_ir::{ClosedJaxpr, DType};
use tessera_pjrt::{Array as DeviceArray, Client, ElementType, HostArray};
use tessera_schedule::Schedule;
use tessera_sharding::{NamedSharding, PartitionSpec};
use tessera_stablehlo::{KeyTypes, LowerError, PartBody, Partitioner, lower_flat, mlir_type};

use crate::compose::action_module;
use crate::mesh::MpmdMesh;
use crate::partition::{PartitionError, StagePrograms, key_aval, partition_with};
use crate::pipeline::{Key, PartSignature, PipelinePlan, build_plan};
use crate::processes::Processes;
use crate::relayout::{Relayouts, relayouts};
use crate::runtime::{
    DeviceCopyTransport, Executor, OutputLayout, PjrtExecutor, Plan, RunError, RunOptions, Timings,
    Transport, ValueId, run_local,
};
use crate::specs::{GradReduce, ValueSpecs};
use crate::tied_sum::{TiedAdds, TiedSetup};

mod inputs;

/// Errors of building or running a pipeline.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The loss could not be partitioned.
    #[error(transparent)]
    Partition(#[from] PartitionError),
    /// The schedule does not fit the model or the mesh.
    #[error("{0}")]
    Config(String),
    /// Lowering a task failed.
    #[error(transparent)]
    Lower(#[from] tessera_stablehlo::LowerError),
    /// A device operation failed.
    #[error(transparent)]
    Mpmd(#[from] crate::error::MpmdError),
    /// The run failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The processes of a multi-process step disagree, or their communication failed.
    #[error(transparent)]
    Processes(#[from] crate::processes::ProcessError),
    /// A step argument's spec cannot lay it out on its group.
    #[error(transparent)]
    Spec(#[from] crate::specs::SpecError),
    /// A `treduce` body's results beside its `value_and_grad_call` cannot run per micro-batch.
    #[error(transparent)]
    LoopBody(#[from] crate::mpmd_jit::LoopBodyError),
    /// The step's host callbacks cannot run where `mpmd_jit` would run them.
    #[error(transparent)]
    Callbacks(#[from] crate::effects::CallbackStageError),
    /// The step holds no `treduce`, or several with an option a step of several loops does not
    /// support.
    #[error(transparent)]
    StepLoops(#[from] crate::mpmd_jit::StepLoopsError),
}

impl From<tessera_pjrt::PjrtError> for DriverError {
    fn from(e: tessera_pjrt::PjrtError) -> Self {
        DriverError::Mpmd(e.into())
    }
}

impl From<tessera_sharding::ShardingError> for DriverError {
    fn from(e: tessera_sharding::ShardingError) -> Self {
        DriverError::Mpmd(e.into())
    }
}

impl From<tessera_schedule::ScheduleError> for DriverError {
    fn from(e: tessera_schedule::ScheduleError) -> Self {
        DriverError::Config(e.to_string())
    }
}

/// What one pipelined step returns.
#[derive(Debug)]
pub struct StepOutput {
    /// The gradient of each parameter argument (summed over microbatches), in `params` order
    /// (none for a forward-only pipeline).
    pub grads: Vec<HostArray>,
    /// Each microbatch's loss.
    pub losses: Vec<f64>,
    /// Each microbatch's auxiliary results (the loss program's results after the loss).
    pub aux: Vec<Vec<HostArray>>,
    /// When each task ran.
    pub timings: Timings,
}

/// What one pipelined step returns, with the gradients left on their groups' devices.
#[derive(Debug)]
pub struct DeviceStepOutput {
    /// The gradient of each parameter argument (summed over microbatches), in `params` order,
    /// on the group that owns the parameter (`None` when another process runs that group); none
    /// for a forward-only pipeline.
    pub grads: Vec<Option<DeviceArray>>,
    /// Each microbatch's loss.
    pub losses: Vec<f64>,
    /// Each microbatch's auxiliary results (the loss program's results after the loss), on the
    /// last stage's group (`None` when another process runs that group).
    pub aux: Vec<Vec<Option<DeviceArray>>>,
    /// When each task ran.
    pub timings: Timings,
}

/// A parameter's value for a step: on the host, or already on its group's devices (laid out by
/// its spec, as an update on the group leaves it; another layout is resharded on the group).
/// Micro-batch data is given the same way: a device value is moved onto the group of the stage
/// reading it, laid out by its spec.
#[derive(Debug, Clone)]
pub enum Placed {
    /// Copied to the group at the start of the step.
    Host(HostArray),
    /// Used where it is; it must lie on the group that runs the parameter's stage.
    Device(Box<DeviceArray>),
    /// One array per group holding it (an `MpmdArray`'s local arrays). A parameter used by
    /// several stages (a tied weight) is copied to a using group that lacks it.
    PerGroup(std::collections::BTreeMap<usize, DeviceArray>),
}

/// How a pipeline is built: the processes it spans, the partitioner its modules are for, and
/// how its values are laid out inside their groups.
#[derive(Clone, Default)]
pub struct PipelineOptions {
    /// Set in a process of a multi-process job: the groups it runs and how values reach the
    /// others; `None`: one process runs every group.
    pub processes: Option<Arc<dyn Processes>>,
    /// The partitioner every action is lowered and compiled for.
    pub partitioner: Partitioner,
    /// How each value is laid out inside its group (by default: parameters replicated,
    /// per-micro-batch values split over every axis of the group).
    pub specs: ValueSpecs,
    /// Plan the pipeline without compiling its tasks (what `mpmd_jit` does for a step it runs as
    /// one program): its schedule, stages and layouts can be read, but running it fails.
    pub plan_only: bool,
    /// XLA options every task is compiled with (JAX's `compiler_options`).
    pub compiler_options: crate::runtime::CompilerOptions,
    /// Run the forwards only ([`tessera_schedule::ForwardOnly`] of the schedule: its placement,
    /// no backward): the step returns the losses and auxiliary results and no gradient (an eval
    /// loss, inference, on the groups that hold the parameters).
    pub forward_only: bool,
    /// The parameters (loss arguments) whose gradients combine over the micro-batches by their
    /// elementwise maximum instead of their sum (a `treduce` gradient result combined by `Max`;
    /// [`crate::partition::partition_with`]). A parameter read by several stages (a tied
    /// weight) cannot be among them: its per-stage parts add up per micro-batch.
    pub max_grads: Vec<usize>,
    /// Which forward values each stage's backward reads saved ([`crate::remat`]).
    pub remat: crate::remat::Remat,
}

/// A pipelined step ready to run.
pub struct CompiledPipeline {
    client: Client,
    mesh: MpmdMesh,
    parts: Vec<StagePrograms>,
    built: PipelinePlan<usize>,
    run_plan: Arc<Plan<usize>>,
    executor: Arc<PjrtExecutor>,
    run_options: RunOptions,
    params: Vec<usize>,
    microbatches: u32,
    schedule_plan: tessera_schedule::Plan,
    /// Set when the groups are spread over processes: the ones this process runs, and how
    /// values reach the others.
    processes: Option<Arc<dyn Processes>>,
    /// The layout of every value of the plan (what a transport between processes needs).
    layouts: Arc<HashMap<ValueId, OutputLayout>>,
    /// How each value is laid out inside its group.
    specs: ValueSpecs,
    /// The programs summing each group's unreduced results once per step.
    reduces: Relayouts,
    /// The programs gathering each group's FSDP parameters once per step.
    gathers: Relayouts,
    /// The programs summing a tied parameter's gradient parts on its groups.
    tied: TiedAdds,
    /// Whether the plan runs forwards only (no gradients).
    forward_only: bool,
}

struct Types<'a> {
    parts: &'a [StagePrograms],
    mesh: &'a tessera_sharding::Mesh,
    specs: &'a ValueSpecs,
}

impl KeyTypes<Key> for Types<'_> {
    fn aliased_output(&self, key: &Key, outputs: &[Key]) -> Option<usize> {
        accumulator_output(key, outputs)
    }

    fn mlir_type(&self, key: &Key) -> Result<String, LowerError> {
        key_aval(self.parts, *key)
            .map(|a| mlir_type(&a))
            .ok_or_else(|| LowerError::ValueLayout(format!("pipeline value {key:?} has no type")))
    }
    fn sharding(&self, key: &Key) -> Result<Option<NamedSharding>, LowerError> {
        let spec = self.specs.spec(self.parts, *key, self.mesh);
        NamedSharding::with_partial_axes(self.mesh, spec.clone())
            .map(Some)
            .map_err(|e| {
                LowerError::ValueLayout(format!(
                    "pipeline value {key:?} cannot be laid out as {spec} on its group's mesh {}: {e}; give it a spec that names the group's axes and divides its shape (ValueSpecs)",
                    self.mesh
                ))
            })
    }
}

/// The output a gradient accumulator input is updated into (the same accumulator after the most
/// steps), so the compiled action donates the input's buffer to it: accumulation holds one copy.
pub fn accumulator_output(key: &Key, outputs: &[Key]) -> Option<usize> {
    let Key::Acc { stage, step, k } = *key else {
        return None;
    };
    outputs
        .iter()
        .enumerate()
        .filter_map(|(i, o)| match *o {
            Key::Acc {
                stage: s,
                step: t,
                k: j,
            } if s == stage && j == k && t > step => Some((t, i)),
            _ => None,
        })
        .max()
        .map(|(_, i)| i)
}

/// How value `key` is laid out over a group's mesh by default ([`ValueSpecs::default`]):
/// per-micro-batch values split along their leading dimension over every axis of the group
/// (where the size divides), the rest replicated. A pipeline built with other specs asks
/// [`ValueSpecs::spec`].
pub fn key_spec(
    parts: &[StagePrograms],
    key: Key,
    group: &tessera_sharding::Mesh,
) -> PartitionSpec {
    ValueSpecs::default().spec(parts, key, group)
}

fn element_type(dtype: DType) -> Result<ElementType, DriverError> {
    match dtype {
        DType::F32 => Ok(ElementType::F32),
        DType::F64 => Ok(ElementType::F64),
        DType::I32 => Ok(ElementType::S32),
        DType::BF16 => Ok(ElementType::BF16),
        other => Err(DriverError::Config(format!(
            "pipeline values of dtype {other} are not supported yet"
        ))),
    }
}

/// Has `executor` keep every saved residual of `built` in memory `kind` between its forward and
/// backward tasks, once the plugin's first device is found to have such a memory.
fn offload_residuals(
    executor: &mut PjrtExecutor,
    client: &Client,
    kind: &str,
    built: &PipelinePlan<usize>,
) -> Result<(), DriverError> {
    let kinds: Vec<String> = client
        .device(0)?
        .memories()?
        .into_iter()
        .map(|m| m.kind)
        .collect();
    if !kinds.iter().any(|k| k == kind) {
        return Err(DriverError::Config(format!(
            "the saved residuals cannot wait in `{kind}` memory: this plugin's devices have {}; \
             name one of those, or keep them on the device",
            kinds.join(", ")
        )));
    }
    let residuals = built
        .ids
        .iter()
        .filter(|(key, _)| matches!(key, Key::Resid { .. }))
        .map(|(_, &id)| id)
        .collect();
    executor.set_offload(kind, residuals);
    Ok(())
}

impl CompiledPipeline {
    /// Each stage's remat policy, and why the asked one did not apply where it did not.
    pub fn stage_remat(&self) -> Vec<(crate::remat::RematPolicy, Option<String>)> {
        self.parts
            .iter()
            .map(|p| (p.remat, p.remat_fallback.clone()))
            .collect()
    }

    /// The collectives one step of this pipeline executes on each group this process runs,
    /// by kind: every task's program's collectives (counted in XLA's optimized module) times
    /// its runs in the step, plus the group's once-per-step reduction. Indexed by group; a
    /// group of another process has an empty map.
    pub fn collectives_per_step(&self) -> Result<Vec<BTreeMap<String, u64>>, DriverError> {
        let mut per_group = vec![BTreeMap::new(); self.mesh.mpmd_dim()];
        let tasks = self.run_plan.tasks.iter().map(|t| t.payload);
        let reduces = self.reduces.programs().map(|(_, p)| p);
        let gathers = self.gathers.programs().map(|(_, p)| p);
        for program in tasks.chain(reduces).chain(gathers) {
            let Some(counted) = self.executor.collectives(program) else {
                continue; // run by another process
            };
            let (group, counts) = counted?;
            add_counts(&mut per_group[group], &counts);
        }
        Ok(per_group)
    }

    /// Per group, the milliseconds of `timings` (one step of this pipeline) its tasks waited
    /// for inputs already produced ([`Timings::transfer_wait_ms`]): the transfers' exposed
    /// time, not the pipeline's bubble.
    pub fn transfer_wait_ms(&self, timings: &Timings) -> Vec<f64> {
        let end_of: HashMap<&str, f64> = timings
            .tasks
            .iter()
            .map(|t| (t.name.as_str(), t.start_us + t.duration_us))
            .collect();
        let producer: HashMap<ValueId, &str> = self
            .run_plan
            .tasks
            .iter()
            .flat_map(|t| t.outputs.iter().map(move |&v| (v, t.name.as_str())))
            .collect();
        let produced = |v: ValueId| producer.get(&v).and_then(|n| end_of.get(n)).copied();
        timings.transfer_wait_ms(self.mesh.mpmd_dim(), produced)
    }

    /// Partitions `loss` (arguments `params` are parameters, the others per-microbatch data),
    /// builds `schedule`'s plan for `microbatches`, and compiles every action for its group.
    pub fn new(
        client: &Client,
        mesh: &MpmdMesh,
        loss: &ClosedJaxpr,
        params: &[usize],
        schedule: &dyn Schedule,
        microbatches: u32,
    ) -> Result<Self, DriverError> {
        let options = PipelineOptions::default();
        Self::new_in(client, mesh, loss, params, schedule, microbatches, &options)
    }

    /// Like [`CompiledPipeline::new`], with `options`: values laid out as `options.specs` says;
    /// in a process of a multi-process job (`options.processes`) only the groups that process
    /// runs are compiled and run, and before
    /// returning every process checks that all built the same plan ([`Processes::agree`]);
    /// every action is lowered and compiled for `options.partitioner`.
    pub fn new_in(
        client: &Client,
        mesh: &MpmdMesh,
        loss: &ClosedJaxpr,
        params: &[usize],
        schedule: &dyn Schedule,
        microbatches: u32,
        options: &PipelineOptions,
    ) -> Result<Self, DriverError> {
        let processes = options.processes.clone();
        // GSPMD's shardings cannot say unreduced: under it (asked for, or chosen for a loss
        // with host callbacks on groups of several devices) every backward reduces its own.
        let group_size = mesh.lowering_mesh().device_ids().len();
        let partitioner = options.partitioner.for_callbacks(group_size, [loss]);
        let specs = match partitioner {
            Partitioner::Gspmd => options
                .specs
                .clone()
                .with_grad_reduce(GradReduce::PerMicrobatch),
            Partitioner::Shardy => options.specs.clone(),
        };
        let forward = tessera_schedule::ForwardOnly::new(schedule);
        let (schedule, validate): (&dyn Schedule, fn(&_) -> Result<(), _>) =
            match options.forward_only {
                true => (&forward, tessera_schedule::validate_forward_only),
                false => (schedule, tessera_schedule::validate),
            };
        let schedule_plan = schedule.plan(microbatches)?;
        validate(&schedule_plan).map_err(|e| {
            DriverError::Config(format!(
                "schedule '{}' does not validate for {} stages and {microbatches} micro-batches: {e}",
                schedule_plan.name, schedule_plan.num_stages
            ))
        })?;
        if schedule_plan.actors.len() != mesh.mpmd_dim() {
            return Err(DriverError::Config(format!(
                "the schedule runs on {} MPMD groups but the mesh has {}; make --mpmd-dim match the mesh",
                schedule_plan.actors.len(),
                mesh.mpmd_dim()
            )));
        }
        let parts = partition_with(loss, params, &options.max_grads, &options.remat)?;
        if !options.plan_only {
            // One program (`plan_only`) runs the step itself, its callbacks in program order.
            let forwards: Vec<&ClosedJaxpr> = parts
                .iter()
                .map(|p| p.program(tessera_schedule::TaskKind::Fwd))
                .collect();
            crate::effects::refuse_unkeepable_effects(&forwards, !options.forward_only)?;
        }
        let reading = |arg: usize| parts.iter().filter(|p| p.param_args.contains(&arg)).count();
        if let Some(&arg) = options.max_grads.iter().find(|&&a| reading(a) > 1) {
            return Err(DriverError::Config(format!(
                "the gradient of loss argument {arg}, a weight read by {} stages (tied), combines \
                 over the micro-batches by Max; its parts from the stages add up within each \
                 micro-batch before the micro-batches combine, which the stages' own \
                 accumulators cannot do for Max: combine it by Add, or read the weight in one \
                 stage",
                reading(arg)
            )));
        }
        if parts.len() != schedule_plan.num_stages as usize {
            return Err(DriverError::Config(format!(
                "the model has {} stages (its stage markers + 1) but the schedule has {}",
                parts.len(),
                schedule_plan.num_stages
            )));
        }
        let shapes: Vec<_> = parts.iter().map(|p| p.shape.clone()).collect();
        let mut executor =
            PjrtExecutor::new(client, mesh).with_compiler_options(&options.compiler_options);
        let mut failure: Option<DriverError> = None;
        let local = |group: usize| {
            processes
                .as_ref()
                .is_none_or(|p| p.local_groups().contains(&group))
        };
        let built = build_plan(&schedule_plan, &shapes, |sig| {
            let group = schedule_plan
                .placement
                .actor(sig.parts[0].task.stage)
                .unwrap_or(0) as usize;
            if !local(group) || options.plan_only {
                // Another process compiles and runs it (or nobody does, for a plan only); this
                // index is never executed here.
                return usize::MAX;
            }
            let compiled = compile_action(
                &parts,
                &specs,
                &mut executor,
                &schedule_plan,
                sig,
                mesh,
                options.partitioner,
            );
            match compiled {
                Ok(index) => index,
                Err(e) => {
                    failure.get_or_insert(e);
                    0
                }
            }
        })
        .map_err(|e| DriverError::Config(e.to_string()))?;
        if let Some(e) = failure {
            return Err(e);
        }
        let group_of_stage = |s: usize| schedule_plan.placement.actor(s as u32).map(|a| a as usize);
        let tied_setup = TiedSetup {
            parts: &parts,
            specs: &specs,
            mesh,
            partitioner: options.partitioner,
            group_of_stage: &group_of_stage,
            local: &local,
        };
        // A plan compiles nothing, its tied parameters' adding programs included.
        let tied = match options.plan_only {
            true => TiedAdds::default(),
            false => TiedAdds::compile(&tied_setup, &mut executor)?,
        };
        let (reduces, gathers) = match options.plan_only {
            true => (Relayouts::default(), Relayouts::default()),
            false => {
                let (reduced, gathered) = relayouts(&parts, &specs, &built, mesh, &local)?;
                let p = options.partitioner;
                (
                    Relayouts::compile(reduced, mesh, p, &mut executor, "the step's reduction")?,
                    Relayouts::compile(gathered, mesh, p, &mut executor, "the FSDP gather")?,
                )
            }
        };
        if let (Some(kind), false) = (&options.remat.offload, options.plan_only) {
            offload_residuals(&mut executor, client, kind, &built)?;
        }
        let layouts = Arc::new(value_layouts(&parts, &specs, &built, mesh)?);
        if let Some(p) = &processes {
            let partitioner = format!("{:?}", options.partitioner);
            p.agree(
                crate::processes::fingerprint(&built.plan, &layouts),
                &partitioner,
            )?;
        }
        Ok(CompiledPipeline {
            client: client.clone(),
            mesh: mesh.clone(),
            parts,
            run_plan: Arc::new(built.plan.clone()),
            built,
            executor: Arc::new(executor),
            run_options: RunOptions::from_env()?,
            params: params.to_vec(),
            microbatches,
            schedule_plan,
            processes,
            layouts,
            specs,
            tied,
            reduces,
            gathers,
            forward_only: options.forward_only,
        })
    }

    /// Whether the pipeline runs forwards only ([`PipelineOptions::forward_only`]): its steps
    /// return no gradient.
    pub fn is_forward_only(&self) -> bool {
        self.forward_only
    }

    /// How each value of the pipeline is laid out inside its group.
    pub fn specs(&self) -> &ValueSpecs {
        &self.specs
    }

    /// Whether this process runs `group`.
    pub fn is_local(&self, group: usize) -> bool {
        self.processes
            .as_ref()
            .is_none_or(|p| p.local_groups().contains(&group))
    }

    /// How each step's run is bounded (its deadline); from `TESSERA_TIMEOUT_S` or the default
    /// until set.
    pub fn run_options(&self) -> RunOptions {
        self.run_options
    }

    /// Sets how each step's run is bounded.
    pub fn set_run_options(&mut self, options: RunOptions) {
        self.run_options = options;
    }

    /// The memory of a step from its timings: measured per group and stage, and what the
    /// schedule predicts from the measured activation bytes.
    pub fn memory_report(&self, timings: &Timings) -> crate::memory::MemoryReport {
        let keys: HashMap<_, _> = self.built.ids.iter().map(|(&k, &v)| (v, k)).collect();
        crate::memory::report(&self.schedule_plan, &keys, timings)
    }

    /// The schedule's plan (for simulation and for checking the measured order).
    pub fn schedule_plan(&self) -> &tessera_schedule::Plan {
        &self.schedule_plan
    }

    /// Runs one step: `args[k]` is the value of loss argument `k` for parameters, and
    /// `data[mb][k]` its value for microbatch `mb` for data arguments.
    pub fn step(
        &self,
        args: &HashMap<usize, HostArray>,
        data: &[HashMap<usize, HostArray>],
    ) -> Result<StepOutput, DriverError> {
        let placed = args
            .iter()
            .map(|(&k, h)| (k, Placed::Host(h.clone())))
            .collect();
        let data: Vec<HashMap<usize, Placed>> = data
            .iter()
            .map(|d| {
                d.iter()
                    .map(|(&k, h)| (k, Placed::Host(h.clone())))
                    .collect()
            })
            .collect();
        let out = self.step_on_device(&placed, &data)?;
        let host = |a: &Option<DeviceArray>| -> Result<HostArray, DriverError> {
            a.as_ref()
                .ok_or_else(|| {
                    DriverError::Config(
                        "a result is held by another process; use step_on_device".into(),
                    )
                })?
                .to_host()
                .map_err(DriverError::from)
        };
        let aux = out
            .aux
            .iter()
            .map(|mb| mb.iter().map(host).collect::<Result<Vec<_>, _>>())
            .collect::<Result<_, _>>()?;
        Ok(StepOutput {
            grads: out.grads.iter().map(host).collect::<Result<_, _>>()?,
            losses: out.losses,
            aux,
            timings: out.timings,
        })
    }

    /// `values` as the process running `group` holds them: in a multi-process step, broadcast
    /// from it (every process calls this together, with vectors of one length); in one process,
    /// as they are.
    pub fn share_from_group(
        &self,
        group: usize,
        values: Vec<f64>,
    ) -> Result<Vec<f64>, DriverError> {
        let Some(processes) = &self.processes else {
            return Ok(values);
        };
        Ok(processes.broadcast(group, values)?)
    }

    /// The processes the pipeline spans (`None`: one process runs every group).
    pub fn processes(&self) -> Option<&Arc<dyn Processes>> {
        self.processes.as_ref()
    }

    /// How many auxiliary results (metrics) the loss returns after the loss itself.
    pub fn aux(&self) -> usize {
        self.parts.last().map_or(0, |p| p.shape.aux)
    }

    /// The group that runs `stage` (and holds its parameters).
    pub fn group_of_stage(&self, stage: usize) -> Option<usize> {
        self.schedule_plan
            .placement
            .actor(stage as u32)
            .map(|a| a as usize)
    }

    /// The first stage whose parameter loss argument `arg` is.
    pub fn stage_of_param(&self, arg: usize) -> Option<usize> {
        self.parts.iter().position(|p| p.param_args.contains(&arg))
    }

    /// The groups running a stage that reads parameter `arg` (more than one for a tied
    /// weight), in increasing order.
    pub fn groups_of_param(&self, arg: usize) -> Vec<usize> {
        let mut groups: Vec<usize> = self
            .stages_of_param(arg)
            .into_iter()
            .filter_map(|s| self.group_of_stage(s))
            .collect();
        groups.sort_unstable();
        groups.dedup();
        groups
    }

    /// The groups running a stage that reads data (non-parameter) loss argument `arg`, in
    /// increasing order.
    pub fn groups_of_data(&self, arg: usize) -> Vec<usize> {
        let mut groups: Vec<usize> = (0..self.parts.len())
            .filter(|&s| self.parts[s].data_args.contains(&arg))
            .filter_map(|s| self.group_of_stage(s))
            .collect();
        groups.sort_unstable();
        groups.dedup();
        groups
    }

    /// Like [`CompiledPipeline::step`], with parameters that may already be on their groups,
    /// leaving the gradients on device.
    pub fn step_on_device(
        &self,
        args: &HashMap<usize, Placed>,
        data: &[HashMap<usize, Placed>],
    ) -> Result<DeviceStepOutput, DriverError> {
        if data.len() != self.microbatches as usize {
            return Err(DriverError::Config(format!(
                "{} microbatches given, the pipeline runs {}",
                data.len(),
                self.microbatches
            )));
        }
        let missing = |k: usize| DriverError::Config(format!("no value for loss argument {k}"));
        let initial = self.place_inputs(args, data)?;
        let executor: Arc<dyn Executor<usize, DeviceArray>> = self.executor.clone();
        let (executor, transport, local): (_, Arc<dyn Transport<DeviceArray>>, _) =
            match &self.processes {
                Some(p) => (
                    p.executor(executor),
                    p.transport(&self.layouts)?,
                    p.local_groups(),
                ),
                None => (
                    executor,
                    Arc::new(DeviceCopyTransport::new(&self.mesh)),
                    (0..self.mesh.mpmd_dim()).collect(),
                ),
            };
        let out = run_local(
            self.run_plan.clone(),
            initial,
            executor,
            transport,
            &self.run_options,
            &local,
        )?;
        let mut results = out.results;
        self.reduces.apply(&self.executor, &mut results)?;
        let stages = self.parts.len();
        let mut by_arg: HashMap<usize, Option<DeviceArray>> = HashMap::new();
        let mut results = results.into_iter();
        // A forward-only plan returns no accumulator.
        let grad_stages = match self.forward_only {
            true => 0,
            false => stages,
        };
        for s in 0..grad_stages {
            for k in 0..self.parts[s].shape.params {
                let value = results
                    .next()
                    .ok_or_else(|| DriverError::Config("missing gradient".into()))?;
                let arg = self.parts[s].param_args[k];
                // A tied weight's gradient is the sum of the parts of every stage using it, kept
                // on the first of them; a part held by another process is `None` here, and
                // `sum_tied_across` brings it in.
                let value = match (by_arg.remove(&arg), value) {
                    (Some(Some(earlier)), Some(part)) => Some(self.add_part(arg, &earlier, &part)?),
                    (Some(Some(earlier)), None) => Some(earlier),
                    (_, value) => value,
                };
                by_arg.insert(arg, value);
            }
        }
        if let (Some(processes), false) = (&self.processes, self.forward_only) {
            self.sum_tied_across(processes.as_ref(), &mut by_arg)?;
        }
        let rest: Vec<Option<DeviceArray>> = results.collect();
        let m = self.microbatches as usize;
        let (losses, aux) = rest.split_at(m.min(rest.len()));
        let losses = self.losses(losses.to_vec())?;
        let per_mb = aux.len() / m.max(1);
        let aux = (0..m)
            .map(|mb| aux[mb * per_mb..(mb + 1) * per_mb].to_vec())
            .collect();
        let grads = match self.forward_only {
            true => Vec::new(),
            false => self
                .params
                .iter()
                .map(|k| by_arg.remove(k).ok_or_else(|| missing(*k)))
                .collect::<Result<_, _>>()?,
        };
        Ok(DeviceStepOutput {
            grads,
            losses,
            aux,
            timings: out.timings,
        })
    }
}

impl CompiledPipeline {
    /// `earlier + part`, two parts of the gradient of tied parameter argument `arg`, summed on
    /// the devices of `earlier`'s group.
    fn add_part(
        &self,
        arg: usize,
        earlier: &DeviceArray,
        part: &DeviceArray,
    ) -> Result<DeviceArray, DriverError> {
        let executor = self.executor.as_ref();
        (self.tied).add(&self.client, &self.mesh, executor, arg, earlier, part)
    }

    /// In a multi-process step, the gradient of a tied weight whose stages run in several
    /// processes: each process sends the sum of its parts to the process of the first stage,
    /// which adds them to its own (one exchange, every process calls it). Elsewhere it is `None`.
    fn sum_tied_across(
        &self,
        processes: &dyn crate::processes::Processes,
        by_arg: &mut HashMap<usize, Option<DeviceArray>>,
    ) -> Result<(), DriverError> {
        let (count, me) = processes.process_index();
        let mut tied: Vec<(usize, usize)> = Vec::new(); // (arg, owning process)
        for &arg in &self.params {
            let owners: std::collections::BTreeSet<usize> = self
                .groups_of_param(arg)
                .into_iter()
                .map(|g| processes.process_of(g))
                .collect();
            let first = self
                .stage_of_param(arg)
                .and_then(|s| self.group_of_stage(s));
            if let (true, Some(first)) = (owners.len() > 1, first) {
                tied.push((arg, processes.process_of(first)));
            }
        }
        if tied.is_empty() {
            return Ok(());
        }
        let mut outgoing: Vec<Vec<u8>> = vec![Vec::new(); count];
        for &(arg, owner) in &tied {
            if owner == me {
                continue;
            }
            if let Some(Some(part)) = by_arg.get(&arg) {
                let bytes = part.to_host()?;
                crate::processes::put_frame(&mut outgoing[owner], arg as u64, bytes.bytes());
            }
            by_arg.insert(arg, None);
        }
        let incoming = processes.exchange(outgoing)?;
        for message in incoming {
            let parts = crate::processes::frames(&message)
                .ok_or_else(|| DriverError::Config("a tied gradient part is cut short".into()))?;
            for (arg, bytes) in parts {
                let arg = arg as usize;
                let Some(Some(mine)) = by_arg.get(&arg) else {
                    return Err(DriverError::Config(format!(
                        "a part of the gradient of parameter argument {arg} arrived where its first stage does not run"
                    )));
                };
                let host = HostArray::from_bytes(
                    mine.element_type().dtype(),
                    mine.shape(),
                    bytes.to_vec(),
                )
                .map_err(crate::error::MpmdError::from)?;
                let theirs = DeviceArray::device_put(&self.client, &host, mine.sharding())?;
                let sum = self.add_part(arg, mine, &theirs)?;
                by_arg.insert(arg, Some(sum));
            }
        }
        Ok(())
    }

    /// The stages reading parameter argument `arg`, ascending.
    fn stages_of_param(&self, arg: usize) -> Vec<usize> {
        (0..self.parts.len())
            .filter(|&s| self.parts[s].param_args.contains(&arg))
            .collect()
    }

    /// The micro-batch losses from the run's loss results; in a multi-process step, broadcast
    /// from the group that computes them.
    fn losses(&self, results: Vec<Option<DeviceArray>>) -> Result<Vec<f64>, DriverError> {
        let to_f64 = |a: &DeviceArray| -> Result<f64, DriverError> {
            Ok(a.to_host()?
                .to_typed::<f32>()
                .and_then(|v| v.first().copied())
                .map_or(f64::NAN, f64::from))
        };
        let start = self.run_plan.results.len() - self.microbatches as usize * (1 + self.aux());
        let groups = &self.run_plan.results[start..start + results.len()];
        let Some(processes) = &self.processes else {
            return results
                .iter()
                .map(|r| {
                    to_f64(
                        r.as_ref()
                            .ok_or_else(|| DriverError::Config("missing loss".into()))?,
                    )
                })
                .collect();
        };
        let root = groups.first().map_or(0, |&(_, g)| g);
        if groups.iter().any(|&(_, g)| g != root) {
            return Err(DriverError::Config(
                "the micro-batch losses end on different groups; a multi-process step needs them on one".into(),
            ));
        }
        let mine = results
            .iter()
            .map(|r| r.as_ref().map_or(Ok(f64::NAN), to_f64))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(processes.broadcast(root, mine)?)
    }
}

/// The layout of every value the plan names: its global shape and element type, and its spec in
/// a group.
fn value_layouts(
    parts: &[StagePrograms],
    specs: &ValueSpecs,
    built: &PipelinePlan<usize>,
    mesh: &MpmdMesh,
) -> Result<HashMap<ValueId, OutputLayout>, DriverError> {
    let lowering = mesh.lowering_mesh();
    built
        .ids
        .iter()
        .map(|(&key, &id)| {
            let aval = key_aval(parts, key)
                .ok_or_else(|| DriverError::Config(format!("no type for {key:?}")))?;
            Ok((
                id,
                OutputLayout {
                    shape: aval.shape.clone(),
                    ty: element_type(aval.dtype)?,
                    spec: specs.spec(parts, key, lowering),
                },
            ))
        })
        .collect()
}

fn compile_action(
    parts: &[StagePrograms],
    specs: &ValueSpecs,
    executor: &mut PjrtExecutor,
    plan: &tessera_schedule::Plan,
    sig: &crate::pipeline::ActionSignature,
    mesh: &MpmdMesh,
    partitioner: Partitioner,
) -> Result<usize, DriverError> {
    let lowering = mesh.lowering_mesh();
    let group_size = lowering.device_ids().len();
    let part_body = |part: &PartSignature| -> PartBody<'static> {
        let program = parts[part.task.stage as usize].part_program(part);
        let unreduced = |keys: &[Key]| -> Vec<(usize, PartitionSpec)> {
            keys.iter()
                .map(|&k| specs.spec(parts, k, lowering))
                .enumerate()
                .filter(|(_, spec)| !spec.unreduced().is_empty())
                .collect()
        };
        let (outputs, inputs) = (unreduced(&part.outputs), unreduced(&part.inputs));
        let program = match outputs.is_empty() {
            true => program.clone(),
            false => keep_partial_sums(program, lowering.abstract_mesh(), &outputs, &inputs),
        };
        Box::new(move |b, args| lower_flat(b, &program, args))
    };
    let types = Types {
        parts,
        mesh: lowering,
        specs,
    };
    let programs = sig
        .parts
        .iter()
        .map(|part| parts[part.task.stage as usize].part_program(part));
    let partitioner = partitioner.for_callbacks(group_size, programs);
    let module = action_module(sig, &types, group_size, partitioner, &part_body)?;
    let group = plan.placement.actor(sig.parts[0].task.stage).unwrap_or(0) as usize;
    let layouts = sig
        .outputs
        .iter()
        .map(|&k| {
            let aval = key_aval(parts, k)
                .ok_or_else(|| DriverError::Config(format!("no type for {k:?}")))?;
            Ok(OutputLayout {
                shape: aval.shape.clone(),
                ty: element_type(aval.dtype)?,
                spec: specs.spec(parts, k, lowering),
            })
        })
        .collect::<Result<Vec<_>, DriverError>>()?;
    let donated = sig
        .inputs
        .iter()
        .enumerate()
        .filter(|(_, k)| accumulator_output(k, &sig.outputs).is_some())
        .map(|(i, _)| i)
        .collect();
    Ok(executor.compile_donating(&module, group, layouts, donated)?)
}

/// Adds `counts` into `into`, kind by kind.
pub(crate) fn add_counts(into: &mut BTreeMap<String, u64>, counts: &BTreeMap<String, u64>) {
    for (kind, n) in counts {
        *into.entry(kind.clone()).or_insert(0) += n;
    }
}
