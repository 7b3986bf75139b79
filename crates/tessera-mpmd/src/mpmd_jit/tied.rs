//! Tied weights across the processes of a job: a step result that updates a weight read by
//! stages of several processes is computed by one of them (the update of its first stage's
//! group) and sent, through host memory by one exchange, to the other processes, each of which
//! puts it on its own groups among the weight's.

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

    /// Sends each result whose home groups run in several processes from the process that
    /// computed it to the others (every process calls this, after the update).
    pub(super) fn share_tied_results(
        &self,
        outputs: &mut [Option<StepResult>],
    ) -> Result<(), DriverError> {
        let Some(processes) = self.pipeline.processes() else {
            return Ok(());
        };
        // The same in every process, so either all of them exchange or none does.
        let spans_processes = |homes: &[usize]| {
            homes
                .iter()
                .any(|&h| processes.process_of(h) != processes.process_of(homes[0]))
        };
        if !self.homes.iter().any(|h| spans_processes(h)) {
            return Ok(());
        }
        let (count, me) = processes.process_index();
        let mut outgoing: Vec<Vec<u8>> = vec![Vec::new(); count];
        for (piece, _) in &self.pieces {
            let Place::Group(group) = piece.place else {
                continue;
            };
            for &k in &piece.outputs {
                let homes = self.homes_of(k, group);
                if processes.process_of(group) != me || homes.len() < 2 {
                    continue;
                }
                let Some(Some(StepResult::Mpmd(result))) = outputs.get(k) else {
                    return Err(config(format!("step result {k} was not computed here")));
                };
                let host = result.first_mpmd_replica()?.to_host()?;
                let mut sent = Vec::new();
                for p in homes.iter().map(|&h| processes.process_of(h)) {
                    if p != me && !sent.contains(&p) {
                        sent.push(p);
                        put_frame(&mut outgoing[p], k as u64, host.bytes());
                    }
                }
            }
        }
        for message in processes.exchange(outgoing)? {
            let results =
                frames(&message).ok_or_else(|| config("a tied weight's update is cut short"))?;
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
