//! `tessera check collectives`: run the collectives some backends lack on every device of the
//! plugin, against the interpreter ([`tessera::selfcheck`]); `tessera check attention`: cuDNN's
//! attention against the decomposition on the plugin ([`tessera::attention_check`]).

use std::process::ExitCode;

use super::out::outln;
use tessera::selfcheck::{self, Check, Outcome};

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
    /// `dot_product_attention` with cuDNN against its decomposition on device 0 of the plugin:
    /// values and gradients on 12 shapes (bf16 and f16, grouped-query, causal or not, masked),
    /// within 2e-2 of each result's largest value. Without a CUDA plugin only the decomposition
    /// runs and every shape is reported `unsupported`.
    Attention {
        /// Count a shape the plugin cannot run with cuDNN as a failure.
        #[arg(long)]
        require_all: bool,
        /// Run only the shapes whose name contains this text (e.g. `window`).
        #[arg(long)]
        only: Option<String>,
    },
}

pub fn run(args: Args, plugin: Option<&str>) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Collectives {
            devices,
            require_all,
            only,
        } => collectives(plugin, devices, require_all, only.unwrap_or_default()),
        What::Attention { require_all, only } => {
            attention(plugin, require_all, only.unwrap_or_default())
        }
    }
}

fn collectives(
    plugin: Option<&str>,
    devices: i64,
    require_all: bool,
    only: String,
) -> anyhow::Result<ExitCode> {
    if devices < 1 {
        anyhow::bail!("--devices {devices}: give at least 1 device, e.g. --devices 8");
    }
    let client = tessera_pjrt::Client::open(plugin, devices)?;
    let checks = selfcheck::collectives_named(&client, |name| name.contains(only.as_str()))
        .map_err(anyhow::Error::msg)?;
    if checks.is_empty() {
        anyhow::bail!(
            "--only {only:?} names none of the programs: {}",
            selfcheck::COLLECTIVES.join("; ")
        );
    }
    report(&checks, require_all, "skipped (too few devices)")
}

fn attention(plugin: Option<&str>, require_all: bool, only: String) -> anyhow::Result<ExitCode> {
    use tessera::attention_check::{SHAPES, attention};
    let client = tessera_pjrt::Client::open(plugin, 1)?;
    let cuda = tessera_pjrt::resolve_plugin(plugin)
        .is_ok_and(|p| p.platform == Some(tessera_pjrt::PluginPlatform::Cuda));
    let checks = attention(&client, cuda, |name| name.contains(only.as_str()));
    if checks.is_empty() {
        let names: Vec<&str> = SHAPES.iter().map(|s| s.name).collect();
        anyhow::bail!(
            "--only {only:?} names none of the shapes: {}",
            names.join("; ")
        );
    }
    report(&checks, require_all, "skipped")
}

/// Prints each check and the counts; fails on a failure (and on an unsupported one with
/// `require_all`).
fn report(checks: &[Check], require_all: bool, skipped_means: &str) -> anyhow::Result<ExitCode> {
    let (mut passed, mut unsupported, mut skipped, mut failed) = (0, 0, 0, 0);
    for check in checks {
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
        "{passed} passed, {unsupported} unsupported by the plugin, {skipped} {skipped_means}, \
         {failed} failed"
    )?;
    let bad = failed > 0 || (require_all && unsupported > 0);
    Ok(if bad {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
