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
    /// The PJRT plugin: a name (`cpu`, the default CPU plugin; `zml-cpu`, `jax-0.11-cpu`,
    /// `xla-cpu-pjrt`; `cuda`) or the path of a plugin library. Default: $TESSERA_PJRT_PLUGIN,
    /// else `cpu`.
    #[arg(long, global = true, value_name = "NAME|PATH")]
    plugin: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the devices of a PJRT plugin (the default CPU plugin unless --plugin names another).
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
        Command::Devices(args) => devices::run(args, cli.plugin.as_deref()),
        Command::Sharding(args) => sharding::run(args),
        Command::Oracle(args) => oracle::run(args, cli.plugin.as_deref()),
        Command::Schedule(args) => schedule::run(args),
        Command::Train(args) => train::run(args, cli.plugin.as_deref()),
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
