//! The whole step as one program, when one group runs all of it ([`super::Fusion::Auto`] on a
//! mesh of one MPMD group, in one process): the code before the loop, the `treduce` (lowered to
//! a `stablehlo.while` accumulating every micro-batch's gradients), and the update compile into
//! a single executable, as `jax.jit` of the whole step does. XLA then fuses the update into the
//! backward pass's last writes, and a step is one dispatch, with no gradient handed from one
//! program to the next.
//!
//! The program is the step itself, with one more result when the loss combines by `Concat(0)`:
//! the loop's per-micro-batch losses (what [`super::MpmdStepRun::losses`] reports). Donated
//! arguments (`donate_argnums`, and those of `donate_where_possible` that can be) alias the
//! step result of their type and layout, preferring the result at their own position (the
//! carried-state convention of a training step). Every result stays on the group.

use tessera_ir::prim::ReduceOp;
use tessera_ir::{Atom, ClosedJaxpr, ShapedArray};
use tessera_pjrt::Array as DeviceArray;
use tessera_sharding::{NamedSharding, PartitionSpec};

use super::args::{MpmdStepRun, StepArg, StepPhases, StepResult};
use super::pieces::{PieceLayout, compile_program};
use super::shardings::StepSpecs;
use super::{PhaseClock, config};
use crate::array::MpmdArray;
use crate::driver::DriverError;
use crate::mesh::MpmdMesh;
use crate::runtime::trace::unix_now_us;
use crate::runtime::{PjrtExecutor, TaskTiming, Timings};
use crate::sharding::MpmdSharding;

/// The name of the fused program's one task in [`Timings`].
pub const FUSED_TASK: &str = "step (one program)";

/// A step compiled as one program for group 0.
pub(super) struct FusedStep {
    /// The program's index in the step's executor.
    index: usize,
    /// Whether the program's last result is the per-micro-batch losses.
    losses_result: bool,
    /// The step arguments the program donates.
    pub donated: Vec<usize>,
    /// Each argument's layout on group 0, made once.
    arg_shardings: Vec<NamedSharding>,
    /// Each step result's sharding (on group 0), made once.
    out_shardings: Vec<MpmdSharding>,
    /// Each argument's sharding as an [`MpmdArray`]'s (on group 0), for arrays placed ahead.
    arg_mpmd_shardings: Vec<MpmdSharding>,
}

/// What [`compile`] needs of the step.
pub(super) struct FusedSetup<'a> {
    pub mesh: &'a MpmdMesh,
    pub step: &'a ClosedJaxpr,
    /// The `treduce` equation's index in the step.
    pub loop_index: usize,
    /// How the loss combines over the micro-batches.
    pub loss_op: ReduceOp,
    pub specs: &'a StepSpecs,
    pub donate: &'a [usize],
    pub donate_where_possible: &'a [usize],
    pub partitioner: tessera_stablehlo::Partitioner,
}

/// Compiles the whole step for group 0 of `setup.mesh`.
pub(super) fn compile(
    executor: &mut PjrtExecutor,
    setup: &FusedSetup<'_>,
) -> Result<FusedStep, DriverError> {
    let mut program = setup.step.clone();
    let losses_result = setup.loss_op == ReduceOp::Concat(0);
    if losses_result {
        let losses = setup.step.jaxpr.eqns[setup.loop_index].outputs[0];
        program.jaxpr.outvars.push(Atom::Var(losses));
    }
    let mut outs = setup.specs.outs.clone();
    if losses_result {
        outs.push(PartitionSpec::replicated());
    }
    let (aliased, donated) = aliases(setup)?;
    let layout = PieceLayout {
        ins: &setup.specs.args,
        outs: &outs,
        aliased,
        partitioner: setup.partitioner,
    };
    let index = compile_program(executor, setup.mesh, &program, 0, layout)?;
    let group = setup.mesh.group(0)?;
    let arg_shardings = setup
        .specs
        .args
        .iter()
        .map(|spec| NamedSharding::new(group, spec.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let on_group_0 = |specs: &[PartitionSpec]| {
        specs
            .iter()
            .map(|spec| MpmdSharding::new(setup.mesh, [0], spec))
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(FusedStep {
        index,
        losses_result,
        donated,
        arg_shardings,
        out_shardings: on_group_0(&setup.specs.outs)?,
        arg_mpmd_shardings: on_group_0(&setup.specs.args)?,
    })
}

/// For each step argument the result it is donated to, and the donated arguments.
fn aliases(setup: &FusedSetup<'_>) -> Result<(Vec<Option<usize>>, Vec<usize>), DriverError> {
    let jaxpr = &setup.step.jaxpr;
    let (in_avals, out_avals) = (jaxpr.in_avals(), jaxpr.out_avals());
    let specs = setup.specs;
    let mut aliased = vec![None; in_avals.len()];
    let mut taken = vec![false; out_avals.len()];
    let mut donated = Vec::new();
    let optional = setup
        .donate_where_possible
        .iter()
        .filter(|a| !setup.donate.contains(a));
    let wanted = setup.donate.iter().map(|&a| (a, true));
    for (arg, required) in wanted.chain(optional.map(|&a| (a, false))) {
        let Some(aval) = in_avals.get(arg) else {
            return Err(config(format!(
                "donate_argnums names argument {arg}, but the step takes {}",
                in_avals.len()
            )));
        };
        let fits = |k: usize| {
            !taken[k] && &out_avals[k] == aval && specs.outs.get(k) == specs.args.get(arg)
        };
        let choice = if arg < out_avals.len() && fits(arg) {
            Some(arg)
        } else {
            (0..out_avals.len()).find(|&k| fits(k))
        };
        match choice {
            Some(k) => {
                taken[k] = true;
                aliased[arg] = Some(k);
                donated.push(arg);
            }
            None if required => {
                return Err(config(format!(
                    "argument {arg} is donated ({aval}), but no free result of the step has its \
                     type and layout to take its buffer; donate only arguments the step replaces"
                )));
            }
            None => {}
        }
    }
    Ok((aliased, donated))
}

/// What running a fused step needs of the compiled step.
pub(super) struct FusedRun<'a> {
    pub client: &'a tessera_pjrt::Client,
    pub mesh: &'a MpmdMesh,
    pub executor: &'a PjrtExecutor,
    pub specs: &'a StepSpecs,
    pub out_avals: &'a [ShapedArray],
    /// The step results the pipelined plan computes on the host (the loss and metrics): read
    /// back as the program ends and returned as host values, as that plan returns them.
    pub host_outputs: &'a [usize],
}

impl FusedStep {
    /// `host`, the value of argument `arg`, uploaded onto the layout the program takes it in.
    pub(super) fn place(
        &self,
        client: &tessera_pjrt::Client,
        arg: usize,
        host: &tessera_pjrt::HostArray,
    ) -> Result<MpmdArray, DriverError> {
        let (Some(sharding), Some(mpmd)) = (
            self.arg_shardings.get(arg),
            self.arg_mpmd_shardings.get(arg),
        ) else {
            return Err(config(format!(
                "the step has {} arguments, not an argument {arg}",
                self.arg_shardings.len()
            )));
        };
        let array = DeviceArray::device_put(client, host, sharding)?;
        Ok(MpmdArray::of_group(array, 0, mpmd))
    }

    /// Runs the step on `args` (already checked): each moved onto the layout the program was
    /// compiled for, the program run once, every result left on group 0.
    pub(super) fn run(
        &self,
        ctx: &FusedRun<'_>,
        args: &[StepArg],
    ) -> Result<MpmdStepRun, DriverError> {
        let mut clock = PhaseClock::start();
        let epoch_unix_us = unix_now_us();
        let group = ctx.mesh.group(0)?;
        let inputs = args
            .iter()
            .zip(ctx.specs.args.iter().zip(&self.arg_shardings))
            .enumerate()
            .map(|(i, (arg, (spec, sharding)))| match arg {
                StepArg::Host(h) => Ok(DeviceArray::device_put(ctx.client, h, sharding)?),
                StepArg::Mpmd(m) => {
                    let arrays = m.to_mpmd_local_arrays()?;
                    let a = arrays
                        .get(&0)
                        .or(arrays.values().next())
                        .ok_or_else(|| config(format!("argument {i} holds no array")))?;
                    // Last step's result, laid out as this step takes it: no check needed.
                    if a.sharding() == sharding {
                        return Ok(a.clone());
                    }
                    crate::cross_group::onto_group(ctx.client, a, group, spec)
                }
            })
            .collect::<Result<Vec<_>, DriverError>>()?;
        let arguments_ms = clock.lap();
        let refs: Vec<&DeviceArray> = inputs.iter().collect();
        let started_us = unix_now_us() - epoch_unix_us;
        // The host results and the per-micro-batch losses (the program's last result) are
        // asked for at launch, so their copies follow the program.
        let step_results = ctx.out_avals.len();
        let host_outputs: Vec<usize> = ctx
            .host_outputs
            .iter()
            .copied()
            .filter(|&k| self.out_shardings.get(k).is_some_and(replicated))
            .collect();
        let mut reads = host_outputs.clone();
        if self.losses_result {
            reads.push(step_results);
        }
        let (mut outs, mut hosts) = ctx
            .executor
            .execute_reading(self.index, &refs, &reads)
            .map_err(|e| config(e.to_string()))?;
        let tasks_ms = clock.lap();
        let losses = match self.losses_result {
            true => {
                outs.pop();
                let host = hosts.pop().ok_or_else(|| config("no losses came back"))?;
                per_micro_batch(&host)?
            }
            false => Vec::new(),
        };
        let mut on_host: std::collections::HashMap<usize, tessera_pjrt::HostArray> =
            host_outputs.into_iter().zip(hosts).collect();
        let results_ms = clock.lap();
        let outputs = outs
            .into_iter()
            .zip(&self.out_shardings)
            .enumerate()
            .map(|(k, (o, sharding))| match on_host.remove(&k) {
                Some(host) => StepResult::Host(host),
                None => StepResult::Mpmd(Box::new(MpmdArray::of_group(o, 0, sharding))),
            })
            .collect::<Vec<_>>();
        if outputs.len() != ctx.out_avals.len() {
            return Err(config(
                "the fused step returned the wrong number of results",
            ));
        }
        let timings = Timings {
            tasks: vec![TaskTiming {
                name: FUSED_TASK.to_owned(),
                group: 0,
                start_us: started_us,
                duration_us: tasks_ms * 1000.0,
            }],
            epoch_unix_us,
            ..Timings::default()
        };
        let phases = StepPhases {
            arguments_ms,
            tasks_ms,
            results_ms,
            update_ms: clock.lap(),
            ..StepPhases::default()
        };
        Ok(MpmdStepRun {
            outputs,
            losses,
            timings,
            phases,
        })
    }
}

/// Whether every device of the group holds the whole result.
fn replicated(sharding: &MpmdSharding) -> bool {
    sharding
        .group_sharding(0)
        .is_ok_and(|s| s.is_fully_replicated())
}

/// The per-micro-batch losses the program returned, on the host.
fn per_micro_batch(host: &tessera_pjrt::HostArray) -> Result<Vec<f64>, DriverError> {
    let dtype = host.dtype();
    Ok(crate::host::from_host(host, dtype)
        .map_err(|e| config(e.0))?
        .to_vec())
}
