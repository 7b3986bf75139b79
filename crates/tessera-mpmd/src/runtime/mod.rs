//! The MPMD runtime: one worker thread per group runs that group's task list in order. A task
//! receives its inputs produced on other groups, runs, and sends each output to the groups that
//! consume it as soon as it exists, without waiting for the copy. The runtime knows nothing of
//! schedules or models: it runs a [`Plan`], and the executor and transport are traits, so the
//! same code drives PJRT executables (and, later, other processes) or plain host closures in
//! tests.
//!
//! Failure never hangs: every wait (for an input, and for a running task) has a deadline
//! ([`RunOptions`], `TESSERA_TIMEOUT_S`); the first error stops every worker; and a worker that
//! waits for a value no running worker can still produce reports a deadlock naming the value.

mod device_copy;
mod error;
mod options;
mod pjrt;
mod plan;
mod run;
mod stall;
pub(crate) mod trace;
mod transport;
mod worker;

pub use device_copy::DeviceCopyTransport;
pub use error::{BoxError, RunError, Stuck};
pub use options::{DEFAULT_TIMEOUT, RunOptions, TIMEOUT_ENV, parse_timeout};
pub use pjrt::{CompiledTask, CompilerOptions, OutputLayout, PjrtExecutor, Program, array_bytes};
pub use plan::{Plan, PlanError, TaskSpec, ValueId};
pub use run::{RunOutput, run, run_local};
pub use trace::{InputWait, TaskTiming, Timings, TransferTiming, ValueSpan};
pub use transport::{CopyFn, LocalTransport, Mailbox, PeerState, Transport};
pub use worker::Executor;
