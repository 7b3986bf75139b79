//! `tessera sharding`: explain a sharding (filled in by the sharding issue).

use std::process::ExitCode;

/// Arguments of `tessera sharding`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Everything after `sharding` (the subcommand is not built yet).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    super::not_built_yet("sharding", "tessera-sharding: the complete sharding algebra")
}
