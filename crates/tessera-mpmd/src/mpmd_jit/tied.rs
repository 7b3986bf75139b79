//! Step results across the processes of a job: a result that updates a weight read by stages of
//! several processes (a tied weight) is computed by one of them (the update of its first stage's
//! group), and one an update mixing groups computes on the lowest of them may update a weight of
//! another process's group; each is sent, through host memory by one exchange, to the other
//! processes holding it, each of which puts it on its own groups among the weight's.

use std::collections::{BTreeSet, HashMap};

use tessera_pjrt::{Array as DeviceArray, HostArray};
use tessera_sharding::NamedSharding;

use super::update::Place;
use super::{MpmdJit, StepResult, config};
use crate::array::MpmdArray;
use crate::driver::DriverError;
use crate::processes::{frames, put_frame};
use crate::sharding::MpmdSharding;

impl MpmdJit {
    /// The groups holding step result `k`: those of the weight it updates, or `group`.
    pub(super) fn homes_of(&self, k: usize, group: usize) -> Vec<usize> {
        match self.homes.get(k) {
            Some(h) if !h.is_empty() => h.clone(),
            _ => vec![group],
        }
    }

    /// Sends each result whose home groups run in other processes than the one computing it
    /// (a tied weight's, read by stages of several processes, or one an update mixing groups
    /// computed on another process's group, `update_across.rs`) from that process to the
    /// others; every process calls this, after the update. `computed_here` holds the results
    /// this process computed, as their programs left them.
    pub(super) fn share_results(
        &self,
        outputs: &mut [Option<StepResult>],
        computed_here: &HashMap<usize, DeviceArray>,
    ) -> Result<(), DriverError> {
        let Some(processes) = self.pipeline.processes() else {
            return Ok(());
        };
        // For each result computed on a group, the other processes holding it: the same in
        // every process, so either all of them exchange or none does.
        let mut receivers: Vec<(usize, usize, BTreeSet<usize>)> = Vec::new();
        for (piece, _) in &self.pieces {
            let Place::Group(group) = piece.place else {
                continue;
            };
            let runner = processes.process_of(group);
            for &k in &piece.outputs {
                let to: BTreeSet<usize> = self
                    .homes_of(k, group)
                    .iter()
                    .map(|&h| processes.process_of(h))
                    .filter(|&p| p != runner)
                    .collect();
                if !to.is_empty() {
                    receivers.push((k, runner, to));
                }
            }
        }
        if receivers.is_empty() {
            return Ok(());
        }
        let (count, me) = processes.process_index();
        let mut outgoing: Vec<Vec<u8>> = vec![Vec::new(); count];
        for (k, _, to) in receivers.iter().filter(|(_, runner, _)| *runner == me) {
            let raw = computed_here
                .get(k)
                .ok_or_else(|| config(format!("step result {k} was not computed here")))?;
            let host = raw.to_host()?;
            for &p in to {
                put_frame(&mut outgoing[p], *k as u64, host.bytes());
            }
        }
        for message in processes.exchange(outgoing)? {
            let results =
                frames(&message).ok_or_else(|| config("a step result sent is cut short"))?;
            for (k, bytes) in results {
                let k = k as usize;
                outputs[k] = Some(self.on_local_homes(k, bytes)?);
            }
        }
        Ok(())
    }

    /// Step result `k` from its bytes, on this process's groups among its homes.
    fn on_local_homes(&self, k: usize, bytes: &[u8]) -> Result<StepResult, DriverError> {
        let aval = self
            .out_avals
            .get(k)
            .ok_or_else(|| config(format!("no step result {k}")))?;
        // Devices hold a key array as its words.
        let host = HostArray::from_bytes(aval.dtype, &aval.shape, bytes.to_vec())
            .map_err(crate::error::MpmdError::from)?
            .key_words();
        let homes = self.homes_of(k, 0);
        let spec = &self.specs.outs[k];
        let arrays = homes
            .iter()
            .filter(|&&h| self.pipeline.is_local(h))
            .map(|&h| {
                let sharding = NamedSharding::new(self.mesh.group(h)?, spec.clone())?;
                Ok(DeviceArray::device_put(&self.client, &host, &sharding)?)
            })
            .collect::<Result<Vec<_>, DriverError>>()?;
        let sharding = MpmdSharding::new(&self.mesh, homes, spec)?;
        Ok(StepResult::Mpmd(Box::new(MpmdArray::new(
            arrays, sharding,
        )?)))
    }
}
