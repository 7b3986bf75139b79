//! `tessera devices`: load a PJRT plugin, create a client and list its devices.

use super::out::outln;
use std::process::ExitCode;

use tessera_pjrt::{Client, DeviceInfo, resolve_plugin};

/// Arguments of `tessera devices`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Use the CUDA plugin (the same as `--plugin cuda`).
    #[arg(long)]
    gpu: bool,
    /// How many virtual devices a CPU plugin should create (GPU plugins use the GPUs there are).
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

pub fn run(args: Args, plugin: Option<&str>) -> anyhow::Result<ExitCode> {
    if args.gpu && plugin.is_some_and(|name| name != "cuda") {
        anyhow::bail!("--gpu means `--plugin cuda`; drop one of --gpu and --plugin");
    }
    let choice = resolve_plugin(if args.gpu { Some("cuda") } else { plugin })?;
    let client = Client::open_choice(&choice, args.cpu_devices)?;
    let plugin = client.plugin();
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
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print_table(&report)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(report: &Report) -> anyhow::Result<()> {
    outln!("plugin:   {}", report.plugin)?;
    outln!(
        "platform: {} ({}), PJRT C API {}",
        report.platform,
        report.platform_version,
        report.pjrt_api_version
    )?;
    outln!("{} addressable devices:", report.devices.len())?;
    outln!(
        "  {:>3}  {:<6}  {:>7}  description",
        "id",
        "kind",
        "process"
    )?;
    for d in &report.devices {
        outln!(
            "  {:>3}  {:<6}  {:>7}  {}",
            d.id,
            d.kind,
            d.process_index,
            d.description
        )?;
    }
    Ok(())
}
