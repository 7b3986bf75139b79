//! The step's code before its `treduce` (e.g. normalizing the data batch, scaling an array,
//! `treduce_i`'s micro-batch indices) runs on the groups' devices, as JAXPP runs the whole
//! partitioned step there. It is compiled as one program from the step arguments it reads to
//! each loop operand it computes, a sliced operand as its every micro-batch (so no slicing is
//! left for the host), for the group it runs on: the group holding its first device-array
//! argument, else the group of the first stage (compiled for that group with the step, so a
//! program the groups cannot run is refused then; for another group on first use). Its results
//! are device arrays, replicated in their group (operands computed before the loop are laid out
//! by default, `shardings.rs`), that the pipeline moves to the groups of the stages reading them
//! (device to device where it can), like micro-batches of data already on a group.
//!
//! The host interpreter runs it only under several processes (MPI): its results would have to
//! reach other processes' groups, and values cross processes only through the pipeline's own
//! transport, so every process computes them on its host from the arguments (which is why every
//! process reads every argument of such a step, [`super::MpmdJit::reads_here`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tessera_ir::trace::{Tensor, call_closed, trace};
use tessera_ir::{Array, Atom, ClosedJaxpr, ShapedArray};
use tessera_pjrt::{Array as DeviceArray, HostArray};
use tessera_sharding::{NamedSharding, PartitionSpec};

use super::analyze::{LossInput, Operand};
use super::pieces::{PieceLayout, compile_program};
use super::{MpmdJit, StepArg, config};
use crate::driver::{DriverError, Placed};
use crate::host::{from_host, to_host};
use crate::runtime::{CompilerOptions, PjrtExecutor};

/// How many times the code before the loop ran where, since the step was compiled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BeforeLoopRuns {
    /// Runs as a compiled program on a group's devices.
    pub on_groups: usize,
    /// Runs on the host interpreter (under several processes only).
    pub on_host: usize,
    /// The group of the last run on a group's devices.
    pub last_group: Option<usize>,
}

/// A loop operand the code before the loop computed.
pub(super) enum Computed {
    /// On the host (the interpreter's result).
    Host(HostArray),
    /// On a group, whole (a loop invariant).
    Whole(Box<DeviceArray>),
    /// On a group, micro-batch by micro-batch (sliced data).
    Slices(Vec<DeviceArray>),
}

/// The code before the loop, and where it runs.
pub(super) struct BeforeLoop {
    /// All step arguments to the computed loop operands, for the host interpreter.
    host: ClosedJaxpr,
    /// The program the groups run; `None`: the host runs it.
    device: Option<DeviceBefore>,
    on_groups: AtomicUsize,
    on_host: AtomicUsize,
    /// The group of the last run on the groups, plus one (0: none yet).
    last_group: AtomicUsize,
}

/// The code before the loop as the groups run it.
struct DeviceBefore {
    /// The step arguments `reads` to the computed operands (a sliced one as its micro-batches).
    program: ClosedJaxpr,
    /// The step arguments the program reads, in its argument order.
    reads: Vec<usize>,
    /// For each computed operand, whether it is returned micro-batch by micro-batch.
    sliced: Vec<bool>,
    compiler_options: CompilerOptions,
    /// The executor, and the index of the program compiled for each group.
    compiled: Mutex<Option<Executors>>,
}

/// An executor, and the index in it of the program compiled for each group.
type Executors = (PjrtExecutor, HashMap<usize, usize>);

impl BeforeLoop {
    /// The code before the loop (`before`: step arguments to the computed operands), run on the
    /// groups unless `on_host`.
    pub(super) fn new(
        before: ClosedJaxpr,
        loss_inputs: &[LossInput],
        (axis, length): (usize, usize),
        on_host: bool,
        compiler_options: &CompilerOptions,
    ) -> Result<Self, DriverError> {
        let device = match on_host {
            true => None,
            false => {
                let n = before.jaxpr.outvars.len();
                let sliced: Vec<bool> = (0..n)
                    .map(|c| {
                        loss_inputs.iter().any(
                            |i| matches!(i, LossInput::Sliced(Operand::Computed(d)) if *d == c),
                        )
                    })
                    .collect();
                let (program, reads) = device_program(&before, &sliced, axis, length)?;
                Some(DeviceBefore {
                    program,
                    reads,
                    sliced,
                    compiler_options: compiler_options.clone(),
                    compiled: Mutex::new(None),
                })
            }
        };
        Ok(BeforeLoop {
            host: before,
            device,
            on_groups: AtomicUsize::new(0),
            on_host: AtomicUsize::new(0),
            last_group: AtomicUsize::new(0),
        })
    }

    pub(super) fn runs(&self) -> BeforeLoopRuns {
        BeforeLoopRuns {
            on_groups: self.on_groups.load(Ordering::Relaxed),
            on_host: self.on_host.load(Ordering::Relaxed),
            last_group: self.last_group.load(Ordering::Relaxed).checked_sub(1),
        }
    }
}

/// `before` with each sliced result cut into its micro-batches along `axis`, reading only the
/// step arguments it uses: the program, and those arguments.
fn device_program(
    before: &ClosedJaxpr,
    sliced: &[bool],
    axis: usize,
    length: usize,
) -> Result<(ClosedJaxpr, Vec<usize>), DriverError> {
    let avals = before.jaxpr.in_avals();
    let out_avals = before.jaxpr.out_avals();
    let whole = trace(&avals, |args| {
        let refs: Vec<&Tensor> = args.iter().collect();
        let outs = call_closed(before, &refs);
        let mut results = Vec::new();
        for ((out, &cut), aval) in outs.iter().zip(sliced).zip(&out_avals) {
            match cut {
                false => results.push(out.clone()),
                true => results.extend(micro_batches(out, aval, axis, length)),
            }
        }
        results
    })
    .map_err(|e| config(format!("the code before the loop: {e}")))?;
    let mut program =
        tessera_ir::passes::eliminate_dead_code(&tessera_ir::passes::inline_calls(&whole));
    let jaxpr = &program.jaxpr;
    let used = |v| {
        let atom = Atom::Var(v);
        jaxpr.outvars.contains(&atom) || jaxpr.eqns.iter().any(|e| e.inputs.contains(&atom))
    };
    let reads: Vec<usize> = (0..jaxpr.invars.len())
        .filter(|&i| used(jaxpr.invars[i]))
        .collect();
    let kept: Vec<_> = reads.iter().map(|&i| jaxpr.invars[i]).collect();
    program.jaxpr.invars = kept;
    Ok((program, reads))
}

/// Micro-batches `0..length` of `x` (of type `aval`) along `axis`, without that dimension.
fn micro_batches(x: &Tensor, aval: &ShapedArray, axis: usize, length: usize) -> Vec<Tensor> {
    let mut dims = aval.shape.clone();
    if axis < dims.len() {
        dims.remove(axis);
    }
    (0..length as i64)
        .map(|mb| Tensor::slice_axis(x, axis, mb, mb + 1).reshape(&dims))
        .collect()
}

impl MpmdJit {
    /// The loop operands the step computes before the loop: on a group's devices, or (under
    /// several processes) on the host interpreter.
    pub(super) fn computed_operands(&self, args: &[StepArg]) -> Result<Vec<Computed>, DriverError> {
        let Some(before) = &self.before else {
            return Ok(Vec::new());
        };
        match &before.device {
            Some(device) => {
                let group = self.before_group(device, args)?;
                let values = self.before_on_group(device, group, args)?;
                before.on_groups.fetch_add(1, Ordering::Relaxed);
                before.last_group.store(group + 1, Ordering::Relaxed);
                Ok(values)
            }
            None => {
                let values = before_on_host(&before.host, args)?;
                before.on_host.fetch_add(1, Ordering::Relaxed);
                Ok(values.into_iter().map(Computed::Host).collect())
            }
        }
    }

    /// The differentiated loop invariants the code before the loop computed
    /// ([`LossInput::ComputedParam`]), added to `params` by loss argument: each on every group
    /// of this process running a stage that reads it (moved there from the group that computed
    /// it), or on the host under several processes.
    pub(super) fn computed_params(
        &self,
        computed: &[Computed],
        params: &mut HashMap<usize, Placed>,
    ) -> Result<(), DriverError> {
        for (a, input) in self.loss_inputs.iter().enumerate() {
            let LossInput::ComputedParam(c) = *input else {
                continue;
            };
            let groups: Vec<usize> = self
                .pipeline
                .groups_of_param(a)
                .into_iter()
                .filter(|&g| self.pipeline.is_local(g))
                .collect();
            if groups.is_empty() {
                continue;
            }
            let placed = match computed.get(c) {
                Some(Computed::Host(h)) => Placed::Host(h.clone()),
                Some(Computed::Whole(d)) => {
                    let spec = self.pipeline.specs().param(a);
                    let mut arrays = BTreeMap::new();
                    for g in groups {
                        let mesh = self.mesh.group(g)?;
                        let moved = crate::cross_group::onto_group(&self.client, d, mesh, &spec)?;
                        arrays.insert(g, moved);
                    }
                    Placed::PerGroup(arrays)
                }
                _ => {
                    return Err(config(format!(
                        "loop invariant {a}, differentiated, was not computed whole by the code \
                         before the loop"
                    )));
                }
            };
            params.insert(a, placed);
        }
        Ok(())
    }

    /// The group the code before the loop runs on: that of its first argument already on a
    /// group, else the first stage's.
    fn before_group(&self, device: &DeviceBefore, args: &[StepArg]) -> Result<usize, DriverError> {
        for &i in &device.reads {
            if let StepArg::Mpmd(m) = &args[i]
                && let Some(&g) = m.to_mpmd_local_arrays()?.keys().next()
            {
                return Ok(g);
            }
        }
        Ok(self.pipeline.group_of_stage(0).unwrap_or(0))
    }

    /// Compiles the code before the loop for the group it runs on from host arguments (the first
    /// stage's), so that a program the groups cannot run is refused when the step is compiled.
    pub(super) fn compile_before(&self) -> Result<(), DriverError> {
        let Some(device) = self.before.as_ref().and_then(|b| b.device.as_ref()) else {
            return Ok(());
        };
        let group = self.pipeline.group_of_stage(0).unwrap_or(0);
        let mut guard = device
            .compiled
            .lock()
            .map_err(|_| config("compiling the code before the loop panicked"))?;
        self.compiled_for(device, group, &mut guard).map(|_| ())
    }

    /// The executor, and the index in it of the code before the loop compiled for `group`
    /// (compiled now if it is not yet).
    fn compiled_for<'a>(
        &self,
        device: &DeviceBefore,
        group: usize,
        guard: &'a mut Option<Executors>,
    ) -> Result<(&'a PjrtExecutor, usize), DriverError> {
        let (executor, compiled) = guard.get_or_insert_with(|| {
            let executor = PjrtExecutor::new(&self.client, &self.mesh)
                .with_compiler_options(&device.compiler_options);
            (executor, HashMap::new())
        });
        if let Some(&index) = compiled.get(&group) {
            return Ok((executor, index));
        }
        let ins: Vec<PartitionSpec> = device
            .reads
            .iter()
            .map(|&i| self.specs.args[i].clone())
            .collect();
        let outs = vec![PartitionSpec::replicated(); device.program.jaxpr.outvars.len()];
        let layout = PieceLayout {
            ins: &ins,
            outs: &outs,
            aliased: vec![None; ins.len()],
            partitioner: self.partitioner,
        };
        let index = compile_program(executor, &self.mesh, &device.program, group, layout)
            .map_err(|e| config(format!("compiling the code before the loop: {e}")))?;
        compiled.insert(group, index);
        Ok((executor, index))
    }

    fn before_on_group(
        &self,
        device: &DeviceBefore,
        group: usize,
        args: &[StepArg],
    ) -> Result<Vec<Computed>, DriverError> {
        let mesh = self.mesh.group(group)?;
        let inputs = device
            .reads
            .iter()
            .map(|&i| {
                let spec = &self.specs.args[i];
                match &args[i] {
                    StepArg::Host(h) => {
                        let sharding = NamedSharding::new(mesh, spec.clone())?;
                        Ok(DeviceArray::device_put(&self.client, h, &sharding)?)
                    }
                    StepArg::Mpmd(m) => {
                        let arrays = m.to_mpmd_local_arrays()?;
                        let array = arrays.get(&group).or(arrays.values().next()).ok_or_else(
                            || {
                                config(format!(
                                    "argument {i} of the step holds no array in this process; the \
                                     code before the loop reads it"
                                ))
                            },
                        )?;
                        crate::cross_group::onto_group(&self.client, array, mesh, spec)
                    }
                }
            })
            .collect::<Result<Vec<_>, DriverError>>()?;
        let mut guard = device
            .compiled
            .lock()
            .map_err(|_| config("compiling the code before the loop panicked"))?;
        let (executor, index) = self.compiled_for(device, group, &mut guard)?;
        let refs: Vec<&DeviceArray> = inputs.iter().collect();
        let mut outs = executor
            .execute(index, &refs)
            .map_err(|e| config(format!("running the code before the loop: {e}")))?
            .into_iter();
        let mut values = Vec::new();
        for &cut in &device.sliced {
            let missing = || config("the code before the loop returned too few values");
            values.push(match cut {
                false => Computed::Whole(Box::new(outs.next().ok_or_else(missing)?)),
                true => {
                    let slices: Vec<DeviceArray> = outs.by_ref().take(self.length).collect();
                    if slices.len() != self.length {
                        return Err(missing());
                    }
                    Computed::Slices(slices)
                }
            });
        }
        Ok(values)
    }
}

/// The code before the loop on the host interpreter, from every argument it reads (copied to
/// the host).
fn before_on_host(before: &ClosedJaxpr, args: &[StepArg]) -> Result<Vec<HostArray>, DriverError> {
    let jaxpr = &before.jaxpr;
    let read = |v| {
        let atom = Atom::Var(v);
        jaxpr.outvars.contains(&atom) || jaxpr.eqns.iter().any(|e| e.inputs.contains(&atom))
    };
    let inputs = jaxpr
        .invars
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let aval = jaxpr.aval(v);
            match read(v) {
                true => from_host(&args[i].to_host()?, aval.dtype).map_err(|e| config(e.0)),
                false => Ok(Array::zeros(aval)),
            }
        })
        .collect::<Result<Vec<_>, DriverError>>()?;
    tessera_ir::interp::eval_closed(before, &inputs)
        .map_err(|e| config(format!("the code before the loop: {e}")))?
        .iter()
        .map(|o| to_host(o).map_err(|e| config(e.0)))
        .collect()
}
