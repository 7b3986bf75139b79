//! `tessera devices`: load a PJRT plugin, create a client and list its devices.

use std::path::PathBuf;
use std::process::ExitCode;

use tessera_pjrt::{Client, ClientOptions, DeviceInfo, Plugin};

/// Arguments of `tessera devices`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The PJRT plugin to load (default: $TESSERA_PJRT_PLUGIN, then the cached CPU plugin).
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// Use the CUDA plugin of an installed `jax-cuda13-pjrt` package.
    #[arg(long, conflicts_with = "plugin")]
    gpu: bool,
    /// How many virtual devices the CPU plugin should create.
    #[arg(long, default_value_t = 8)]
    cpu_devices: i64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(serde::Serialize)]
struct Report {
    plugin: String,
    platform: String,
    platform_version: String,
    pjrt_api_version: String,
    devices: Vec<DeviceInfo>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (plugin, options) = if args.gpu {
        let path = tessera_pjrt::find_cuda_plugin().ok_or_else(|| {
            anyhow::anyhow!("no CUDA PJRT plugin found: install one with `pip install jax-cuda13-pjrt` (on a machine with an NVIDIA GPU), or pass --plugin PATH")
        })?;
        (Plugin::load(&path)?, ClientOptions::default())
    } else {
        (
            Plugin::discover(args.plugin.as_deref())?,
            ClientOptions::cpu(args.cpu_devices),
        )
    };
    let client = Client::new(plugin, &options)?;
    let (major, minor) = plugin.api_version();
    let devices = client
        .addressable_devices()?
        .iter()
        .map(|d| d.info())
        .collect::<Result<Vec<_>, _>>()?;
    let report = Report {
        plugin: plugin.path().display().to_string(),
        platform: client.platform_name()?,
        platform_version: client.platform_version()?,
        pjrt_api_version: format!("{major}.{minor}"),
        devices,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(report: &Report) {
    println!("plugin:   {}", report.plugin);
    println!(
        "platform: {} ({}), PJRT C API {}",
        report.platform, report.platform_version, report.pjrt_api_version
    );
    println!("{} addressable devices:", report.devices.len());
    println!(
        "  {:>3}  {:<6}  {:>7}  description",
        "id", "kind", "process"
    );
    for d in &report.devices {
        println!(
            "  {:>3}  {:<6}  {:>7}  {}",
            d.id, d.kind, d.process_index, d.description
        );
    }
}
