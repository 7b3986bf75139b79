//! `tessera schedule`: build, validate, simulate and draw a pipeline schedule (filled in by the
//! schedules issue).

use std::process::ExitCode;

/// Arguments of `tessera schedule`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Everything after `schedule` (the subcommand is not built yet).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    super::not_built_yet("schedule", "tessera-schedule: pipeline schedules as data")
}
