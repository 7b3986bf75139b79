//! `tessera train`: pipelined training (filled in by the MPMD issue).

use std::process::ExitCode;

/// Arguments of `tessera train`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Everything after `train` (the subcommand is not built yet).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    super::not_built_yet("train", "tessera-mpmd: MPMD pipeline-parallel training")
}
