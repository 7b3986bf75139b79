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
//! Under several processes (MPI, one process per group) it runs on the devices of the group
//! holding its first argument already on a group (else the first stage's group), in that
//! group's process; arguments held only by other processes come to it, and its results go to
//! the processes whose stages read them, over [`crate::processes::Processes::exchange`]
//! (`before_across.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tessera_ir::trace::{Tensor, call_closed, trace};
use tessera_ir::{Atom, ClosedJaxpr, ShapedArray};
use tessera_pjrt::{Array as DeviceArray, HostArray};
use tessera_sharding::{NamedSharding, PartitionSpec};

use super::analyze::{LossInput, Operand};
use super::pieces::{PieceLayout, compile_program};
use super::{MpmdJit, StepArg, config};
use crate::driver::{DriverError, Placed};
use crate::runtime::{CompilerOptions, PjrtExecutor};

/// How many times the code before the loop ran where, since the step was compiled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BeforeLoopRuns {
    /// Runs as a compiled program on a group's devices.
    pub on_groups: usize,
    /// Runs on the host interpreter: none (it runs on a group's devices in one process and
    /// under several processes alike; the field stays for callers counting both).
    pub on_host: usize,
    /// The group of the last run on a group's devices.
    pub last_group: Option<usize>,
}

/// A loop operand the code before the loop computed.
pub(super) enum Computed {
    /// On the host: a whole value another process computed and sent.
    Host(HostArray),
    /// On a group, whole (a loop invariant).
    Whole(Box<DeviceArray>),
    /// On a group, micro-batch by micro-batch (sliced data).
    Slices(Vec<DeviceArray>),
    /// On the host, micro-batch by micro-batch: sliced data another process computed and sent.
    HostSlices(Vec<HostArray>),
    /// Computed by another process and read by no stage of this one.
    Elsewhere,
}

/// The code before the loop, and where it runs.
pub(super) struct BeforeLoop {
    /// All step arguments to the computed loop operands (its results' types).
    code: ClosedJaxpr,
    /// The program the groups run; `None`: the step runs as one program, which computes it.
    device: Option<DeviceBefore>,
    on_groups: AtomicUsize,
    /// The group of the last run on the groups, plus one (0: none yet).
    last_group: AtomicUsize,
}

/// The code before the loop as the groups run it.
pub(super) struct DeviceBefore {
    /// The step arguments `reads` to the computed operands (a sliced one as its micro-batches).
    pub(super) program: ClosedJaxpr,
    /// The step arguments the program reads, in its argument order.
    pub(super) reads: Vec<usize>,
    /// For each computed operand, whether it is returned micro-batch by micro-batch.
    pub(super) sliced: Vec<bool>,
    compiler_options: CompilerOptions,
    /// The executor, and the index of the program compiled for each group.
    compiled: Mutex<Option<Executors>>,
}

/// An executor, and the index in it of the program compiled for each group.
type Executors = (PjrtExecutor, HashMap<usize, usize>);

impl BeforeLoop {
    /// The code before the loop (`before`: step arguments to the computed operands), run on the
    /// groups unless the step runs as one program (`fused`).
    pub(super) fn new(
        before: ClosedJaxpr,
        loss_inputs: &[LossInput],
        (axis, length): (usize, usize),
        fused: bool,
        compiler_options: &CompilerOptions,
    ) -> Result<Self, DriverError> {
        let device = match fused {
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
            code: before,
            device,
            on_groups: AtomicUsize::new(0),
            last_group: AtomicUsize::new(0),
        })
    }

    /// The type of each loop operand it computes, whole.
    pub(super) fn out_avals(&self) -> Vec<ShapedArray> {
        self.code.jaxpr.out_avals()
    }

    pub(super) fn runs(&self) -> BeforeLoopRuns {
        BeforeLoopRuns {
            on_groups: self.on_groups.load(Ordering::Relaxed),
            on_host: 0,
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
    /// The loop operands the step computes before the loop, on a group's devices (under several
    /// processes, sent from its process to those reading them, `before_across.rs`).
    pub(super) fn computed_operands(&self, args: &[StepArg]) -> Result<Vec<Computed>, DriverError> {
        let Some(before) = &self.before else {
            return Ok(Vec::new());
        };
        match &before.device {
            Some(device) => {
                let group = self.before_group(device, args)?;
                let values = match self.pipeline.processes() {
                    Some(processes) => {
                        self.before_across(processes.as_ref(), device, group, args)?
                    }
                    None => self.before_on_group(device, group, args)?,
                };
                before.on_groups.fetch_add(1, Ordering::Relaxed);
                before.last_group.store(group + 1, Ordering::Relaxed);
                Ok(values)
            }
            // A step run as one program computes it inside that program.
            None => Err(config(
                "the code before the loop of a step run as one program runs inside that program",
            )),
        }
    }

    /// The differentiated loop invariants the code before the loop computed
    /// ([`LossInput::ComputedParam`]), added to `params` by loss argument: each on every group
    /// of this process running a stage that reads it (moved there from the group that computed
    /// it), or on the host where another process computed it.
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
    /// group (the first of its groups; the same in every process, which all know where an array
    /// lives), else the first stage's.
    fn before_group(&self, device: &DeviceBefore, args: &[StepArg]) -> Result<usize, DriverError> {
        for &i in &device.reads {
            if let StepArg::Mpmd(m) = &args[i]
                && let Some(&g) = m.mpmd_idxs().first()
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
        if !self.pipeline.is_local(group) {
            // Another process runs it there; this one compiles it on first use, if ever.
            return Ok(());
        }
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

    pub(super) fn before_on_group(
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
