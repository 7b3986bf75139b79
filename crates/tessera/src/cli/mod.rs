//! Subcommands of the `tessera` program, one module each.

mod check;
mod devices;
mod export;
mod generate;
mod launch;
mod mpi;
mod oracle;
pub mod out;
mod plan;
mod schedule;
mod sharding;
mod timing;
mod train;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use out::outln;

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
    #[command(allow_negative_numbers = true)]
    Devices(devices::Args),
    /// Explain shardings: HloSharding and Shardy text, shard shapes, device blocks.
    Sharding(sharding::Args),
    /// Run a file of JAX-made test vectors and report `N passed, M failed`.
    Oracle(oracle::Args),
    /// Check that the plugin runs Tessera's programs as the interpreter does (`check
    /// collectives`: the collectives some backends lack, on every device).
    Check(check::Args),
    /// Build, validate, simulate and draw a pipeline schedule.
    Schedule(schedule::Args),
    /// Measure a decoder's costs and rank pipeline configurations (stages, boundaries, groups,
    /// micro-batches, schedule) by predicted step time and memory.
    Plan(Box<plan::Args>),
    /// Train a model pipelined over MPMD groups of devices.
    #[command(allow_negative_numbers = true)]
    Train(Box<train::Args>),
    /// Write a checkpoint of a Llama-family model as a Hugging Face folder.
    Export(export::Args),
    /// Continue a prompt with a Hugging Face model folder or a checkpoint (greedy, or sampled
    /// from a seed), through a key/value cache on the device.
    Generate(generate::Args),
    /// Run `train` as an MPI job of N ranks (mpirun, or srun inside a Slurm allocation), and
    /// restart it from its newest complete checkpoint when a rank dies or a wait times out.
    Launch(launch::Args),
}

impl Cli {
    /// Parses the process's arguments (exiting with clap's message where they do not parse),
    /// noting which of `train`'s defaulted flags were given on the command line, so that a
    /// `--plan` can refuse a flag that disagrees with it instead of silently replacing it.
    pub fn parse_noting_given() -> Cli {
        let matches = <Cli as clap::CommandFactory>::command().get_matches();
        let mut cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
            Ok(cli) => cli,
            Err(err) => err.exit(),
        };
        if let (Command::Train(args), Some(("train", sub))) =
            (&mut cli.command, matches.subcommand())
        {
            args.given = train::DEFAULTED_FLAGS
                .iter()
                .filter(|id| sub.value_source(id) == Some(clap::parser::ValueSource::CommandLine))
                .map(|id| id.to_string())
                .collect();
        }
        cli
    }
}

/// Runs one parsed command line. A `TESSERA_PARTITIONER` other than `shardy` or `gspmd` is
/// refused before anything is lowered (the library would fall back to its built-in default).
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    tessera_stablehlo::Partitioner::from_env()?;
    match cli.command {
        Command::Devices(args) => devices::run(args, cli.plugin.as_deref()),
        Command::Sharding(args) => sharding::run(args),
        Command::Oracle(args) => oracle::run(args, cli.plugin.as_deref()),
        Command::Check(args) => check::run(args, cli.plugin.as_deref()),
        Command::Schedule(args) => schedule::run(args),
        Command::Plan(args) => plan::run(*args, cli.plugin.as_deref()),
        Command::Train(args) => train::run(*args, cli.plugin.as_deref()),
        Command::Launch(args) => launch::run(args),
        Command::Generate(args) => generate::run(args, cli.plugin.as_deref()),
        Command::Export(args) => export::run(args),
    }
}

/// The largest `stages × micro-batches` a pipeline may have: plans, simulations and traces
/// grow with it, and 128 stages × 2048 micro-batches builds and simulates in seconds.
pub const MAX_PIPELINE_CELLS: u64 = 1 << 18;

/// Refuses pipeline sizes that start at 0 or that cannot be built in reasonable time and memory.
pub fn check_pipeline_size(stages: u32, microbatches: u32) -> anyhow::Result<()> {
    if stages == 0 {
        anyhow::bail!("--stages 0: a pipeline has at least 1 stage");
    }
    if microbatches == 0 {
        anyhow::bail!("--microbatches 0: micro-batches start at 1");
    }
    let cells = u64::from(stages) * u64::from(microbatches);
    if cells > MAX_PIPELINE_CELLS {
        anyhow::bail!(
            "--stages {stages} × --microbatches {microbatches} = {cells} is above the limit of \
             {MAX_PIPELINE_CELLS} stage-micro-batch pairs (the plan and its simulation grow with \
             it); use fewer stages or micro-batches"
        );
    }
    Ok(())
}

/// Prints the closing line of an oracle or test run and turns it into an exit status. A run
/// of no cases is an error, not a pass: the file checked nothing.
#[allow(dead_code)]
pub fn report_summary(passed: usize, failed: usize) -> anyhow::Result<ExitCode> {
    outln!("{passed} passed, {failed} failed")?;
    if passed + failed == 0 {
        anyhow::bail!(
            "the oracle file has no cases, so nothing was checked; give a file its generator \
             wrote with cases in it"
        );
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
