//! The MPMD runtime: one worker thread per group runs that group's task list in order. A task
//! waits for its inputs (produced locally or received from other groups), runs, and sends each
//! output to the groups that consume it as soon as it exists. The runtime knows nothing of
//! schedules or models: it runs a [`Plan`], and the executor and transport are traits, so the
//! same code drives PJRT executables (and, later, other processes) or plain host closures in
//! tests.
//!
//! Failure never hangs: the first error stops every worker (waiting workers poll an abort flag),
//! and a worker that waits for a value no running worker can still produce reports a deadlock
//! naming the value.

mod pjrt;
mod plan;
mod trace;
mod worker;

pub use pjrt::{CompiledTask, DeviceCopyTransport, OutputLayout, PjrtExecutor};
pub use plan::{Plan, PlanError, TaskSpec, ValueId};
pub use trace::{TaskTiming, Timings, TransferTiming};
pub use worker::{Executor, RunError, RunOutput, Transport, run};
