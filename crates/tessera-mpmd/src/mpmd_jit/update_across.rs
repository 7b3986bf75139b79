//! An update mixing large values of several groups under several processes (MPI, one process
//! per group), e.g. `w1' = w1 - lr * (g1 + g0[0])`: the piece runs on the lowest of its groups,
//! as in one process, and the process running that group, the runner, first receives on the host
//! the inputs only other processes hold (a gradient accumulated on another group, a step
//! argument on other groups' devices), one [`Processes::exchange`] for all pieces; it puts them
//! on its group with the layouts the piece was compiled for, as one process copies them between
//! groups, so both run the same program on the same values. Its results then reach the
//! processes of the groups they live on ([`MpmdJit::share_results`], `tied.rs`).
//!
//! Every process decides alike whether anything moves: it depends only on the step's plan and
//! on where the arguments lie, which the processes agreed on before the call (`agree.rs`).

use std::collections::{BTreeSet, HashMap};

use tessera_ir::ShapedArray;
use tessera_pjrt::HostArray;

use super::pieces::LoopResults;
use super::update::Place;
use super::{MpmdJit, StepArg, config};
use crate::driver::DriverError;
use crate::processes::{Processes, frames, put_frame};

/// One update input a runner needs from another process.
struct Move {
    /// The update input.
    input: usize,
    /// The process sending it and the one running the piece that reads it.
    from: usize,
    to: usize,
}

impl MpmdJit {
    /// The update inputs this process runs pieces on but does not hold, received on the host
    /// from the processes holding them (every process calls this, before the update).
    pub(super) fn move_update_inputs(
        &self,
        args: &[StepArg],
        results: &LoopResults,
    ) -> Result<HashMap<usize, HostArray>, DriverError> {
        let Some(processes) = self.pipeline.processes() else {
            return Ok(HashMap::new());
        };
        let (moves, avals) = self.update_moves(processes.as_ref(), args)?;
        if moves.is_empty() {
            return Ok(HashMap::new());
        }
        let (count, me) = processes.process_index();
        let mut outgoing: Vec<Vec<u8>> = vec![Vec::new(); count];
        for m in moves.iter().filter(|m| m.from == me) {
            let host = self.held_input(m.input, args, results)?;
            put_frame(&mut outgoing[m.to], m.input as u64, host.bytes());
        }
        let mut moved = HashMap::new();
        for message in processes.exchange(outgoing)? {
            let parts = frames(&message).ok_or_else(|| {
                config("an input of the update sent by another process is cut short")
            })?;
            for (key, bytes) in parts {
                let i = key as usize;
                let aval = avals.get(&i).ok_or_else(|| {
                    config(format!(
                        "input {i} of the update arrived, which no piece here reads"
                    ))
                })?;
                // Devices hold a key array as its words.
                let host = HostArray::from_bytes(aval.dtype, &aval.shape, bytes.to_vec())
                    .map_err(crate::error::MpmdError::from)?
                    .key_words();
                moved.insert(i, host);
            }
        }
        Ok(moved)
    }

    /// What moves between processes for this call's update, and the type of each update input a
    /// piece reads.
    fn update_moves(
        &self,
        processes: &dyn Processes,
        args: &[StepArg],
    ) -> Result<(Vec<Move>, HashMap<usize, ShapedArray>), DriverError> {
        let mut moves: Vec<Move> = Vec::new();
        let mut avals = HashMap::new();
        let mut seen = BTreeSet::new();
        for (piece, _) in &self.pieces {
            let Place::Group(group) = piece.place else {
                continue;
            };
            let to = processes.process_of(group);
            for (&i, aval) in piece.inputs.iter().zip(piece.program.jaxpr.in_avals()) {
                avals.insert(i, aval);
                // The runner reads its own copy when it holds one (see `run_raw`).
                let held = self.holders(processes, i, args)?;
                let Some(&from) = held.first().filter(|_| !held.contains(&to)) else {
                    continue;
                };
                if seen.insert((i, to)) {
                    moves.push(Move { input: i, from, to });
                }
            }
        }
        Ok((moves, avals))
    }

    /// The processes holding update input `i` on a group's devices (none: every process has it
    /// on the host), alike in every process.
    fn holders(
        &self,
        processes: &dyn Processes,
        i: usize,
        args: &[StepArg],
    ) -> Result<BTreeSet<usize>, DriverError> {
        if i < self.num_args {
            return Ok(match &args[i] {
                StepArg::Host(_) => BTreeSet::new(),
                StepArg::Mpmd(m) => m
                    .mpmd_idxs()
                    .iter()
                    .map(|&g| processes.process_of(g))
                    .collect(),
            });
        }
        let Some(k) = (i - self.num_args).checked_sub(self.num_host) else {
            return Ok(BTreeSet::new()); // the loss or a metric, on every host
        };
        match self.grad_groups.get(k) {
            Some(&Some(group)) => Ok(BTreeSet::from([processes.process_of(group)])),
            // A gradient of no group's (read where it is held), or a small value crossing
            // groups, on every host.
            Some(None) | None => Ok(BTreeSet::new()),
        }
    }

    /// Update input `i` as this process holds it, on the host.
    fn held_input(
        &self,
        i: usize,
        args: &[StepArg],
        results: &LoopResults,
    ) -> Result<HostArray, DriverError> {
        if i < self.num_args {
            let StepArg::Mpmd(m) = &args[i] else {
                return args[i].to_host();
            };
            let arrays = m.to_mpmd_local_arrays()?;
            let array = arrays.values().next().ok_or_else(|| {
                config(format!(
                    "step argument {i} was to be sent from here, which holds none of it"
                ))
            })?;
            return Ok(array.to_host()?);
        }
        let k = i - self.num_args - self.num_host;
        let grad = results.grads.get(k).cloned().flatten().ok_or_else(|| {
            config(format!(
                "gradient {k} was to be sent from this process, which does not hold it"
            ))
        })?;
        Ok(grad.to_host()?)
    }
}
