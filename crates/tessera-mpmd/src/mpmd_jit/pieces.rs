//! Running the update pieces of a step (the code after its `treduce`): compiled for their
//! group with the step's in and out shardings (`compile_piece`), run on that group with their
//! inputs moved or resharded onto the layouts they were compiled for (`run_on_group`; under MPI
//! those held by other processes received first, `update_across.rs`), results sent to every
//! group of the parameter they update; on the host interpreter when they read no
//! group's value (`run_on_host`); or, under MPI, left as remote arrays of another process's
//! group (`elsewhere`).

use std::collections::HashMap;

use tessera_ir::{Array, ShapedArray};
use tessera_pjrt::{Array as DeviceArray, ElementType, HostArray};
use tessera_sharding::{NamedSharding, PartitionSpec};
use tessera_stablehlo::{LowerOptions, Partitioner, lower_closed};

use super::shardings::{StepSpecs, checked_sharding};
use super::update::Piece;
use super::{MpmdJit, StepArg, StepResult, config};
use crate::array::MpmdArray;
use crate::driver::DriverError;
use crate::host::{from_host, to_host};
use crate::mesh::MpmdMesh;
use crate::runtime::{OutputLayout, PjrtExecutor};
use crate::sharding::MpmdSharding;

impl MpmdJit {
    /// The results of a piece another process runs on its group `group`: arrays that are not
    /// addressable here.
    pub(super) fn elsewhere(
        &self,
        piece: &Piece,
        group: usize,
    ) -> Result<Vec<StepResult>, DriverError> {
        piece
            .program
            .jaxpr
            .out_avals()
            .iter()
            .zip(&piece.outputs)
            .map(|(a, &k)| {
                let homes = self.homes_of(k, group);
                let sharding = MpmdSharding::new(&self.mesh, homes, &self.specs.outs[k])?;
                let remote =
                    MpmdArray::remote(&a.shape, ElementType::from_dtype(a.dtype), sharding);
                Ok(StepResult::Mpmd(Box::new(remote)))
            })
            .collect()
    }

    /// Runs compiled piece `index` on `group`; each result as it lives on this process's
    /// groups among its homes (a remote array when none is here: [`MpmdJit::share_results`]
    /// sends it), with the array the program left on `group`.
    pub(super) fn run_on_group(
        &self,
        piece: &Piece,
        index: usize,
        group: usize,
        inputs: PieceInputs<'_>,
    ) -> Result<Vec<(MpmdArray, DeviceArray)>, DriverError> {
        let outs = self.run_raw(piece, index, group, inputs)?;
        // Each result goes to the groups of the parameter it updates (all of them for a tied
        // weight; those of other processes get it from `share_results`), the others stay here.
        outs.into_iter()
            .zip(&piece.outputs)
            .map(|(o, &k)| {
                let homes = self.homes_of(k, group);
                let spec = &self.specs.outs[k];
                let arrays = homes
                    .iter()
                    .filter(|&&h| self.pipeline.is_local(h))
                    .map(|&h| match h == group {
                        true => Ok(o.clone()),
                        false => {
                            let mesh = self.mesh.group(h)?;
                            crate::cross_group::onto_group(&self.client, &o, mesh, spec)
                        }
                    })
                    .collect::<Result<Vec<_>, DriverError>>()?;
                let sharding = MpmdSharding::new(&self.mesh, homes, spec)?;
                let array = match arrays.is_empty() {
                    true => MpmdArray::remote(o.shape(), o.element_type(), sharding),
                    false => MpmdArray::new(arrays, sharding)?,
                };
                Ok((array, o))
            })
            .collect()
    }

    /// Runs compiled piece `index` on `group`, its inputs moved onto the layouts it was compiled
    /// for; its results as the program leaves them.
    pub(super) fn run_raw(
        &self,
        piece: &Piece,
        index: usize,
        group: usize,
        PieceInputs {
            args,
            results,
            moved,
        }: PieceInputs<'_>,
    ) -> Result<Vec<DeviceArray>, DriverError> {
        let mesh = self.mesh.group(group)?;
        let inputs = piece
            .inputs
            .iter()
            .map(|&i| {
                let spec = input_spec(
                    &self.specs,
                    &self.grad_args,
                    self.num_args,
                    self.num_host,
                    i,
                );
                // An update mixing groups reads other groups' values: moved here.
                let onto =
                    |a: &DeviceArray| crate::cross_group::onto_group(&self.client, a, mesh, &spec);
                let put = |h: &HostArray| -> Result<DeviceArray, DriverError> {
                    let sharding = NamedSharding::new(mesh, spec.clone())?;
                    Ok(DeviceArray::device_put(&self.client, h, &sharding)?)
                };
                // A value another process held, received on the host (`update_across.rs`).
                if let Some(h) = moved.get(&i) {
                    return put(h);
                }
                if i < self.num_args {
                    match &args[i] {
                        StepArg::Host(h) => put(h),
                        StepArg::Mpmd(m) => {
                            let arrays = m.to_mpmd_local_arrays()?;
                            match arrays.get(&group).or(arrays.values().next()) {
                                Some(a) => onto(a),
                                None => Err(config(format!("argument {i} holds no array"))),
                            }
                        }
                    }
                } else {
                    match results.input(i - self.num_args)? {
                        LoopValue::Host(h) => put(h),
                        LoopValue::Device(g) => onto(&g),
                    }
                }
            })
            .collect::<Result<Vec<_>, DriverError>>()?;
        let refs: Vec<&DeviceArray> = inputs.iter().collect();
        self.updates
            .execute(index, &refs)
            .map_err(|e| config(e.to_string()))
    }

    pub(super) fn run_on_host(
        &self,
        piece: &Piece,
        args: &[StepArg],
        results: &LoopResults,
    ) -> Result<Vec<HostArray>, DriverError> {
        let avals = piece.program.jaxpr.in_avals();
        let inputs = piece
            .inputs
            .iter()
            .zip(&avals)
            .map(|(&i, aval)| {
                let host = if i < self.num_args {
                    args[i].to_host()?
                } else {
                    match results.input(i - self.num_args)? {
                        LoopValue::Host(h) => h.clone(),
                        LoopValue::Device(g) => g.to_host()?,
                    }
                };
                from_host(&host, aval.dtype).map_err(|e| config(e.0))
            })
            .collect::<Result<Vec<Array>, DriverError>>()?;
        let outs = tessera_ir::interp::eval_closed(&piece.program, &inputs)
            .map_err(|e| config(e.to_string()))?;
        outs.iter()
            .map(|o| to_host(o).map_err(|e| config(e.0)))
            .collect()
    }
}

/// What an update piece reads: the step's arguments, the loop's results, and the inputs another
/// process held, received here on the host, by update input.
#[derive(Clone, Copy)]
pub(super) struct PieceInputs<'a> {
    pub args: &'a [StepArg],
    pub results: &'a LoopResults,
    pub moved: &'a HashMap<usize, HostArray>,
}

/// The loop's results as the update reads them: the loss and the auxiliary results combined on
/// the host, then the gradients on their groups; then, for an update cut at the values crossing
/// groups (`phases.rs`), those values.
pub(super) struct LoopResults {
    /// The loss, then each auxiliary result.
    pub host: Vec<HostArray>,
    /// Each gradient (`None`: held by another process).
    pub grads: Vec<Option<DeviceArray>>,
    /// The small values computed across groups on the host, read by the update's last phase.
    pub crossing: Vec<HostArray>,
}

/// One loop result.
pub(super) enum LoopValue<'a> {
    Host(&'a HostArray),
    Device(Box<DeviceArray>),
}

impl LoopResults {
    /// Loop result `r`; a gradient must be held by this process.
    pub(super) fn input(&self, r: usize) -> Result<LoopValue<'_>, DriverError> {
        if let Some(h) = self.host.get(r) {
            return Ok(LoopValue::Host(h));
        }
        let k = r - self.host.len();
        if let Some(h) = k
            .checked_sub(self.grads.len())
            .and_then(|c| self.crossing.get(c))
        {
            return Ok(LoopValue::Host(h));
        }
        let grad = self.grads.get(k).cloned().flatten().ok_or_else(|| {
            config(format!(
                "gradient {k} is held by another process; only code on its group can read it"
            ))
        })?;
        Ok(LoopValue::Device(Box::new(grad)))
    }
}

/// The spec of update input `i`: a step argument's, a host loop result's (replicated), or a
/// gradient's (its parameter's; replicated for a value computed before the loop).
pub(super) fn input_spec(
    specs: &StepSpecs,
    grad_args: &[Option<usize>],
    num_args: usize,
    num_host: usize,
    i: usize,
) -> PartitionSpec {
    if i < num_args {
        return specs.args[i].clone();
    }
    if i < num_args + num_host {
        return PartitionSpec::replicated();
    }
    grad_args
        .get(i - num_args - num_host)
        .copied()
        .flatten()
        .and_then(|a| specs.args.get(a).cloned())
        .unwrap_or_default()
}

/// How an update piece's inputs and results are laid out, which inputs it donates, and the
/// partitioner it is compiled for.
pub(super) struct PieceLayout<'a> {
    pub ins: &'a [PartitionSpec],
    pub outs: &'a [PartitionSpec],
    pub aliased: Vec<Option<usize>>,
    pub partitioner: Partitioner,
}

pub(super) fn compile_piece(
    executor: &mut PjrtExecutor,
    mesh: &MpmdMesh,
    piece: &Piece,
    group: usize,
    layout: PieceLayout<'_>,
) -> Result<usize, DriverError> {
    compile_program(executor, mesh, &piece.program, group, layout)
}

/// Compiles `program` for `group`, its inputs and results laid out as `layout` says.
pub(super) fn compile_program(
    executor: &mut PjrtExecutor,
    mesh: &MpmdMesh,
    program: &tessera_ir::ClosedJaxpr,
    group: usize,
    layout: PieceLayout<'_>,
) -> Result<usize, DriverError> {
    let group_mesh = mesh.group(group)?;
    let jaxpr = &program.jaxpr;
    let (in_avals, out_avals) = (jaxpr.in_avals(), jaxpr.out_avals());
    let shardings = |avals: &[ShapedArray], specs: &[PartitionSpec]| {
        avals
            .iter()
            .zip(specs)
            .map(|(a, s)| checked_sharding(group_mesh, s, a.rank()).map(Some))
            .collect::<Result<Vec<_>, DriverError>>()
    };
    let devices = group_mesh.device_ids().len();
    let options = LowerOptions {
        num_partitions: devices,
        arg_shardings: shardings(&in_avals, layout.ins)?,
        result_shardings: shardings(&out_avals, layout.outs)?,
        aliased_outputs: layout.aliased,
        partitioner: layout.partitioner.for_callbacks(devices, [program]),
        attention: Default::default(),
    };
    let module = lower_closed(program, &options)?;
    let layouts = out_avals
        .iter()
        .zip(layout.outs)
        .map(|(a, spec)| OutputLayout {
            shape: a.shape.clone(),
            ty: ElementType::from_dtype(a.dtype),
            spec: spec.clone(),
        })
        .collect();
    Ok(executor.compile(&module, group, layouts)?)
}
