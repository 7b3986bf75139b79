//! `mpmd_jit(step)`: a traced training step whose micro-batch loop is a `treduce` of
//! `value_and_grad_call(loss, argnums, ...)` runs as JAXPP runs it. The loss (with its
//! `pipeline_enter_stage` markers) is partitioned into stage tasks and pipelined over the MPMD
//! groups under the loop's schedule; the step's remaining code (the optimizer update) is split
//! by the groups whose parameters and gradients it reads and compiled for those groups, so the
//! update runs where the parameters live; what reads no parameter (the mean loss) runs on the
//! host interpreter.
//!
//! Arguments and results are laid out inside their groups as [`MpmdJitOptions::in_specs`] and
//! `out_specs` say (`shardings.rs`): the pipeline's values by the parameters' and data's specs,
//! the update pieces compiled with those in and out shardings, so parameters, gradients and
//! optimizer state stay sharded on their group from step to step.
//!
//! A loop whose body holds no `value_and_grad_call` is the loss itself (its results the loss,
//! then any metrics): it runs forward only ([`crate::driver::PipelineOptions::forward_only`]),
//! the schedule's placement with forwards only, each stage on the group holding its parameters
//! (the body's floating-point loop invariants that are step arguments), as JAXPP pipelines
//! inference: an eval loss on the parameters a training step left on the groups.
//!
//! What the loop may hold: code preparing the arguments of one `value_and_grad_call` (e.g.
//! `treduce_i`'s body slicing the batch by the micro-batch index), whose results are the loop's
//! results: the loss, combined by `Concat(0)`, `Add` or `Max`; the loss program's auxiliary
//! results (per-micro-batch metrics, [`tessera_ir::trace::value_and_grad_with_aux_call`]),
//! combined by `Concat(a)`, `Add` or `Max`; the gradients, combined by `Add`, `Max` or
//! `Concat(a)` (one kept per micro-batch, by `Concat` or a tied weight's `Max`, accumulates
//! stacked by the micro-batch, `stacked_grads.rs`); and, in any order
//! among them, metrics the body computes beside the call from its loss and auxiliary results,
//! the micro-batch and the parameters, combined by their own reduction (`whole_body.rs` moves
//! them into the loss program as more auxiliary results). The differentiated arguments are
//! loop invariants: step arguments, values the step computes before the loop, or values the
//! body computes from loop invariants alone (moved before the loop, `hoist.rs`), each
//! differentiated as the value it is (JAX's `value_and_grad` of its argument); or values that
//! differ per micro-batch (computed in the body from the micro-batch, or slices), whose
//! per-micro-batch gradients the loop combines through a zero probe (`stacked_grads.rs`); other
//! code of the body reading one reads its value, not its gradient. The loop's
//! other operands are step arguments (on the host, or on the groups' devices: micro-batches
//! are then sliced there, `data.rs`) or computed by the step's code before the loop, which is
//! compiled and runs on a group's devices each step, its results moved to the groups reading
//! them (`before.rs`; under several processes sent to the processes reading them,
//! `before_across.rs`).
//!
//! A step may hold several sequential top-level `treduce`s (a training loop then an eval loop
//! on the updated parameters, two accumulation loops whose gradients the update sums): it is cut
//! at its loops into steps of one loop each, run one after the other, the code between two
//! loops as the first one's update (`chain.rs`), in one process or under several.

mod agree;
mod analyze;
mod args;
mod before;
mod before_across;
mod by_yield;
mod chain;
mod crossing;
mod data;
mod donation;
mod fused;
mod hoist;
mod options;
mod phases;
mod pieces;
mod retrace;
mod shardings;
mod stacked_grads;
mod step_loops;
mod tied;
mod twice;
mod update;
mod update_across;
mod whole_body;

use std::collections::HashMap;

use tessera_ir::prim::{ReduceOp, TreduceParams};
use tessera_ir::{Array, ClosedJaxpr, ShapedArray};
use tessera_pjrt::{Client, ElementType, HostArray};
use tessera_schedule::ScheduleParams;
use tessera_sharding::PartitionSpec;

use crate::driver::{CompiledPipeline, DriverError, PipelineOptions};
use crate::mesh::MpmdMesh;
use crate::runtime::{PjrtExecutor, RunOptions, Timings};
use analyze::{LossInput, check_ops, find_loop, read_body, update_program};
pub use args::{MpmdStepRun, StepArg, StepPhases, StepResult};
pub use before::BeforeLoopRuns;
pub use by_yield::mpmd_jit_by_yield;
pub use fused::FUSED_TASK;
pub use options::{Fusion, MpmdJitOptions};
use pieces::{LoopResults, PieceInputs, PieceLayout, compile_piece, input_spec};
use shardings::{StepShape, StepSpecs};
pub use step_loops::{LoopKind, StepLoopsError};
use update::{Piece, Place};
pub use whole_body::LoopBodyError;

/// A compiled step.
pub struct MpmdJit {
    client: Client,
    mesh: MpmdMesh,
    pipeline: CompiledPipeline,
    loss_inputs: Vec<LossInput>,
    axis: usize,
    length: usize,
    /// How the loss and each auxiliary result combine over the micro-batches.
    host_ops: Vec<ReduceOp>,
    /// The types of the loss and of each auxiliary result of one micro-batch.
    host_avals: Vec<ShapedArray>,
    /// The step's code computing loop operands that are not step arguments (`before.rs`).
    before: Option<before::BeforeLoop>,
    in_avals: Vec<ShapedArray>,
    /// The types of the step's results.
    out_avals: Vec<ShapedArray>,
    num_outputs: usize,
    num_args: usize,
    /// The loop results the update reads on the host: the loss and the auxiliary results.
    num_host: usize,
    updates: PjrtExecutor,
    pieces: Vec<(Piece, Option<usize>)>,
    donated: Vec<usize>,
    /// For each step result, the groups it lives on (those of the parameter it updates; empty:
    /// where its update runs).
    homes: Vec<Vec<usize>>,
    /// The layouts of the step's arguments, results and pipeline values inside their groups.
    specs: StepSpecs,
    /// For each gradient the loop returns, the step argument of its parameter (`None`: a value
    /// the step computes before the loop).
    grad_args: Vec<Option<usize>>,
    /// Programs slicing micro-batches of data already on a group, compiled on first use.
    slicers: data::Slicers,
    /// The partitioner every program of the step is compiled for.
    partitioner: tessera_stablehlo::Partitioner,
    /// For an update mixing groups: its values crossing groups, computed before `pieces` run.
    crossing: Option<crossing::Crossing>,
    /// The whole step as one program, when one group runs it all ([`Fusion::Auto`]).
    fused: Option<fused::FusedStep>,
    /// For a step of several loops: this is the first loop's segment, the chain runs the others
    /// after it (`chain.rs`).
    chain: Option<Box<chain::Chain>>,
    /// For each gradient the loop returns, the group holding it after the loop.
    grad_groups: Vec<Option<usize>>,
    /// The step's identity, which the processes of a job compare before every call
    /// (`agree.rs`).
    identity: u64,
}

/// What one call returns besides the step's results.
#[derive(Debug)]
pub struct StepRun {
    /// The step's results, on the host.
    pub outputs: Vec<HostArray>,
    /// Each micro-batch's loss (see [`MpmdStepRun::losses`] for a step run as one program).
    pub losses: Vec<f64>,
    /// When each pipeline task ran.
    pub timings: Timings,
}

pub(super) fn config(message: impl Into<String>) -> DriverError {
    DriverError::Config(message.into())
}

/// Compiles `step` for `mesh`'s groups (see the module docs for what the step may hold), under
/// the built-in schedule its `treduce` names.
pub fn mpmd_jit(
    client: &Client,
    mesh: &MpmdMesh,
    step: &ClosedJaxpr,
) -> Result<MpmdJit, DriverError> {
    MpmdJit::new(client, mesh, step, &MpmdJitOptions::default())
}

/// Compiles `step` like [`mpmd_jit`], with the schedule (a user's own, or a registry the user
/// extended) and run options in `options`.
pub fn mpmd_jit_with(
    client: &Client,
    mesh: &MpmdMesh,
    step: &ClosedJaxpr,
    options: &MpmdJitOptions,
) -> Result<MpmdJit, DriverError> {
    MpmdJit::new(client, mesh, step, options)
}

impl MpmdJit {
    /// Partitions and compiles `step`.
    pub fn new(
        client: &Client,
        mesh: &MpmdMesh,
        step: &ClosedJaxpr,
        options: &MpmdJitOptions,
    ) -> Result<Self, DriverError> {
        let mut jit = Self::compile(client, mesh, step, options)?;
        jit.identity = agree::step_identity(step, (jit.in_specs(), jit.out_specs()));
        Ok(jit)
    }

    fn compile(
        client: &Client,
        mesh: &MpmdMesh,
        step: &ClosedJaxpr,
        options: &MpmdJitOptions,
    ) -> Result<Self, DriverError> {
        tessera_ir::verify(step).map_err(|e| config(e.to_string()))?;
        let loops = step_loops::top_level_loops(step)?;
        // Only the step run as one program runs host callbacks outside its loop.
        let one_program = options.fusion == Fusion::Auto
            && mesh.mpmd_dim() == 1
            && options.processes.is_none()
            && loops.len() == 1;
        if !one_program {
            crate::effects::refuse_effects_outside_loops(step)?;
        }
        if loops.len() > 1 {
            return chain::compile(client, mesh, step, options, &loops);
        }
        // A loop invariant differentiated at two argument positions gets a copy per position.
        let split = twice::split_repeated(step, step_loops::the_loop(step)?)?;
        let step = split.as_ref().unwrap_or(step);
        // Differentiated values the body computes from loop invariants move before the loop.
        let hoisted = hoist::hoist(step, step_loops::the_loop(step)?)?;
        let step = hoisted.as_ref().unwrap_or(step);
        let found = find_loop(step)?;
        let index = found.index;
        // A body computing metrics beside its call runs them in the call's loss program.
        let whole = whole_body::whole_body(step, index)?;
        let step = whole.as_ref().unwrap_or(step);
        // Gradients kept per micro-batch (`Concat`, of a value differing per micro-batch)
        // accumulate stacked (`stacked_grads.rs`); then a tied weight's `Max` too.
        let stacked = stacked_grads::stack_gradients(step, index, &[])?;
        let (step, found) = match &stacked {
            Some(stacked) => (stacked, find_loop(stacked)?),
            None => (step, found),
        };
        let tied_max = tied_max_args(step, found.index, &found.operands)?;
        let tied = match tied_max.is_empty() {
            true => None,
            false => stacked_grads::stack_gradients(step, found.index, &tied_max)?,
        };
        let (step, found) = match &tied {
            Some(tied) => (tied, find_loop(tied)?),
            None => (step, found),
        };
        let index = found.index;
        let jaxpr = &step.jaxpr;
        let p =
            TreduceParams::read(&jaxpr.eqns[index].params).map_err(|e| config(e.to_string()))?;
        let body = read_body(&p, &found.operands)?;
        check_ops(&p.ops, body.aux)?;
        let (loss, argnums, loss_inputs) = (&body.loss, &body.argnums, body.inputs.clone());
        let loss_params = &body.params;
        let num_host = 1 + body.aux;
        let host_ops = p.ops[..num_host].to_vec();
        let host_avals = loss.jaxpr.out_avals();
        let (in_avals, out_avals) = (jaxpr.in_avals(), jaxpr.out_avals());
        let shape = StepShape {
            in_avals: &in_avals,
            out_avals: &out_avals,
            loss_inputs: &loss_inputs,
            axis: p.axis,
        };
        let specs = shardings::step_specs(options, &shape, mesh.lowering_mesh(), mesh.mpmd_axis())?;
        let grad_args = shardings::grad_args(&loss_inputs, argnums)?;
        let stages = crate::partition::stage_count(loss)? as u32;
        let params = ScheduleParams {
            stages,
            mpmd_dim: mesh.mpmd_dim() as u32,
        };
        let schedule = options.resolve(&p.schedule, params)?;
        let length = p.length as usize;
        let partitioner = options.partitioner.unwrap_or_default();
        // One group in one process runs the whole step as one program.
        let fuse =
            options.fusion == Fusion::Auto && mesh.mpmd_dim() == 1 && options.processes.is_none();
        let pipeline_options = PipelineOptions {
            processes: options.processes.clone(),
            partitioner,
            specs: specs
                .values
                .clone()
                .with_grad_reduce(options.grad_reduce)
                .with_fsdp_gather(options.fsdp_gather),
            plan_only: fuse,
            compiler_options: options.compiler_options.clone(),
            forward_only: body.forward_only,
            max_grads: analyze::max_grads(&p.ops, body.aux, argnums),
            remat: options.remat.clone(),
        };
        let mut pipeline = CompiledPipeline::new_in(
            client,
            mesh,
            loss,
            loss_params,
            schedule.as_dyn(),
            length as u32,
            &pipeline_options,
        )?;
        if let Some(timeout) = options.timeout {
            pipeline.set_run_options(RunOptions { timeout });
        }
        let update = update_program(step, index)?;
        let n_args = jaxpr.invars.len();
        let group_of_arg = |arg: usize| {
            pipeline
                .stage_of_param(arg)
                .and_then(|s| pipeline.group_of_stage(s))
        };
        let mut place_of_input: Vec<Option<usize>> = vec![None; n_args];
        for (a, input) in loss_inputs.iter().enumerate() {
            if let LossInput::Param(i) = input {
                place_of_input[*i] = group_of_arg(a);
            }
        }
        place_of_input.extend(std::iter::repeat_n(None, num_host)); // the loss and the metrics
        let grad_groups: Vec<Option<usize>> = argnums.iter().map(|&a| group_of_arg(a)).collect();
        place_of_input.extend(grad_groups.iter().copied());
        // Result k updates step argument k when that is a parameter of the same type: it lives on
        // the groups of the stages reading that parameter.
        let homes: Vec<Vec<usize>> = (0..jaxpr.outvars.len())
            .map(|k| homes(&pipeline, &loss_inputs, (&in_avals, &out_avals), k, Some(k)))
            .collect();
        let mut updates =
            PjrtExecutor::new(client, mesh).with_compiler_options(&options.compiler_options);
        let mut pieces = Vec::new();
        let input_spec = |i: usize| input_spec(&specs, &grad_args, n_args, num_host, i);
        // An update mixing groups is cut at its small values crossing them (`phases.rs`).
        let (update, place_of_input, crossing) = match phases::cut(&update, &place_of_input)? {
            Some(cut) => {
                let mut places = place_of_input.clone();
                places.resize(cut.update.jaxpr.invars.len(), None);
                let last = cut.update.clone();
                let setup = crossing::CrossingSetup {
                    mesh,
                    pipeline: &pipeline,
                    place_of_input: &place_of_input,
                    input_spec: &input_spec,
                    partitioner,
                };
                let compiled = crossing::compile(&mut updates, cut, &setup)?;
                (last, places, Some(compiled))
            }
            None => (update, place_of_input, None),
        };
        let split = update::split(&update, &place_of_input)?;
        let same_layout = |i: usize, k: usize| input_spec(i) == specs.outs[k];
        let fused = match fuse {
            true => {
                let setup = fused::FusedSetup {
                    mesh,
                    step,
                    loop_index: index,
                    loss_op: host_ops[0],
                    specs: &specs,
                    donate: &options.donate_argnums,
                    donate_where_possible: &options.donate_where_possible,
                    partitioner,
                };
                Some(fused::compile(&mut updates, &setup)?)
            }
            false => None,
        };
        let donation = match &fused {
            // One program: donation is its own (`fused.rs`), the pieces are not compiled.
            Some(fused) => donation::Donation {
                aliases: split.iter().map(|p| vec![None; p.inputs.len()]).collect(),
                donated: fused.donated.clone(),
            },
            None => donation::aliases(
                &split,
                &options.donate_argnums,
                &options.donate_where_possible,
                n_args,
                &same_layout,
            )?,
        };
        for (piece, aliased) in split.into_iter().zip(donation.aliases) {
            let compiled = match piece.place {
                // A fused step runs its update inside its one program.
                Place::Group(_) if fused.is_some() => None,
                Place::Group(g) if pipeline.is_local(g) => {
                    let in_specs: Vec<_> = piece.inputs.iter().map(|&i| input_spec(i)).collect();
                    let out_specs: Vec<_> = piece
                        .outputs
                        .iter()
                        .map(|&k| specs.outs[k].clone())
                        .collect();
                    let layout = PieceLayout {
                        ins: &in_specs,
                        outs: &out_specs,
                        aliased,
                        partitioner,
                    };
                    Some(compile_piece(&mut updates, mesh, &piece, g, layout)?)
                }
                // Another process compiles and runs it.
                Place::Group(_) => None,
                Place::Host => None,
            };
            pieces.push((piece, compiled));
        }
        // The code before the loop runs on a group's devices (a fused step runs it inside its
        // one program).
        let before = match found.before {
            Some(code) => Some(before::BeforeLoop::new(
                code,
                &loss_inputs,
                (p.axis, length),
                fused.is_some(),
                &options.compiler_options,
            )?),
            None => None,
        };
        let jit = MpmdJit {
            client: client.clone(),
            mesh: mesh.clone(),
            pipeline,
            loss_inputs,
            axis: p.axis,
            length,
            host_ops,
            host_avals,
            before,
            in_avals,
            out_avals,
            num_outputs: jaxpr.outvars.len(),
            num_args: n_args,
            num_host,
            updates,
            pieces,
            donated: donation.donated,
            homes,
            specs,
            grad_args,
            slicers: data::Slicers::default(),
            partitioner,
            crossing,
            fused,
            chain: None,
            grad_groups,
            identity: 0,
        };
        jit.compile_before()?;
        Ok(jit)
    }

    /// Says which argument each result replaces (`replaces[k]`; by default result `k` replaces
    /// argument `k`): a result replacing a parameter lives on its groups. A step of several loops
    /// sets it for each segment, whose results and arguments are numbered apart (`chain.rs`).
    pub(super) fn set_replaced(&mut self, replaces: &[Option<usize>]) {
        let avals = (self.in_avals.as_slice(), self.out_avals.as_slice());
        self.homes = (0..self.num_outputs)
            .map(|k| {
                let arg = replaces.get(k).copied().flatten();
                homes(&self.pipeline, &self.loss_inputs, avals, k, arg)
            })
            .collect();
    }

    /// The step results the pipelined plan computes on the host (the loss and metrics).
    fn host_outputs(&self) -> Vec<usize> {
        let on_host = self
            .pieces
            .iter()
            .filter(|(p, _)| matches!(p.place, Place::Host));
        on_host
            .flat_map(|(p, _)| p.outputs.iter().copied())
            .collect()
    }

    /// Whether the whole step runs as one program ([`Fusion::Auto`] on one group): then
    /// [`MpmdJit::pipeline`] is its plan only (its tasks are not compiled), and a call's
    /// timings hold one task, [`FUSED_TASK`]. Results the pipelined plan would compute on the
    /// host (the loss and metrics) come back as host values here too. For a step of several
    /// loops, whether its first loop's segment runs as one program (each segment is one program
    /// on one group).
    pub fn is_fused(&self) -> bool {
        self.fused.is_some()
    }

    /// Argument `arg`'s host value placed where the step takes it, ahead of the call: a
    /// training loop calls this from another thread for the next step's batch while the current
    /// step runs (the method takes `&self`; `MpmdJit` is `Sync`). On a step compiled as one
    /// program ([`MpmdJit::is_fused`]) the value is uploaded onto the program's layout and the
    /// call passes it on without a copy; otherwise it stays on the host (the pipeline cuts it
    /// into micro-batches there). Only the step's arguments in this process's hands can be
    /// placed; the value's shape and type are checked by the call.
    pub fn place_ahead(&self, arg: usize, host: HostArray) -> Result<StepArg, DriverError> {
        if self.chain.is_some() {
            return Ok(StepArg::Host(host));
        }
        match &self.fused {
            Some(fused) => Ok(StepArg::Mpmd(Box::new(fused.place(
                &self.client,
                arg,
                &host,
            )?))),
            None => Ok(StepArg::Host(host)),
        }
    }

    /// For each step argument, whether this process reads it: a parameter of a stage on one of
    /// its groups, an input of an update piece run on one of them or on the host, or loop
    /// data. In one process every argument; under MPI a rank may pass anything of the right
    /// type for an argument it does not read (e.g. without loading it from a checkpoint), placed
    /// as the other ranks place it (from the host when they pass it from the host: the ranks
    /// compare every argument's shape, type and placement before each call, `agree.rs`).
    pub fn reads_here(&self) -> Vec<bool> {
        if let Some(chain) = &self.chain {
            return vec![true; chain.num_args()];
        }
        let everything = self.fused.is_some() || self.crossing.is_some() || self.before.is_some();
        let mut reads = vec![everything; self.num_args];
        let mut mark = |i: usize| {
            if let Some(r) = reads.get_mut(i) {
                *r = true;
            }
        };
        for (a, input) in self.loss_inputs.iter().enumerate() {
            match *input {
                LossInput::Param(i) => {
                    let groups = self.pipeline.groups_of_param(a);
                    if groups.iter().any(|&g| self.pipeline.is_local(g)) {
                        mark(i);
                    }
                }
                LossInput::Invariant(analyze::Operand::Arg(i))
                | LossInput::Sliced(analyze::Operand::Arg(i)) => mark(i),
                LossInput::ComputedParam(_) | LossInput::Invariant(_) | LossInput::Sliced(_) => {}
            }
        }
        for (piece, _) in &self.pieces {
            let here = match piece.place {
                Place::Group(g) => self.pipeline.is_local(g),
                Place::Host => true,
            };
            if here {
                piece.inputs.iter().for_each(|&i| mark(i));
            }
        }
        reads
    }

    /// How many times the step's code before its loop ran on a group's devices (in this
    /// process, or under several in the process of the group running it; never on the host
    /// interpreter), and on which group last (`None`: the step computes no loop operand before
    /// the loop, or runs as one program, [`MpmdJit::is_fused`]). For a step of several loops,
    /// the first loop's.
    pub fn before_loop_runs(&self) -> Option<BeforeLoopRuns> {
        match &self.fused {
            Some(_) => None,
            None => self.before.as_ref().map(before::BeforeLoop::runs),
        }
    }

    /// The spec of each step argument inside its group.
    pub fn in_specs(&self) -> &[PartitionSpec] {
        match &self.chain {
            Some(chain) => chain.in_specs(),
            None => &self.specs.args,
        }
    }

    /// The spec of each step result inside its group.
    pub fn out_specs(&self) -> &[PartitionSpec] {
        match &self.chain {
            Some(chain) => chain.out_specs(),
            None => &self.specs.outs,
        }
    }

    /// The step arguments the update donates (`donate_argnums`, and those of
    /// `donate_where_possible` it can donate): [`MpmdJit::call_mpmd_donated`] deletes them.
    pub fn donated(&self) -> &[usize] {
        match &self.chain {
            Some(chain) => chain.donated(),
            None => &self.donated,
        }
    }

    /// The pipeline that runs the loop (for a step run as one program, [`MpmdJit::is_fused`],
    /// its plan only: its schedule, stages and layouts, with no task compiled); for a step of
    /// several loops, the first loop's ([`MpmdJit::pipelines`] lists them all).
    pub fn pipeline(&self) -> &CompiledPipeline {
        &self.pipeline
    }

    /// The pipeline of each of the step's top-level `treduce` loops, in program order.
    pub fn pipelines(&self) -> Vec<&CompiledPipeline> {
        let mut all = vec![&self.pipeline];
        if let Some(chain) = &self.chain {
            all.extend(chain.pipelines());
        }
        all
    }

    /// The collectives one step executes on each group this process runs, by kind (`all-reduce`,
    /// `all-gather`, `reduce-scatter`, `all-to-all`, `collective-permute`): each pipeline's
    /// ([`CompiledPipeline::collectives_per_step`]) and each program of the update, the code
    /// before the loops and a step run as one program, once. Counted in XLA's optimized
    /// modules, so combined collectives count once. Indexed by group.
    pub fn collectives_per_step(
        &self,
    ) -> Result<Vec<std::collections::BTreeMap<String, u64>>, DriverError> {
        let mut per_group = vec![std::collections::BTreeMap::new(); self.mesh.mpmd_dim()];
        if self.fused.is_none() {
            for pipeline in self.pipelines() {
                for (g, counts) in pipeline.collectives_per_step()?.iter().enumerate() {
                    crate::driver::add_counts(&mut per_group[g], counts);
                }
            }
        }
        for program in 0..self.updates.programs().len() {
            if let Some(counted) = self.updates.collectives(program) {
                let (group, counts) = counted?;
                crate::driver::add_counts(&mut per_group[group], &counts);
            }
        }
        Ok(per_group)
    }

    /// The number of the step's top-level `treduce` loops, each run as its own pipeline.
    pub fn num_loops(&self) -> usize {
        self.chain.as_ref().map_or(1, |c| c.len())
    }

    /// Sets how the pipeline's runs are bounded (the deadline of every wait) from the next call
    /// on.
    pub fn set_run_options(&mut self, options: RunOptions) {
        self.pipeline.set_run_options(options);
        if let Some(chain) = &mut self.chain {
            chain.set_run_options(options);
        }
    }

    /// Where the code after the loop runs: for each piece, its group (`None`: the host) and the
    /// step results it computes (for a step of several loops, the code after the first loop up
    /// to the second, its results numbered as that segment returns them).
    pub fn update_places(&self) -> Vec<(Option<usize>, Vec<usize>)> {
        self.pieces
            .iter()
            .map(|(piece, _)| {
                let group = match piece.place {
                    Place::Group(g) => Some(g),
                    Place::Host => None,
                };
                (group, piece.outputs.clone())
            })
            .collect()
    }

    /// Runs the step on host arguments (one per step argument); results come back to the host.
    pub fn call(&self, args: &[HostArray]) -> Result<StepRun, DriverError> {
        let args: Vec<StepArg> = args.iter().cloned().map(StepArg::Host).collect();
        // Host arguments are copied to the groups, so donating those copies is harmless.
        let run = self.run(&args)?;
        let outputs = run
            .outputs
            .iter()
            .map(StepResult::to_host)
            .collect::<Result<_, _>>()?;
        Ok(StepRun {
            outputs,
            losses: run.losses,
            timings: run.timings,
        })
    }

    /// Runs the step. Arguments may be host arrays or arrays already on the MPMD groups (a
    /// parameter on the group of its stage, e.g. this step's own result from the last call);
    /// results computed on a group stay there as [`crate::MpmdArray`]s, the others come back to the
    /// host. Micro-batch data on a group is sliced there, each micro-batch then moved to the
    /// groups of the stages reading it.
    pub fn call_mpmd(&self, args: &[StepArg]) -> Result<MpmdStepRun, DriverError> {
        // Under several processes, every process checks first that all call it alike, so
        // that any refusal below is every process's.
        self.agree_on_call(args)?;
        if let Some(&a) = self
            .donated()
            .iter()
            .find(|&&a| matches!(args.get(a), Some(StepArg::Mpmd(_))))
        {
            return Err(config(format!(
                "the step donates argument {a}, an array on the groups; run it with call_mpmd_donated, which takes the donated arrays and deletes them"
            )));
        }
        self.run_agreed(args)
    }

    /// Runs a step that donates arguments ([`MpmdJitOptions::donate_argnums`]): like
    /// [`MpmdJit::call_mpmd`], then deletes the donated arrays on the groups (their buffers now
    /// hold results). Passing a deleted array again is an error naming the argument.
    pub fn call_mpmd_donated(&self, args: &mut [StepArg]) -> Result<MpmdStepRun, DriverError> {
        let mut run = self.run(args)?;
        let deleting = std::time::Instant::now();
        for &a in self.donated() {
            // An array of another process's groups holds nothing here to delete.
            if let Some(StepArg::Mpmd(m)) = args.get_mut(a)
                && m.is_partially_addressable()
            {
                m.delete()?;
            }
        }
        run.phases.release_ms += deleting.elapsed().as_secs_f64() * 1000.0;
        Ok(run)
    }

    fn run(&self, args: &[StepArg]) -> Result<MpmdStepRun, DriverError> {
        // Under several processes, every process checks first that all call it alike.
        self.agree_on_call(args)?;
        self.run_agreed(args)
    }

    /// Runs the step once the processes agreed on the call.
    fn run_agreed(&self, args: &[StepArg]) -> Result<MpmdStepRun, DriverError> {
        match &self.chain {
            Some(chain) => chain.run(self, args),
            None => self.run_loop(args),
        }
    }

    /// Runs the step of one loop (for a step of several, its first loop's segment).
    fn run_loop(&self, args: &[StepArg]) -> Result<MpmdStepRun, DriverError> {
        let mut clock = PhaseClock::start();
        self.check_args(args)?;
        if let Some(fused) = &self.fused {
            let check_ms = clock.lap();
            let ctx = fused::FusedRun {
                client: &self.client,
                mesh: &self.mesh,
                executor: &self.updates,
                specs: &self.specs,
                out_avals: &self.out_avals,
                host_outputs: &self.host_outputs(),
            };
            let mut run = fused.run(&ctx, args)?;
            run.phases.arguments_ms += check_ms;
            return Ok(run);
        }
        let mut params = HashMap::new();
        for (a, input) in self.loss_inputs.iter().enumerate() {
            if let LossInput::Param(i) = *input {
                // Under MPI, only this process's groups take parameters.
                let groups = self.pipeline.groups_of_param(a);
                if groups.iter().any(|&g| self.pipeline.is_local(g)) {
                    params.insert(a, args[i].placed()?);
                }
            }
        }
        let computed = self.computed_operands(args)?;
        self.computed_params(&computed, &mut params)?;
        let arguments_ms = clock.lap();
        let data = self.micro_batches(args, &computed)?;
        let microbatches_ms = clock.lap();
        let out = self.pipeline.step_on_device(&params, &data)?;
        let pipeline_ms = clock.lap();
        let mut results = LoopResults {
            host: self.host_results(&out.losses, &out.aux)?,
            grads: out.grads,
            crossing: Vec::new(),
        };
        if let Some(crossing) = &self.crossing {
            results.crossing = self.crossing_values(crossing, args, &results)?;
        }
        // Under MPI, the inputs of this process's pieces that other processes hold.
        let moved = self.move_update_inputs(args, &results)?;
        let results_ms = clock.lap();
        let inputs = PieceInputs {
            args,
            results: &results,
            moved: &moved,
        };
        let mut outputs: Vec<Option<StepResult>> = vec![None; self.num_outputs];
        let mut computed_here = HashMap::new();
        for (piece, compiled) in &self.pieces {
            let values = match (piece.place, compiled) {
                (Place::Group(g), Some(index)) => {
                    let outs = self.run_on_group(piece, *index, g, inputs)?;
                    let mut values = Vec::new();
                    for (&k, (array, raw)) in piece.outputs.iter().zip(outs) {
                        computed_here.insert(k, raw);
                        values.push(StepResult::Mpmd(Box::new(array)));
                    }
                    values
                }
                (Place::Group(g), None) => self.elsewhere(piece, g)?,
                _ => self
                    .run_on_host(piece, args, &results)?
                    .into_iter()
                    .map(StepResult::Host)
                    .collect::<Vec<_>>(),
            };
            for (&k, v) in piece.outputs.iter().zip(values) {
                outputs[k] = Some(v);
            }
        }
        self.share_results(&mut outputs, &computed_here)?;
        drop(computed_here);
        let outputs = outputs
            .into_iter()
            .map(|o| o.ok_or_else(|| config("a result of the step was not computed")))
            .collect::<Result<_, _>>()?;
        let tasks_ms = out.timings.task_span_ms().min(pipeline_ms);
        let update_ms = clock.lap();
        let (losses, timings) = (out.losses, out.timings);
        drop((params, data, computed, out.aux, results, moved));
        let phases = StepPhases {
            arguments_ms,
            microbatches_ms,
            tasks_ms,
            pipeline_rest_ms: pipeline_ms - tasks_ms,
            results_ms,
            update_ms,
            release_ms: clock.lap(),
        };
        Ok(MpmdStepRun {
            outputs,
            losses,
            timings,
            phases,
        })
    }

    fn check_args(&self, args: &[StepArg]) -> Result<(), DriverError> {
        check_args(args, &self.in_avals)?;
        self.held_by_readers(args)
    }

    /// The loop's loss and auxiliary results, each combined over the micro-batches by its
    /// operation (under MPI, the metrics are shared from the last stage's group first).
    fn host_results(
        &self,
        losses: &[f64],
        aux: &[Vec<Option<tessera_pjrt::Array>>],
    ) -> Result<Vec<HostArray>, DriverError> {
        let ir = |e: tessera_ir::IrError| config(e.to_string());
        let loss_dtype = self.host_avals[0].dtype;
        let mut per_result: Vec<Vec<Array>> = vec![
            losses
                .iter()
                .map(|&l| Array::new(loss_dtype, &[], vec![l]))
                .collect::<Result<_, _>>()
                .map_err(ir)?,
        ];
        if self.num_host > 1 {
            per_result.extend(self.aux_values(aux)?);
        }
        per_result
            .into_iter()
            .zip(&self.host_ops)
            .map(|(values, &op)| {
                let combined = tessera_ir::prim::combine_micro_batches(values, op).map_err(ir)?;
                crate::host::to_host(&combined).map_err(|e| config(e.0))
            })
            .collect()
    }

    /// Each auxiliary result's value per micro-batch.
    fn aux_values(
        &self,
        aux: &[Vec<Option<tessera_pjrt::Array>>],
    ) -> Result<Vec<Vec<Array>>, DriverError> {
        let avals = &self.host_avals[1..];
        let last = self.pipeline.schedule_plan().num_stages.saturating_sub(1) as usize;
        let group = self.pipeline.group_of_stage(last).unwrap_or(0);
        let held: Vec<Option<tessera_pjrt::Array>> = aux.iter().flatten().cloned().collect();
        let every: Vec<ShapedArray> = aux.iter().flat_map(|_| avals.iter().cloned()).collect();
        let flat = self.shared_from_group(group, &held, &every)?;
        let mut values: Vec<Vec<Array>> = vec![Vec::new(); avals.len()];
        for (i, value) in flat.into_iter().enumerate() {
            values[i % avals.len().max(1)].push(value);
        }
        Ok(values)
    }

    /// Values of types `avals` that the process running `group` holds (`None` elsewhere), on the
    /// host of every process: broadcast from that process under MPI.
    pub(super) fn shared_from_group(
        &self,
        group: usize,
        held: &[Option<tessera_pjrt::Array>],
        avals: &[ShapedArray],
    ) -> Result<Vec<Array>, DriverError> {
        let mut flat = Vec::new();
        for (a, aval) in held.iter().zip(avals) {
            match a {
                Some(a) => {
                    let host = crate::host::from_host(&a.to_host()?, aval.dtype)
                        .map_err(|e| config(e.0))?;
                    flat.extend(host.to_vec());
                }
                None => flat.extend(std::iter::repeat_n(f64::NAN, aval.size())),
            }
        }
        let flat = self.pipeline.share_from_group(group, flat)?;
        let mut at = 0;
        avals
            .iter()
            .map(|aval| {
                let part = flat
                    .get(at..at + aval.size())
                    .ok_or_else(|| config("a value shared between the processes is short"))?;
                at += aval.size();
                Array::new(aval.dtype, &aval.shape, part.to_vec())
                    .map_err(|e| config(e.to_string()))
            })
            .collect()
    }
}

/// The groups step result `k` lives on when it replaces step argument `replaces`: those of the
/// stages reading that argument when it is a parameter of the result's type; none (where its
/// update runs) otherwise.
fn homes(
    pipeline: &CompiledPipeline,
    loss_inputs: &[LossInput],
    (in_avals, out_avals): (&[ShapedArray], &[ShapedArray]),
    k: usize,
    replaces: Option<usize>,
) -> Vec<usize> {
    let Some(arg) = replaces.filter(|&i| in_avals.get(i) == out_avals.get(k)) else {
        return Vec::new();
    };
    loss_inputs
        .iter()
        .position(|input| matches!(input, LossInput::Param(i) if *i == arg))
        .map(|a| pipeline.groups_of_param(a))
        .unwrap_or_default()
}

/// Whether `args` are live arrays of the types `in_avals`, one per step argument.
pub(super) fn check_args(args: &[StepArg], in_avals: &[ShapedArray]) -> Result<(), DriverError> {
    if args.len() != in_avals.len() {
        return Err(config(format!(
            "the step takes {} arguments, got {}",
            in_avals.len(),
            args.len()
        )));
    }
    for (i, (a, aval)) in args.iter().zip(in_avals).enumerate() {
        if matches!(a, StepArg::Mpmd(m) if m.is_deleted()) {
            return Err(config(format!(
                "argument {i} of the step ({aval}) is a deleted array (donated to an earlier call, or deleted); pass a live array"
            )));
        }
        let (dims, ty) = a.signature();
        if dims != aval.shape.as_slice() || ty != ElementType::from_dtype(aval.dtype) {
            return Err(config(format!(
                "argument {i} is {ty:?}{dims:?}, the step takes {aval}"
            )));
        }
    }
    Ok(())
}

/// Milliseconds between successive laps.
struct PhaseClock(std::time::Instant);

impl PhaseClock {
    fn start() -> Self {
        PhaseClock(std::time::Instant::now())
    }

    /// The milliseconds since the last lap (or the start).
    fn lap(&mut self) -> f64 {
        let now = std::time::Instant::now();
        let ms = now.duration_since(self.0).as_secs_f64() * 1000.0;
        self.0 = now;
        ms
    }
}

/// The loop invariants differentiated by the loop at `index` whose gradients it combines by
/// `Max` and that several stages read (tied weights): their per-micro-batch gradients are sums
/// of the stages' parts, so they are kept per micro-batch and maximized after the loop
/// (`stacked_grads.rs`).
fn tied_max_args(
    step: &ClosedJaxpr,
    index: usize,
    operands: &[analyze::Operand],
) -> Result<Vec<usize>, DriverError> {
    let p =
        TreduceParams::read(&step.jaxpr.eqns[index].params).map_err(|e| config(e.to_string()))?;
    let body = read_body(&p, operands)?;
    let maxed = analyze::max_grads(&p.ops, body.aux, &body.argnums);
    if maxed.is_empty() || body.forward_only {
        return Ok(Vec::new());
    }
    let parts = crate::partition::partition(&body.loss, &body.params)?;
    Ok(maxed
        .into_iter()
        .filter(|a| parts.iter().filter(|p| p.param_args.contains(a)).count() > 1)
        .collect())
}
