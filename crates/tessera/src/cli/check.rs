//! `tessera check collectives`: run the collectives some backends lack on every device of the
//! plugin, against the interpreter ([`tessera::selfcheck`]).

use std::process::ExitCode;

use super::out::outln;
use tessera::selfcheck::{self, Outcome};

/// Arguments of `tessera check`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// `ragged_all_to_all`, `psend`/`precv`, the asynchronous starts and the synchronous
    /// collectives, each a `shard_map` over every device of the plugin, against the
    /// interpreter. An operation the plugin's backend does not implement is reported
    /// `unsupported` (XLA's CPU backend lacks `ragged_all_to_all` and `send`/`recv`).
    Collectives {
        /// CPU devices to create (a GPU plugin uses the devices it has).
        #[arg(long, default_value_t = 8)]
        devices: i64,
        /// Count an operation the plugin does not implement as a failure.
        #[arg(long)]
        require_all: bool,
        /// Run only the programs whose name contains this text (e.g. `ragged`).
        #[arg(long)]
        only: Option<String>,
    },
}

pub fn run(args: Args, plugin: Option<&str>) -> anyhow::Result<ExitCode> {
    let What::Collectives {
        devices,
        require_all,
        only,
    } = args.what;
    if devices < 1 {
        anyhow::bail!("--devices {devices}: give at least 1 device, e.g. --devices 8");
    }
    let client = tessera_pjrt::Client::open(plugin, devices)?;
    let only = only.unwrap_or_default();
    let checks = selfcheck::collectives_named(&client, |name| name.contains(only.as_str()))
        .map_err(anyhow::Error::msg)?;
    if checks.is_empty() {
        anyhow::bail!(
            "--only {only:?} names none of the programs: {}",
            selfcheck::COLLECTIVES.join("; ")
        );
    }
    let (mut passed, mut unsupported, mut skipped, mut failed) = (0, 0, 0, 0);
    for check in &checks {
        match &check.outcome {
            Outcome::Passed => {
                passed += 1;
                outln!("ok           {}", check.name)?;
            }
            Outcome::Unsupported(why) => {
                unsupported += 1;
                outln!("unsupported  {}: {why}", check.name)?;
            }
            Outcome::Skipped(why) => {
                skipped += 1;
                outln!("skipped      {}: {why}", check.name)?;
            }
            Outcome::Failed(why) => {
                failed += 1;
                outln!("FAILED       {}: {why}", check.name)?;
            }
        }
    }
    outln!(
        "{passed} passed, {unsupported} unsupported by the plugin, {skipped} skipped (too few \
         devices), {failed} failed"
    )?;
    let bad = failed > 0 || (require_all && unsupported > 0);
    Ok(if bad {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
