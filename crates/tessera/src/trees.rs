//! Parameter trees in and out of a pipelined step. A step traced with
//! [`tessera_nn::trace_trees`] takes the leaves of its argument trees in turn and returns the
//! leaves of its result trees; [`TreeStep`] compiles it with `mpmd_jit` and calls it with trees
//! (parameters, optimizer state, data) instead of positional argument lists.

use tessera_ir::{ClosedJaxpr, ShapedArray};
use tessera_mpmd::driver::DriverError;
use tessera_mpmd::{MpmdJit, MpmdJitOptions, MpmdMesh, MpmdStepRun, StepArg, StepResult};
use tessera_nn::{NnError, Tree};
use tessera_pjrt::Client;

/// Errors of a step over trees.
#[derive(Debug, thiserror::Error)]
pub enum TreeStepError {
    /// Compiling or running the step.
    #[error(transparent)]
    Step(#[from] DriverError),
    /// Arguments or results whose trees do not match the step's.
    #[error(transparent)]
    Structure(#[from] NnError),
    /// The step's program takes or gives another number of leaves than the trees hold.
    #[error("{0}")]
    Count(String),
}

/// A pipelined step whose arguments and results are trees.
pub struct TreeStep {
    jit: MpmdJit,
    inputs: Vec<Tree<ShapedArray>>,
    outputs: Vec<Tree<ShapedArray>>,
}

/// What a call of a [`TreeStep`] gives: its result trees and the pipeline's run.
pub struct TreeRun {
    /// The results, one tree per output tree of the step.
    pub outputs: Vec<Tree<StepResult>>,
    /// Each micro-batch's loss and the tasks' timings (its `outputs` are moved to `outputs`).
    pub run: MpmdStepRun,
}

impl TreeStep {
    /// Compiles `program` (as `trace_trees` made it from `inputs`, giving `outputs`) pipelined
    /// over `mesh`.
    pub fn new(
        client: &Client,
        mesh: &MpmdMesh,
        program: &ClosedJaxpr,
        inputs: Vec<Tree<ShapedArray>>,
        outputs: Vec<Tree<ShapedArray>>,
        options: &MpmdJitOptions,
    ) -> Result<TreeStep, TreeStepError> {
        let leaves = |trees: &[Tree<ShapedArray>]| trees.iter().map(Tree::len).sum::<usize>();
        let (args, results) = (program.jaxpr.invars.len(), program.jaxpr.outvars.len());
        if leaves(&inputs) != args || leaves(&outputs) != results {
            return Err(TreeStepError::Count(format!(
                "the step takes {args} arguments and gives {results} results, but the trees hold \
                 {} and {} leaves; pass the trees trace_trees traced it with",
                leaves(&inputs),
                leaves(&outputs)
            )));
        }
        let jit = tessera_mpmd::mpmd_jit_with(client, mesh, program, options)?;
        Ok(TreeStep {
            jit,
            inputs,
            outputs,
        })
    }

    /// The compiled step (its pipeline, update places, ...).
    pub fn jit(&self) -> &MpmdJit {
        &self.jit
    }

    /// Runs the step on argument trees shaped as the step's input trees.
    pub fn call(&self, args: &[Tree<StepArg>]) -> Result<TreeRun, TreeStepError> {
        if args.len() != self.inputs.len() {
            return Err(TreeStepError::Count(format!(
                "the step takes {} argument trees, got {}",
                self.inputs.len(),
                args.len()
            )));
        }
        for (arg, want) in args.iter().zip(&self.inputs) {
            arg.check_same_structure(want)?;
        }
        let flat: Vec<StepArg> = args.iter().flat_map(Tree::flatten).collect();
        let mut run = self.jit.call_mpmd(&flat)?;
        let mut results = std::mem::take(&mut run.outputs).into_iter();
        let outputs = self
            .outputs
            .iter()
            .map(|tree| tree.unflatten(results.by_ref().take(tree.len()).collect()))
            .collect::<Result<_, _>>()?;
        Ok(TreeRun { outputs, run })
    }
}
