//! What [`super::mpmd_jit_with`] takes besides the step: where the loop's schedule comes from.
//!
//! A `treduce` names its schedule. By default the name is looked up among the built-ins; a user
//! who wrote a schedule with the public [`Schedule`] trait either registers it under that name in
//! a [`Registry`] of their own, or hands the schedule object itself, which then replaces the
//! named one. Either way the schedule's plan is validated for the step's stages and micro-batch
//! count, and a plan that does not validate is refused with the validator's message.
//!
//! `timeout` bounds every wait of a step's pipeline (see [`crate::runtime::RunOptions`]);
//! `partitioner` picks XLA's Shardy or GSPMD for every program of the step.
//!
//! `in_specs` and `out_specs` lay the step's arguments and results out inside their groups
//! (JAX's `in_shardings`/`out_shardings` over a group's mesh; the group is the one whose stage
//! reads the argument): a parameter's spec is also its gradient's, its accumulators' and, by
//! default, the spec of the result that replaces it; micro-batch data's spec (after the
//! micro-batch axis) says which axes split the rows, and every activation splits its leading
//! dimension over the same axes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tessera_schedule::{Registry, Schedule, ScheduleParams};
use tessera_sharding::PartitionSpec;
use tessera_stablehlo::Partitioner;

use super::config;
use crate::driver::DriverError;

/// Options of [`super::mpmd_jit_with`].
#[derive(Clone, Default)]
pub struct MpmdJitOptions {
    /// The loop's schedule, replacing the one its `treduce` names. Its placement fixes the stage
    /// count, which must be the model's.
    pub schedule: Option<Arc<dyn Schedule + Send + Sync>>,
    /// Where the `treduce`'s schedule name is looked up when `schedule` is `None`; `None` means
    /// the built-ins ([`Registry::with_builtins`]).
    pub registry: Option<Arc<Registry>>,
    /// The deadline of every wait in a step; `None`: `TESSERA_TIMEOUT_S`, or
    /// [`crate::runtime::DEFAULT_TIMEOUT`].
    pub timeout: Option<Duration>,
    /// Step arguments whose device buffers the update reuses for its results (JAX's
    /// `donate_argnums`, e.g. the parameters): each must be read by one update piece on a
    /// group, which returns a result of its type. Run with
    /// [`super::MpmdJit::call_mpmd_donated`], which deletes the donated arrays.
    pub donate_argnums: Vec<usize>,
    /// Step arguments donated as `donate_argnums` are where the update allows it (one update
    /// piece on a group reads the argument and returns a result of its type and layout, e.g.
    /// optimizer state that mirrors a parameter), and kept where it does not (e.g. a small state
    /// the update computes on the host). [`super::MpmdJit::donated`] lists what is donated.
    pub donate_where_possible: Vec<usize>,
    /// Set in a process of a multi-process job (e.g. [`crate::mpi_job::MpiJob::processes`]):
    /// the step compiles and runs only this process's groups; results on other processes'
    /// groups are [`crate::MpmdArray`]s that are not addressable here.
    pub processes: Option<Arc<dyn crate::processes::Processes>>,
    /// The partitioner every program of the step is lowered and compiled for; `None`:
    /// [`Partitioner::default`] (`TESSERA_PARTITIONER`, else the built-in one).
    pub partitioner: Option<Partitioner>,
    /// The spec of step argument `i` inside its group (`None`, or past the end: replicated for
    /// parameters and other arguments, the rows of micro-batch data split over every axis of
    /// the group). It may name only a group's own axes (never the MPMD axis), and their sizes
    /// must divide the dimensions they split; micro-batch data leaves its micro-batch axis
    /// `None`. Optimizer state takes its parameter's spec.
    pub in_specs: Vec<Option<PartitionSpec>>,
    /// The spec of step result `k` inside its group (`None`, or past the end: the spec of step
    /// argument `k` when the result has its type, the carried-state convention of a training
    /// step, else replicated).
    pub out_specs: Vec<Option<PartitionSpec>>,
    /// Whether a step that one group runs whole compiles into one program
    /// ([`Fusion::Auto`], the default) or runs as the pipeline's tasks and update programs.
    pub fusion: Fusion,
    /// XLA options every program of the step is compiled with (JAX's `compiler_options`:
    /// `DebugOptions` fields by name, e.g. `xla_cpu_enable_fast_math`); part of the
    /// persistent compile cache's key.
    pub compiler_options: crate::runtime::CompilerOptions,
    /// Which forward values each stage's backward reads saved, and which it recomputes
    /// ([`crate::remat`]; default: every stage `everything_saveable`).
    pub remat: crate::remat::Remat,
    /// When a data-parallel group sums its gradients, losses and metrics over its data axes
    /// (default: once per step, [`crate::specs::GradReduce`]).
    pub grad_reduce: crate::specs::GradReduce,
    /// When a group gathers the parameters its `in_specs` split over its data-parallel axes
    /// (FSDP; default: once per step, [`crate::specs::FsdpGather`]).
    pub fsdp_gather: crate::specs::FsdpGather,
}

/// Whether [`super::mpmd_jit_with`] compiles a step into one program where it can.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fusion {
    /// On a mesh of one MPMD group in one process, the whole step (the code before the loop,
    /// the loop with its accumulation, the update) is one executable, as `jax.jit` of the step
    /// is: no task list, and [`super::MpmdStepRun::timings`] holds one task,
    /// [`super::FUSED_TASK`]. Elsewhere the pipeline runs.
    #[default]
    Auto,
    /// Always the pipeline's tasks and the update programs (e.g. to trace the schedule's
    /// tasks, or to measure its memory, on one group).
    Never,
}

impl fmt::Debug for MpmdJitOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpmdJitOptions")
            .field("schedule", &self.schedule.as_ref().map(|s| s.name()))
            .field("registry", &self.registry.as_ref().map(|r| r.names()))
            .field("timeout", &self.timeout)
            .field("donate_argnums", &self.donate_argnums)
            .field("donate_where_possible", &self.donate_where_possible)
            .field("partitioner", &self.partitioner)
            .field(
                "processes",
                &self.processes.as_ref().map(|p| p.local_groups()),
            )
            .field("in_specs", &self.in_specs)
            .field("out_specs", &self.out_specs)
            .field("fusion", &self.fusion)
            .field("grad_reduce", &self.grad_reduce)
            .field("fsdp_gather", &self.fsdp_gather)
            .finish()
    }
}

impl MpmdJitOptions {
    /// Options that run the loop under `schedule`.
    pub fn with_schedule(schedule: impl Schedule + Send + Sync + 'static) -> Self {
        MpmdJitOptions {
            schedule: Some(Arc::new(schedule)),
            ..Self::default()
        }
    }

    /// Options that look the `treduce`'s schedule name up in `registry`.
    pub fn with_registry(registry: Registry) -> Self {
        MpmdJitOptions {
            registry: Some(Arc::new(registry)),
            ..Self::default()
        }
    }

    /// The schedule the loop runs under: the given object, or `name` made by the registry for
    /// `params`.
    pub(super) fn resolve(
        &self,
        name: &str,
        params: ScheduleParams,
    ) -> Result<Resolved, DriverError> {
        if let Some(schedule) = &self.schedule {
            return Ok(Resolved::Given(schedule.clone()));
        }
        let made = match &self.registry {
            Some(registry) => registry.create(name, params),
            None => Registry::with_builtins().create(name, params),
        };
        made.map(Resolved::Made).map_err(|e| {
            config(format!(
                "the treduce's schedule '{name}' for {} stages on {} groups: {e}",
                params.stages, params.mpmd_dim
            ))
        })
    }
}

/// A resolved schedule: the user's object, or one a registry made.
pub(super) enum Resolved {
    Given(Arc<dyn Schedule + Send + Sync>),
    Made(Box<dyn Schedule>),
}

impl Resolved {
    pub(super) fn as_dyn(&self) -> &dyn Schedule {
        match self {
            Resolved::Given(s) => s.as_ref(),
            Resolved::Made(s) => s.as_ref(),
        }
    }
}
