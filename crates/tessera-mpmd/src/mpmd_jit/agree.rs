//! Before each call under several processes, the processes check that they call the same step
//! with arguments of the same types and placements: a rank calling another step, or passing an
//! argument of another shape, element type or placement (from the host, or an array of other
//! groups or another spec), would otherwise wait forever for values the others never send, or
//! exchange mismatched buffers. Values are never compared (a rank may pass anything of the right
//! type for an argument it does not read, [`super::MpmdJit::reads_here`]).
//!
//! Each process hashes the step's identity (its program and plan, fixed when it is compiled)
//! and a description of every argument, and the processes exchange the hashes
//! ([`Processes::exchange`], 8 bytes to each). Every process sees every hash, so all of them
//! decide alike: when the hashes agree the call goes on; otherwise a second exchange sends the
//! descriptions themselves, and every process returns the same
//! [`ProcessError::CallsDiffer`] naming the ranks and the argument that differ. A stage's
//! argument on devices of other processes' groups than the stages reading it is then refused by
//! every process alike too ([`MpmdJit::held_by_readers`]).

use std::collections::BTreeSet;
use std::hash::{DefaultHasher, Hash, Hasher};

use tessera_sharding::PartitionSpec;

use super::analyze::{LossInput, Operand};
use super::{MpmdJit, StepArg, config};
use crate::driver::DriverError;
use crate::processes::{ProcessError, Processes, frames, put_frame};

/// The frame key of the step's identity in the second exchange (arguments are keyed by index).
const STEP_KEY: u64 = u64::MAX;

/// The identity of a step every process compiles alike: a hash of its program's text and the
/// layouts of its arguments and results.
pub(super) fn step_identity(
    step: &tessera_ir::ClosedJaxpr,
    (ins, outs): (&[PartitionSpec], &[PartitionSpec]),
) -> u64 {
    let mut h = DefaultHasher::new();
    tessera_ir::text::print_closed(step, 0).hash(&mut h);
    for spec in ins.iter().chain(outs) {
        spec.to_string().hash(&mut h);
    }
    h.finish()
}

/// How argument `arg` is passed, as the processes compare it: shape, element type and placement.
fn describe(arg: &StepArg) -> String {
    let (dims, ty) = arg.signature();
    match arg {
        StepArg::Host(_) => format!("{ty:?}{dims:?} from the host"),
        StepArg::Mpmd(m) => {
            let deleted = if m.is_deleted() { "a deleted " } else { "" };
            format!(
                "{ty:?}{dims:?} as {deleted}an array on groups {:?} laid out {}",
                m.mpmd_idxs(),
                m.spec()
            )
        }
    }
}

impl MpmdJit {
    /// Under several processes, whether every argument on devices that a stage reads (a
    /// parameter, or micro-batch data) lies on groups of the processes running the stages
    /// reading it; an error naming the fix otherwise. Every process decides alike (from the
    /// placements the processes agreed on), so all of them refuse the call together instead of
    /// the others waiting for the one that lacks the value.
    pub(super) fn held_by_readers(&self, args: &[StepArg]) -> Result<(), DriverError> {
        let Some(processes) = self.pipeline.processes() else {
            return Ok(());
        };
        for (a, input) in self.loss_inputs.iter().enumerate() {
            let (i, readers, what) = match *input {
                LossInput::Param(i) => (i, self.pipeline.groups_of_param(a), "a parameter"),
                LossInput::Invariant(Operand::Arg(i)) | LossInput::Sliced(Operand::Arg(i)) => {
                    (i, self.pipeline.groups_of_data(a), "micro-batch data")
                }
                LossInput::ComputedParam(_) | LossInput::Invariant(_) | LossInput::Sliced(_) => {
                    continue;
                }
            };
            let Some(StepArg::Mpmd(m)) = args.get(i) else {
                continue;
            };
            let holders: BTreeSet<usize> = m
                .mpmd_idxs()
                .iter()
                .map(|&g| processes.process_of(g))
                .collect();
            if readers
                .iter()
                .any(|&g| !holders.contains(&processes.process_of(g)))
            {
                return Err(config(format!(
                    "step argument {i} lies on groups {:?}, of other processes, but stages on \
                     groups {readers:?} read it; under several processes {what} on devices must \
                     lie on the groups of the stages reading it (as a step's own result left \
                     there does): pass it from the host, or put it on those groups' devices",
                    m.mpmd_idxs()
                )));
            }
        }
        Ok(())
    }

    /// Checks that every process calls this step with arguments alike (see the module docs);
    /// nothing to check in one process.
    pub(super) fn agree_on_call(&self, args: &[StepArg]) -> Result<(), DriverError> {
        let Some(processes) = self.pipeline.processes() else {
            return Ok(());
        };
        let described: Vec<String> = args.iter().map(describe).collect();
        let mut h = DefaultHasher::new();
        (self.identity, &described).hash(&mut h);
        let mine = h.finish();
        let (count, _) = processes.process_index();
        let hashes = processes.exchange(vec![mine.to_le_bytes().to_vec(); count])?;
        let first = hashes.first().cloned().unwrap_or_default();
        if hashes.iter().all(|theirs| *theirs == first) {
            return Ok(());
        }
        Err(self.differences(processes.as_ref(), &described)?.into())
    }

    /// The second exchange: every process's step identity and argument descriptions, compared.
    fn differences(
        &self,
        processes: &dyn Processes,
        described: &[String],
    ) -> Result<ProcessError, DriverError> {
        let (count, _) = processes.process_index();
        let mut message = Vec::new();
        put_frame(&mut message, STEP_KEY, &self.identity.to_le_bytes());
        for (i, d) in described.iter().enumerate() {
            put_frame(&mut message, i as u64, d.as_bytes());
        }
        let received = processes.exchange(vec![message; count])?;
        let mut calls: Vec<Call> = Vec::new();
        for (rank, message) in received.iter().enumerate() {
            let parts = frames(message).ok_or_else(|| {
                ProcessError::Comm(format!(
                    "rank {rank}'s description of its call is cut short"
                ))
            })?;
            let mut call = Call::default();
            for (key, bytes) in parts {
                match key {
                    STEP_KEY => call.step = bytes.to_vec(),
                    _ => call.args.push(String::from_utf8_lossy(bytes).into_owned()),
                }
            }
            calls.push(call);
        }
        Ok(compare(&calls))
    }
}

/// One process's call as it described it.
#[derive(Debug, Default, Clone, PartialEq)]
struct Call {
    step: Vec<u8>,
    args: Vec<String>,
}

/// The first difference between the processes' calls, against rank 0's.
fn compare(calls: &[Call]) -> ProcessError {
    let Some(reference) = calls.first() else {
        return ProcessError::Comm("no process described its call".into());
    };
    let differ = |f: &dyn Fn(&Call) -> bool| -> Vec<usize> {
        (1..calls.len()).filter(|&r| f(&calls[r])).collect()
    };
    let ranks = differ(&|c| c.step != reference.step);
    if !ranks.is_empty() {
        return ProcessError::CallsDiffer {
            ranks,
            argument: None,
            detail: "they call another step than rank 0 (another program, or the same program \
                     compiled with other options)"
                .into(),
        };
    }
    let ranks = differ(&|c| c.args.len() != reference.args.len());
    if let Some(&r) = ranks.first() {
        return ProcessError::CallsDiffer {
            detail: format!(
                "rank {r} passes {} arguments, rank 0 passes {}",
                calls[r].args.len(),
                reference.args.len()
            ),
            ranks,
            argument: None,
        };
    }
    for (i, mine) in reference.args.iter().enumerate() {
        let ranks = differ(&|c| c.args.get(i) != Some(mine));
        if let Some(&r) = ranks.first() {
            let theirs = calls[r].args.get(i).cloned().unwrap_or_default();
            return ProcessError::CallsDiffer {
                detail: format!("rank {r} passes argument {i} as {theirs}, rank 0 as {mine}"),
                ranks,
                argument: Some(i),
            };
        }
    }
    ProcessError::CallsDiffer {
        ranks: (1..calls.len()).collect(),
        argument: None,
        detail: "their descriptions of the call hash differently".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::{Call, compare};
    use crate::processes::ProcessError;

    fn call(step: u8, args: &[&str]) -> Call {
        Call {
            step: vec![step],
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    #[test]
    fn the_first_differing_argument_is_named_with_every_rank_passing_it_otherwise() {
        let calls = [
            call(1, &["F32[8, 8] from the host", "F32[4] from the host"]),
            call(1, &["F32[8, 8] from the host", "F32[4] from the host"]),
            call(1, &["F32[8, 8] from the host", "F32[5] from the host"]),
            call(1, &["F32[8, 8] from the host", "F32[6] from the host"]),
        ];
        let err = compare(&calls);
        let ProcessError::CallsDiffer {
            ranks, argument, ..
        } = &err
        else {
            panic!("{err}");
        };
        assert_eq!((ranks.as_slice(), *argument), (&[2, 3][..], Some(1)));
        let text = err.to_string();
        assert!(
            text.contains(
                "rank 2 passes argument 1 as F32[5] from the host, rank 0 as F32[4] from the host"
            ),
            "{text}"
        );
        assert!(text.contains("ranks [2, 3]"), "{text}");
    }

    #[test]
    fn another_step_is_named_before_its_arguments() {
        let calls = [call(1, &["F32[4] from the host"]), call(2, &[])];
        let err = compare(&calls);
        assert!(
            matches!(&err, ProcessError::CallsDiffer { ranks, argument: None, .. } if ranks == &[1]),
            "{err}"
        );
        assert!(
            err.to_string().contains("another step than rank 0"),
            "{err}"
        );
    }
}
