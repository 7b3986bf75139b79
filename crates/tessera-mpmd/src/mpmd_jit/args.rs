//! The arguments and results of [`super::MpmdJit::call_mpmd`]: host arrays, or arrays living
//! on the MPMD groups.

use tessera_pjrt::HostArray;

use crate::array::MpmdArray;
use crate::driver::{DriverError, Placed};
use crate::runtime::Timings;

/// An argument of [`super::MpmdJit::call_mpmd`].
#[derive(Debug, Clone)]
pub enum StepArg {
    /// On the host.
    Host(HostArray),
    /// On one or more MPMD groups.
    Mpmd(Box<MpmdArray>),
}

impl StepArg {
    pub(super) fn signature(&self) -> (Vec<i64>, tessera_pjrt::ElementType) {
        match self {
            StepArg::Host(h) => (
                h.dims().to_vec(),
                tessera_pjrt::ElementType::from_dtype(h.dtype()),
            ),
            StepArg::Mpmd(m) => (m.shape().to_vec(), m.dtype()),
        }
    }

    /// The value as the pipeline takes it: the host array, or the device array of each group
    /// holding it.
    pub(super) fn placed(&self) -> Result<Placed, DriverError> {
        match self {
            StepArg::Host(h) => Ok(Placed::Host(h.clone())),
            StepArg::Mpmd(m) => Ok(Placed::PerGroup(m.to_mpmd_local_arrays()?.clone())),
        }
    }

    pub(super) fn to_host(&self) -> Result<HostArray, DriverError> {
        match self {
            StepArg::Host(h) => Ok(h.clone()),
            StepArg::Mpmd(m) => Ok(m.first_mpmd_replica()?.to_host()?),
        }
    }
}

/// A result of [`super::MpmdJit::call_mpmd`].
#[derive(Debug, Clone)]
pub enum StepResult {
    /// Computed on the host.
    Host(HostArray),
    /// Computed on an MPMD group, and left there.
    Mpmd(Box<MpmdArray>),
}

impl StepResult {
    /// The value on the host (copied from its group if it is on one).
    pub fn to_host(&self) -> Result<HostArray, DriverError> {
        match self {
            StepResult::Host(h) => Ok(h.clone()),
            StepResult::Mpmd(m) => Ok(m.first_mpmd_replica()?.to_host()?),
        }
    }

    /// As an argument of the next call.
    pub fn into_arg(self) -> StepArg {
        match self {
            StepResult::Host(h) => StepArg::Host(h),
            StepResult::Mpmd(m) => StepArg::Mpmd(m),
        }
    }
}

/// What [`super::MpmdJit::call_mpmd`] returns.
#[derive(Debug)]
pub struct MpmdStepRun {
    /// The step's results.
    pub outputs: Vec<StepResult>,
    /// Each micro-batch's loss (empty for a step run as one program whose loss combines by
    /// `Add` or `Max`: its program returns the combined loss only, among the step's results).
    pub losses: Vec<f64>,
    /// When each pipeline task ran.
    pub timings: Timings,
    /// Where the call's time went.
    pub phases: StepPhases,
}

/// Where the time of one [`super::MpmdJit::call_mpmd`] went, in milliseconds; the parts follow
/// one another, so they add up to the call's time.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct StepPhases {
    /// Checking the arguments and placing the parameters.
    pub arguments_ms: f64,
    /// Running the step's code before its loop (on a group's devices), slicing the data into
    /// micro-batches and placing them on their groups.
    pub microbatches_ms: f64,
    /// The pipeline's tasks, from the first one's start to the last one's end.
    pub tasks_ms: f64,
    /// The rest of the pipelined loop: placing its inputs before the first task and collecting
    /// its results after the last (transfers between groups run inside the tasks' span).
    pub pipeline_rest_ms: f64,
    /// Combining the loop's loss and metrics on the host and moving values the update reads
    /// across groups.
    pub results_ms: f64,
    /// The optimizer update (and sharing tied results between groups).
    pub update_ms: f64,
    /// Releasing the step's intermediates (the gradients' buffers, the placed parameters) and
    /// deleting the donated arguments.
    pub release_ms: f64,
}

impl StepPhases {
    /// The sum of the parts.
    pub fn total_ms(&self) -> f64 {
        self.arguments_ms
            + self.microbatches_ms
            + self.tasks_ms
            + self.pipeline_rest_ms
            + self.results_ms
            + self.update_ms
            + self.release_ms
    }
}
