//! `tessera sharding explain`: show what a NamedSharding means: its XLA HloSharding text, its
//! Shardy attribute, the shard shape and which device holds which block.

use super::out::{out, outln};
use std::process::ExitCode;

use anyhow::Context;
use serde_json::json;
use tessera_sharding::mesh::parse_mesh_axes;
use tessera_sharding::visualize::picture;
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

/// Arguments of `tessera sharding`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Explain a NamedSharding of an array: HloSharding, Shardy text, shard shape, device blocks.
    Explain(ExplainArgs),
}

#[derive(Debug, clap::Args)]
struct ExplainArgs {
    /// The mesh axes, `name=size[:type]` separated by commas, e.g. `x=2,y=4:explicit`.
    #[arg(long)]
    mesh: String,
    /// The partition spec, e.g. "P('x', ('y', 'z'), None)".
    #[arg(long)]
    spec: String,
    /// The global array shape, e.g. `8,16` (empty for a scalar).
    #[arg(long, default_value = "")]
    shape: String,
    /// The device ids in mesh order (default 0..size).
    #[arg(long)]
    devices: Option<String>,
    /// JAX's `_logical_device_ids` (a permutation of the mesh positions).
    #[arg(long)]
    logical_device_ids: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Explain(a) => explain(a),
    }
}

/// A comma-separated list of integers; an empty (or blank) text is the empty list (a scalar's
/// shape), but an empty entry inside a list (`8,,8`) is refused rather than dropped.
fn int_list(text: &str, what: &str) -> anyhow::Result<Vec<i64>> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(str::trim)
        .map(|s| {
            if s.is_empty() {
                anyhow::bail!(
                    "{what} {text:?} has an empty entry; give integers separated by single commas"
                );
            }
            s.parse::<i64>()
                .with_context(|| format!("{what}: '{s}' is not an integer"))
        })
        .collect()
}

/// The most mesh positions `explain` lists: it prints (or draws) a block per device, so a mesh
/// of millions of positions would take gigabytes of memory and output.
const MAX_EXPLAINED_DEVICES: i64 = 1 << 16;

fn explain(a: ExplainArgs) -> anyhow::Result<ExitCode> {
    let shape_mesh = parse_mesh_axes(&a.mesh)?;
    if shape_mesh.size() > MAX_EXPLAINED_DEVICES {
        anyhow::bail!(
            "--mesh {} has {} positions; explain lists a block per device and takes at most \
             {MAX_EXPLAINED_DEVICES}: explain the same spec on a smaller mesh of the same axes",
            a.mesh,
            shape_mesh.size()
        );
    }
    let mesh = match &a.devices {
        Some(d) => Mesh::new(shape_mesh, int_list(d, "--devices")?)?,
        None => Mesh::iota(shape_mesh),
    };
    let spec = PartitionSpec::parse(&a.spec)?;
    let shape = int_list(&a.shape, "--shape")?;
    let mut sharding = NamedSharding::new(&mesh, spec)?;
    if let Some(ids) = &a.logical_device_ids {
        sharding = sharding.with_logical_device_ids(int_list(ids, "--logical-device-ids")?)?;
    }
    let hlo = sharding.to_hlo_sharding(shape.len())?;
    let sdy = sharding.to_sdy_sharding(shape.len())?;
    let shard_shape = sharding.shard_shape(&shape)?;
    let blocks = sharding.devices_indices_map(&shape)?;
    if a.json {
        let indices: serde_json::Map<String, serde_json::Value> = blocks
            .iter()
            .map(|(d, b)| {
                (
                    d.to_string(),
                    json!(b.iter().map(|(s, e)| [*s, *e]).collect::<Vec<_>>()),
                )
            })
            .collect();
        let out = json!({
            "mesh": mesh.to_string(),
            "spec": sharding.spec().to_string(),
            "hlo_sharding": hlo.to_string(),
            "tile_assignment_devices": hlo.tile_assignment_devices().unwrap_or_default(),
            "is_fully_replicated": sharding.is_fully_replicated(),
            "num_devices": sharding.num_devices(),
            "sdy_sharding": sdy.to_string(),
            "shape": shape,
            "shard_shape": shard_shape,
            "devices_indices": indices,
        });
        outln!("{}", serde_json::to_string_pretty(&out)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("mesh         {mesh}")?;
    outln!("spec         {}", sharding.spec())?;
    outln!("HloSharding  {hlo}")?;
    outln!("Shardy       {sdy}")?;
    outln!("shape        {shape:?}")?;
    outln!("shard shape  {shard_shape:?}")?;
    out!("{}", picture(&sharding, &shape)?)?;
    Ok(ExitCode::SUCCESS)
}
