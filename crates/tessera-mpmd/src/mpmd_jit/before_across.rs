//! The code before the loop under several processes (MPI, one process per group). It runs on
//! the devices of one group, chosen alike in every process (`before.rs`): its process, the
//! runner, first receives the arguments it reads that only other processes' groups hold, then
//! runs the compiled program, then sends each computed loop operand to the processes whose
//! stages read it (a parameter-like computed value to those of the stages differentiating it,
//! data to those of the stages reading it). Each move is one [`Processes::exchange`] of host
//! bytes, which every process calls at the same point of every step, and which is skipped
//! altogether when nothing has to move (every process sees that alike: it depends only on
//! where the arguments live and on the step's plan). A process reading a computed value gets it
//! on the host ([`Computed::Host`], or [`Computed::HostSlices`] micro-batch by micro-batch) and
//! the pipeline puts it on its group as it does host data; a process neither running the code
//! nor reading a value holds [`Computed::Elsewhere`]. Every process must pass each argument
//! alike (from the host, or as an array of the same groups), as it must for the pipeline.

use std::collections::BTreeSet;

use tessera_ir::{Array, ShapedArray};

use super::analyze::{LossInput, Operand};
use super::before::{Computed, DeviceBefore};
use super::{MpmdJit, StepArg, config};
use crate::driver::DriverError;
use crate::processes::{Processes, frames, put_frame};

/// The messages of one exchange, read back by sender, as `(key, bytes)` frames.
type Received = Vec<(u64, Vec<u8>)>;

impl MpmdJit {
    /// The loop operands the code before the loop computes on `group`'s devices, in the process
    /// running `group`, as this process holds them (see the module docs).
    pub(super) fn before_across(
        &self,
        processes: &dyn Processes,
        device: &DeviceBefore,
        group: usize,
        args: &[StepArg],
    ) -> Result<Vec<Computed>, DriverError> {
        let (count, me) = processes.process_index();
        let runner = processes.process_of(group);
        // 1. The arguments the runner holds nowhere, from the first process holding each.
        let mut outgoing: Vec<Vec<u8>> = vec![Vec::new(); count];
        let mut moves = false;
        for &i in &device.reads {
            let StepArg::Mpmd(m) = &args[i] else {
                continue; // a host argument: every process has it
            };
            let holders: BTreeSet<usize> = m
                .mpmd_idxs()
                .iter()
                .map(|&g| processes.process_of(g))
                .collect();
            if holders.contains(&runner) {
                continue;
            }
            let Some(&sender) = holders.first() else {
                return Err(config(format!(
                    "argument {i} of the step, read by the code before the loop, is held by no group"
                )));
            };
            moves = true;
            if sender == me {
                put_frame(&mut outgoing[runner], i as u64, args[i].to_host()?.bytes());
            }
        }
        let mut local: Vec<StepArg> = args.to_vec();
        if moves {
            for (key, bytes) in exchanged(processes, outgoing)? {
                let i = key as usize;
                let aval = self.in_avals.get(i).ok_or_else(|| {
                    config(format!(
                        "an argument {i} arrived for the code before the loop"
                    ))
                })?;
                local[i] = StepArg::Host(host_array(aval, bytes)?);
            }
        }
        // 2. The runner runs it.
        let mut values = match runner == me {
            true => self.before_on_group(device, group, &local)?,
            false => (0..device.sliced.len())
                .map(|_| Computed::Elsewhere)
                .collect(),
        };
        // 3. Each computed value to the processes reading it.
        let readers: Vec<BTreeSet<usize>> = (0..device.sliced.len())
            .map(|c| {
                self.groups_reading_computed(c)
                    .into_iter()
                    .map(|g| processes.process_of(g))
                    .filter(|&p| p != runner)
                    .collect()
            })
            .collect();
        if readers.iter().all(BTreeSet::is_empty) {
            return Ok(values);
        }
        let slots = self.length as u64 + 1;
        let mut outgoing: Vec<Vec<u8>> = vec![Vec::new(); count];
        if runner == me {
            for (c, (value, to)) in values.iter().zip(&readers).enumerate() {
                let key = |slot: usize| c as u64 * slots + slot as u64;
                for &p in to {
                    match value {
                        Computed::Whole(d) => {
                            put_frame(&mut outgoing[p], key(0), d.to_host()?.bytes())
                        }
                        Computed::Slices(s) => {
                            for (mb, d) in s.iter().enumerate() {
                                put_frame(&mut outgoing[p], key(1 + mb), d.to_host()?.bytes());
                            }
                        }
                        Computed::Host(_) | Computed::HostSlices(_) | Computed::Elsewhere => {
                            return Err(config(
                                "the code before the loop left a value off its group's devices",
                            ));
                        }
                    }
                }
            }
        }
        let received = exchanged(processes, outgoing)?;
        if runner == me {
            return Ok(values);
        }
        let out_avals = self.before_avals();
        let mut slices: Vec<Vec<Option<Array>>> = vec![vec![None; self.length]; values.len()];
        for (key, bytes) in received {
            let (c, slot) = ((key / slots) as usize, (key % slots) as usize);
            let whole = out_avals
                .get(c)
                .ok_or_else(|| config(format!("a value {c} computed before the loop arrived")))?;
            match slot {
                0 => values[c] = Computed::Host(host_array(whole, bytes)?),
                mb => {
                    let slice = ShapedArray::new(whole.dtype, &without(&whole.shape, self.axis));
                    slices[c][mb - 1] = Some(host_array(&slice, bytes)?);
                }
            }
        }
        for (c, mbs) in slices.into_iter().enumerate() {
            if device.sliced[c] && readers[c].contains(&me) {
                let all: Option<Vec<Array>> = mbs.into_iter().collect();
                let all = all.ok_or_else(|| {
                    config(format!(
                        "micro-batches of loop operand {c}, computed before the loop, did not arrive"
                    ))
                })?;
                values[c] = Computed::HostSlices(all);
            }
        }
        Ok(values)
    }

    /// The groups running a stage that reads loop operand `c` computed before the loop.
    fn groups_reading_computed(&self, c: usize) -> Vec<usize> {
        let mut groups = Vec::new();
        for (a, input) in self.loss_inputs.iter().enumerate() {
            match *input {
                LossInput::ComputedParam(d) if d == c => {
                    groups.extend(self.pipeline.groups_of_param(a));
                }
                LossInput::Invariant(Operand::Computed(d))
                | LossInput::Sliced(Operand::Computed(d))
                    if d == c =>
                {
                    groups.extend(self.pipeline.groups_of_data(a));
                }
                LossInput::Param(_)
                | LossInput::ComputedParam(_)
                | LossInput::Invariant(_)
                | LossInput::Sliced(_) => {}
            }
        }
        groups.sort_unstable();
        groups.dedup();
        groups
    }

    /// The type of each loop operand the code before the loop computes, whole.
    fn before_avals(&self) -> Vec<ShapedArray> {
        self.before
            .as_ref()
            .map(super::before::BeforeLoop::out_avals)
            .unwrap_or_default()
    }
}

/// Runs one exchange and reads back its frames.
fn exchanged(processes: &dyn Processes, outgoing: Vec<Vec<u8>>) -> Result<Received, DriverError> {
    let mut out = Vec::new();
    for message in processes.exchange(outgoing)? {
        let parts = frames(&message)
            .ok_or_else(|| config("a value for the code before the loop arrived cut short"))?;
        out.extend(parts.into_iter().map(|(k, b)| (k, b.to_vec())));
    }
    Ok(out)
}

/// A host array of type `aval` from its bytes.
fn host_array(aval: &ShapedArray, bytes: Vec<u8>) -> Result<Array, DriverError> {
    Array::from_bytes(aval.dtype, &aval.shape, bytes).map_err(|e| {
        config(format!(
            "a value of type {aval} for the code before the loop arrived with the wrong size: {e}"
        ))
    })
}

/// `shape` without dimension `axis`.
fn without(shape: &[i64], axis: usize) -> Vec<i64> {
    let mut dims = shape.to_vec();
    if axis < dims.len() {
        dims.remove(axis);
    }
    dims
}
