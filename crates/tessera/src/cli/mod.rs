//! Subcommands of the `tessera` program, one module each.

mod devices;
mod gpt;
mod oracle;
mod schedule;
mod sharding;
mod timing;
mod train;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Tessera: SPMD sharding and MPMD pipeline parallelism for array programs.
#[derive(Debug, Parser)]
#[command(name = "tessera", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the devices of a PJRT plugin (the cached CPU plugin by default).
    Devices(devices::Args),
    /// Explain shardings: HloSharding and Shardy text, shard shapes, device blocks.
    Sharding(sharding::Args),
    /// Run a file of JAX-made test vectors and report `N passed, M failed`.
    Oracle(oracle::Args),
    /// Build, validate, simulate and draw a pipeline schedule.
    Schedule(schedule::Args),
    /// Train a model pipelined over MPMD groups of devices.
    Train(train::Args),
}

/// Runs one parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Devices(args) => devices::run(args),
        Command::Sharding(args) => sharding::run(args),
        Command::Oracle(args) => oracle::run(args),
        Command::Schedule(args) => schedule::run(args),
        Command::Train(args) => train::run(args),
    }
}

/// Prints the closing line of an oracle or test run and turns it into an exit status.
#[allow(dead_code)]
pub fn report_summary(passed: usize, failed: usize) -> ExitCode {
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
