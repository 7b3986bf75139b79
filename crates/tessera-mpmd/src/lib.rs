//! MPMD pipeline parallelism (NVIDIA JAXPP's model in Rust): an [`MpmdMesh`] splits a mesh into
//! groups along one axis; each group runs its own SPMD programs (pipeline stages) on its devices;
//! [`MpmdArray`]s live on the groups that use them; the reshards move arrays between the SPMD and
//! MPMD layouts. [`mpmd_jit()`] runs a training step whose micro-batch loop is a `treduce`:
//! the loop pipelined over the groups under its schedule, the rest (the optimizer update) on the
//! groups that hold the parameters.

mod array;
mod choices;
pub mod compose;
pub mod cross_group;
pub mod driver;
pub mod effects;
mod error;
pub mod host;
pub mod memory;
mod mesh;
pub mod mpi_job;
pub mod mpmd_jit;
pub mod partition;
pub mod pipeline;
pub mod processes;
mod relayout;
pub mod remat;
mod reshard;
mod reshard_across;
mod reshard_device;
pub mod residuals;
pub mod runtime;
mod sharding;
pub mod specs;
pub mod stacked;
pub mod stage_graph;
pub mod synthetic;
mod tied_sum;

pub use array::MpmdArray;
pub use error::{MpmdError, Result};
pub use mesh::MpmdMesh;
pub use mpmd_jit::{
    BeforeLoopRuns, FUSED_TASK, Fusion, LoopBodyError, LoopKind, MpmdJit, MpmdJitOptions,
    MpmdStepRun, StepArg, StepLoopsError, StepPhases, StepResult, mpmd_jit, mpmd_jit_by_yield,
    mpmd_jit_with,
};
pub use remat::{Remat, RematPolicy};
pub use reshard::{
    group_by_size_threshold, interleaved_order, mpmd_to_spmd_batches, mpmd_to_spmd_reshard,
    spmd_to_mpmd_reshard,
};
pub use reshard_across::{
    global_threshold, mpmd_to_spmd_reshard_across, spmd_to_mpmd_reshard_across,
};
pub use sharding::{MpmdSharding, filter_axis};
pub use specs::{FsdpGather, GradReduce, SpecError, ValueSpecs};
pub use stacked::logically_stacked;
