//! Running the first two phases of an update cut at the values crossing groups (`phases.rs`):
//! the seeds on their groups (each shared with every process, a broadcast from the group's
//! process under MPI), then the crossing values on the host interpreter, from the seeds and the
//! update's host inputs. The update's last phase then reads them like loop results.

use tessera_ir::Array;
use tessera_pjrt::HostArray;
use tessera_sharding::PartitionSpec;

use super::phases::Phases;
use super::pieces::{LoopResults, LoopValue, PieceInputs, PieceLayout, compile_piece};
use super::update::{Piece, Place, split};
use super::{MpmdJit, StepArg, config};
use crate::driver::{CompiledPipeline, DriverError};
use crate::host::{from_host, to_host};
use crate::mesh::MpmdMesh;
use crate::runtime::PjrtExecutor;

/// The compiled first phases of a cut update.
pub(super) struct Crossing {
    phases: Phases,
    /// The seeds' pieces, each on its group (compiled where this process runs the group).
    seed_pieces: Vec<(Piece, Option<usize>)>,
}

/// What [`compile`] needs besides the phases.
pub(super) struct CrossingSetup<'a> {
    pub mesh: &'a MpmdMesh,
    pub pipeline: &'a CompiledPipeline,
    /// Where each update input lives.
    pub place_of_input: &'a [Option<usize>],
    /// The spec of each update input inside its group.
    pub input_spec: &'a dyn Fn(usize) -> PartitionSpec,
    pub partitioner: tessera_stablehlo::Partitioner,
}

/// Splits the seeds' program by group and compiles this process's pieces.
pub(super) fn compile(
    executor: &mut PjrtExecutor,
    phases: Phases,
    setup: &CrossingSetup<'_>,
) -> Result<Crossing, DriverError> {
    let mut seed_pieces = Vec::new();
    for piece in split(&phases.seeds, setup.place_of_input)? {
        let compiled = match piece.place {
            Place::Group(g) if setup.pipeline.is_local(g) => {
                let ins: Vec<_> = piece
                    .inputs
                    .iter()
                    .map(|&i| (setup.input_spec)(i))
                    .collect();
                let outs = vec![PartitionSpec::replicated(); piece.outputs.len()];
                let layout = PieceLayout {
                    ins: &ins,
                    outs: &outs,
                    aliased: vec![None; piece.inputs.len()],
                    partitioner: setup.partitioner,
                };
                Some(compile_piece(executor, setup.mesh, &piece, g, layout)?)
            }
            _ => None,
        };
        seed_pieces.push((piece, compiled));
    }
    Ok(Crossing {
        phases,
        seed_pieces,
    })
}

impl MpmdJit {
    /// The values crossing groups for this call: the seeds on their groups, then the host phase.
    pub(super) fn crossing_values(
        &self,
        crossing: &Crossing,
        args: &[StepArg],
        results: &LoopResults,
    ) -> Result<Vec<HostArray>, DriverError> {
        let seeds = self.seeds(crossing, args, results)?;
        let program = &crossing.phases.hoisted;
        let avals = program.jaxpr.in_avals();
        let inputs = crossing
            .phases
            .hoisted_inputs
            .iter()
            .zip(&avals)
            .map(|(&slot, aval)| {
                let host = match slot.checked_sub(self.num_update_inputs()) {
                    Some(s) => seeds
                        .get(s)
                        .cloned()
                        .ok_or_else(|| config("a seed is missing"))?,
                    None => self.update_input_on_host(slot, args, results)?,
                };
                from_host(&host, aval.dtype).map_err(|e| config(e.0))
            })
            .collect::<Result<Vec<Array>, DriverError>>()?;
        tessera_ir::interp::eval_closed(program, &inputs)
            .map_err(|e| config(format!("the update's values across groups: {e}")))?
            .iter()
            .map(|o| to_host(o).map_err(|e| config(e.0)))
            .collect()
    }

    /// Every seed, on the host of every process.
    fn seeds(
        &self,
        crossing: &Crossing,
        args: &[StepArg],
        results: &LoopResults,
    ) -> Result<Vec<HostArray>, DriverError> {
        let mut seeds: Vec<Option<HostArray>> = vec![None; crossing.phases.seed_groups.len()];
        for (piece, compiled) in &crossing.seed_pieces {
            let Place::Group(group) = piece.place else {
                return Err(config("a seed of the update depends on no group"));
            };
            let avals = piece.program.jaxpr.out_avals();
            let held = match compiled {
                Some(index) => self
                    .run_raw(
                        piece,
                        *index,
                        group,
                        PieceInputs {
                            args,
                            results,
                            moved: &Default::default(),
                        },
                    )?
                    .into_iter()
                    .map(Some)
                    .collect(),
                None => vec![None; avals.len()],
            };
            let values = self.shared_from_group(group, &held, &avals)?;
            for (&s, value) in piece.outputs.iter().zip(values) {
                seeds[s] = Some(to_host(&value).map_err(|e| config(e.0))?);
            }
        }
        seeds
            .into_iter()
            .map(|s| s.ok_or_else(|| config("a seed of the update was not computed")))
            .collect()
    }

    /// How many inputs the update has: the step's arguments, then the loop's results.
    fn num_update_inputs(&self) -> usize {
        self.num_args + self.num_host + self.grad_args.len()
    }

    /// Update input `i` on the host.
    fn update_input_on_host(
        &self,
        i: usize,
        args: &[StepArg],
        results: &LoopResults,
    ) -> Result<HostArray, DriverError> {
        if let Some(arg) = args.get(i).filter(|_| i < self.num_args) {
            return arg.to_host();
        }
        match results.input(i - self.num_args)? {
            LoopValue::Host(h) => Ok(h.clone()),
            LoopValue::Device(g) => Ok(g.to_host()?),
        }
    }
}
