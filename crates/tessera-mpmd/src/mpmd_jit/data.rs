//! Micro-batch data for the pipeline. Host arrays are sliced on the host. Arrays already on a
//! group's devices (an `MpmdArray` argument) are sliced there, by one compiled program per
//! argument and group that returns every micro-batch; the driver then moves each micro-batch
//! to the groups of the stages reading it (device to device where it can). Loop operands the
//! step computes before the loop come from `before.rs`: device arrays (a sliced one already cut
//! into micro-batches by the program computing it) moved the same way, or, sent by another
//! process, host arrays (micro-batch by micro-batch when sliced).

use std::collections::HashMap;
use std::sync::Mutex;

use tessera_ir::ClosedJaxpr;
use tessera_ir::trace::{Tensor, trace};
use tessera_pjrt::{Array as DeviceArray, HostArray};
use tessera_sharding::PartitionSpec;

use super::analyze::{LossInput, Operand};
use super::before::Computed;
use super::pieces::{PieceLayout, compile_program};
use super::{MpmdJit, StepArg, config};
use crate::array::MpmdArray;
use crate::driver::{DriverError, Placed};
use crate::runtime::PjrtExecutor;

/// The slicing programs compiled so far, by (step argument, group).
#[derive(Default)]
pub(super) struct Slicers {
    compiled: Mutex<Option<Compiled>>,
}

/// An executor, and the index of each (step argument, group)'s program in it.
type Compiled = (PjrtExecutor, HashMap<(usize, usize), usize>);

impl MpmdJit {
    /// Every micro-batch's data: for each loss argument that is not a parameter, its value
    /// (`computed`: the loop operands the code before the loop computed this step).
    pub(super) fn micro_batches(
        &self,
        args: &[StepArg],
        computed: &[Computed],
    ) -> Result<Vec<HashMap<usize, Placed>>, DriverError> {
        let device = |a: DeviceArray| Placed::Device(Box::new(a));
        let host_slices = |host: &HostArray| -> Result<Vec<Placed>, DriverError> {
            (0..self.length)
                .map(|mb| micro_batch(host, self.axis, mb).map(Placed::Host))
                .collect()
        };
        let mut data: Vec<HashMap<usize, Placed>> = vec![HashMap::new(); self.length];
        for (a, input) in self.loss_inputs.iter().enumerate() {
            let slices: Vec<Placed> = match *input {
                LossInput::Param(_) | LossInput::ComputedParam(_) => continue,
                LossInput::Invariant(Operand::Arg(i)) => vec![args[i].placed()?; self.length],
                LossInput::Sliced(Operand::Arg(i)) => match &args[i] {
                    StepArg::Mpmd(m) => self
                        .slice_on_device(i, m)?
                        .into_iter()
                        .map(device)
                        .collect(),
                    StepArg::Host(host) => host_slices(host)?,
                },
                LossInput::Invariant(Operand::Computed(c))
                | LossInput::Sliced(Operand::Computed(c)) => {
                    let sliced = matches!(input, LossInput::Sliced(_));
                    match (computed.get(c), sliced) {
                        (Some(Computed::Host(h)), false) => {
                            vec![Placed::Host(h.clone()); self.length]
                        }
                        (Some(Computed::Host(h)), true) => host_slices(h)?,
                        (Some(Computed::Whole(d)), false) => {
                            vec![Placed::Device(d.clone()); self.length]
                        }
                        (Some(Computed::Slices(s)), true) => {
                            s.iter().cloned().map(device).collect()
                        }
                        (Some(Computed::HostSlices(s)), true) => {
                            s.iter().cloned().map(Placed::Host).collect()
                        }
                        // Read only by another process's stages.
                        (Some(Computed::Elsewhere), _) => continue,
                        _ => {
                            return Err(config(format!(
                                "loop operand {c} computed before the loop is missing or not cut \
                                 into micro-batches as the loop reads it"
                            )));
                        }
                    }
                }
            };
            // Data held only by another process's groups is left to that process.
            for (d, slice) in data.iter_mut().zip(slices) {
                d.insert(a, slice);
            }
        }
        Ok(data)
    }

    /// Every micro-batch of step argument `arg`, an array on a group, sliced on that group.
    fn slice_on_device(&self, arg: usize, m: &MpmdArray) -> Result<Vec<DeviceArray>, DriverError> {
        let arrays = m.to_mpmd_local_arrays()?;
        let Some((&group, array)) = arrays.iter().next() else {
            return Ok(Vec::new());
        };
        let mesh = self.mesh.group(group)?;
        let spec = &self.specs.args[arg];
        let array = crate::cross_group::onto_group(&self.client, array, mesh, spec)?;
        let mut guard = self
            .slicers
            .compiled
            .lock()
            .map_err(|_| config("a slicing program panicked"))?;
        let (executor, compiled) = guard
            .get_or_insert_with(|| (PjrtExecutor::new(&self.client, &self.mesh), HashMap::new()));
        let index = match compiled.get(&(arg, group)) {
            Some(&index) => index,
            None => {
                let program = self.slicer(arg)?;
                let outs = vec![without_dim(spec, self.axis); self.length];
                let layout = PieceLayout {
                    ins: std::slice::from_ref(spec),
                    outs: &outs,
                    aliased: vec![None],
                    partitioner: self.partitioner,
                };
                let index = compile_program(executor, &self.mesh, &program, group, layout)?;
                compiled.insert((arg, group), index);
                index
            }
        };
        executor
            .execute(index, &[&array])
            .map_err(|e| config(format!("slicing argument {arg} into micro-batches: {e}")))
    }

    /// A program from step argument `arg` to its micro-batches.
    fn slicer(&self, arg: usize) -> Result<ClosedJaxpr, DriverError> {
        let aval = &self.in_avals[arg];
        let mut dims = aval.shape.clone();
        dims.remove(self.axis);
        let (axis, length) = (self.axis, self.length as i64);
        trace(std::slice::from_ref(aval), |x| {
            (0..length)
                .map(|mb| Tensor::slice_axis(&x[0], axis, mb, mb + 1).reshape(&dims))
                .collect()
        })
        .map_err(|e| config(e.to_string()))
    }
}

/// `spec` without dimension `axis` (the micro-batch dimension).
fn without_dim(spec: &PartitionSpec, axis: usize) -> PartitionSpec {
    let kept = spec
        .dims()
        .iter()
        .enumerate()
        .filter(|&(d, _)| d != axis)
        .map(|(_, d)| d.clone())
        .collect();
    PartitionSpec::new(kept)
}

/// Micro-batch `mb` of `x` along `axis`, without that dimension.
fn micro_batch(x: &HostArray, axis: usize, mb: usize) -> Result<HostArray, DriverError> {
    let block: Vec<(i64, i64)> = x
        .dims()
        .iter()
        .enumerate()
        .map(|(d, &n)| {
            if d == axis {
                (mb as i64, mb as i64 + 1)
            } else {
                (0, n)
            }
        })
        .collect();
    let mut dims = x.dims().to_vec();
    dims.remove(axis);
    Ok(x.block(&block)
        .and_then(|slice| slice.reshaped(&dims))
        .map_err(crate::error::MpmdError::from)?)
}
