//! The device mesh of a run and how the training step's arguments lie on it.
//!
//! `--mesh stage=2,data=2,model=2` names every axis; `--mpmd-axis` (default `stage`) makes the
//! MPMD groups, `data` splits each micro-batch's rows inside a group (and, with `--fsdp`, the
//! parameters too) and `model` splits the decoders Megatron style. Without `--mesh` the mesh is
//! `stage=G,data=devices/G`, and without `--mesh` or `--fsdp` the step runs as before: parameters
//! replicated in their group, rows split over the whole group. The parameters' specs come from
//! the model library (`DecoderConfig::param_specs`), the optimizer state's from
//! `Optimizer::state_specs`; nothing model-specific lives here.

use anyhow::{Context, bail};
use tessera_ir::ShapedArray;
use tessera_ir::prim::{AttentionImpl, AttentionShards};
use tessera_nn::optim::Optimizer;
use tessera_nn::{ParallelAxes, Tree};
use tessera_sharding::mesh::parse_mesh_axes;
use tessera_sharding::{AbstractMesh, DimSpec, Mesh, PartitionSpec};

use super::args::Args;
use super::config::ModelChoice;

/// The data-parallel axis's name.
pub const DATA_AXIS: &str = "data";
/// The tensor-parallel axis's name.
pub const MODEL_AXIS: &str = "model";

/// The mesh of a run and the axes it shards over.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The whole mesh (every device of the run).
    pub shape: Mesh,
    /// The MPMD axis.
    pub mpmd_axis: String,
    /// Whether the step's arguments are laid out explicitly (`--mesh` or `--fsdp`); otherwise
    /// every argument takes `mpmd_jit`'s default layout, as before sharded stages existed.
    pub explicit: bool,
    /// Whether parameters are also sharded over `data`.
    pub fsdp: bool,
}

/// Refuses `--devices` that cannot give each of `groups` MPMD groups the same number of devices
/// (at least one), naming the option that set the groups (`--mpmd-dim`, else `--stages`).
fn check_devices(devices: u32, groups: u32, from_mpmd_dim: bool) -> anyhow::Result<()> {
    let source = if from_mpmd_dim {
        format!("--mpmd-dim {groups}")
    } else {
        format!("--stages {groups} (one MPMD group per stage unless --mpmd-dim says otherwise)")
    };
    if groups == 0 {
        bail!("{source}: a run has at least 1 MPMD group");
    }
    if devices == 0 {
        bail!("--devices 0: a run needs at least 1 device; e.g. --devices {groups}");
    }
    if i64::from(devices) > tessera_pjrt::MAX_CPU_DEVICES {
        bail!(
            "--devices {devices} is more than the {} devices Tessera asks a CPU client for; \
             give fewer",
            tessera_pjrt::MAX_CPU_DEVICES
        );
    }
    if devices < groups {
        bail!(
            "--devices {devices} cannot give a device to each of the {groups} MPMD groups of \
             {source}; pass --devices {groups} or more, or fewer groups"
        );
    }
    if !devices.is_multiple_of(groups) {
        bail!(
            "--devices {devices} is not a multiple of the {groups} MPMD groups of {source}; give \
             each group the same number of devices"
        );
    }
    Ok(())
}

impl Layout {
    /// The layout the arguments ask for, checked before any device work.
    pub fn choose(args: &Args) -> anyhow::Result<Layout> {
        let axis = args.mpmd_axis.as_str();
        if axis.is_empty() || axis == DATA_AXIS || axis == MODEL_AXIS {
            bail!(
                "--mpmd-axis '{axis}': the MPMD axis needs a name of its own (not empty, \
                 '{DATA_AXIS}' or '{MODEL_AXIS}', which split each group's work); e.g. \
                 --mpmd-axis stage"
            );
        }
        let Some(text) = &args.mesh else {
            if axis != "stage" {
                bail!("--mpmd-axis {axis} names an axis of --mesh; give --mesh too");
            }
            let groups = args.mpmd_dim.unwrap_or(args.stages);
            check_devices(args.devices, groups, args.mpmd_dim.is_some())?;
            let per_group = i64::from(args.devices / groups);
            let shape = Mesh::auto(&[("stage", i64::from(groups)), (DATA_AXIS, per_group)])?;
            return Ok(Layout {
                shape,
                mpmd_axis: axis.into(),
                explicit: args.fsdp,
                fsdp: args.fsdp,
            });
        };
        if text.trim().is_empty() {
            bail!("--mesh is empty: give its axes as name=size, e.g. --mesh {axis}=2,data=2");
        }
        let shape = parse_mesh_axes(text).with_context(|| {
            format!("--mesh {text}: give axes as name=size, e.g. --mesh stage=2,data=2,model=2")
        })?;
        let names = shape.axis_names();
        let Some(mpmd_size) = shape.axis_size(axis) else {
            bail!(
                "--mesh {text} has no axis '{axis}' to make the MPMD groups of (--mpmd-axis); \
                 add it, e.g. --mesh {axis}=2,{text}, or name one of {names:?} with --mpmd-axis"
            );
        };
        if let Some(other) = names
            .iter()
            .find(|n| *n != axis && *n != DATA_AXIS && *n != MODEL_AXIS)
        {
            bail!(
                "--mesh axis '{other}': tessera train knows the MPMD axis ('{axis}'), \
                 '{DATA_AXIS}' (data parallelism, FSDP) and '{MODEL_AXIS}' (tensor parallelism); \
                 rename it to one of those"
            );
        }
        if shape.size() != i64::from(args.devices) {
            bail!(
                "--mesh {text} spans {} devices but --devices is {}; pass --devices {}",
                shape.size(),
                args.devices,
                shape.size()
            );
        }
        if let Some(dim) = args.mpmd_dim.filter(|&d| i64::from(d) != mpmd_size) {
            bail!(
                "--mpmd-dim {dim} differs from the size {mpmd_size} of the MPMD axis '{axis}' of \
                 --mesh; drop --mpmd-dim or make them equal"
            );
        }
        if args.fsdp && shape.axis_size(DATA_AXIS).is_none() {
            bail!(
                "--fsdp shards parameters over the '{DATA_AXIS}' axis, which --mesh {text} lacks"
            );
        }
        Ok(Layout {
            shape: Mesh::iota(shape),
            mpmd_axis: axis.into(),
            explicit: true,
            fsdp: args.fsdp,
        })
    }

    /// The number of MPMD groups.
    pub fn mpmd_dim(&self) -> u32 {
        self.shape
            .abstract_mesh()
            .axis_size(&self.mpmd_axis)
            .unwrap_or(1) as u32
    }

    fn axis_size(&self, name: &str) -> Option<i64> {
        self.shape.abstract_mesh().axis_size(name)
    }

    /// The parallel axes of the decoders' parameters.
    pub fn parallel_axes(&self) -> ParallelAxes {
        let mut axes = ParallelAxes::replicated();
        if let Some(size) = self.axis_size(MODEL_AXIS) {
            axes = ParallelAxes::tensor(MODEL_AXIS, size);
        }
        match (self.fsdp, self.axis_size(DATA_AXIS)) {
            (true, Some(size)) => axes.with_fsdp(DATA_AXIS, size),
            _ => axes,
        }
    }

    /// The spec of each step argument (parameters, optimizer state, learning rate, the stacked
    /// micro-batches of each data argument), or none when the layout is not explicit.
    pub fn step_specs(
        &self,
        choice: &ModelChoice,
        param_avals: &Tree<ShapedArray>,
        opt: &dyn Optimizer,
        data_args: usize,
    ) -> anyhow::Result<Vec<Option<PartitionSpec>>> {
        if !self.explicit {
            return Ok(Vec::new());
        }
        let axes = self.parallel_axes();
        let params = match choice {
            ModelChoice::Decoder(config) => config.param_specs(&axes)?,
            ModelChoice::Mlp if axes != ParallelAxes::replicated() => bail!(
                "--model mlp has no sharded layout: a '{MODEL_AXIS}' axis in --mesh and --fsdp \
                 shard the decoders (--model gpt2 or llama)"
            ),
            ModelChoice::Mlp => param_avals.map(&mut |_, _| PartitionSpec::replicated()),
        };
        let state = opt.state_specs(param_avals, &params)?;
        let rows = match self.axis_size(DATA_AXIS) {
            Some(_) => DimSpec::from_axes(&[DATA_AXIS]),
            None => DimSpec::Replicated,
        };
        let data = PartitionSpec::new(vec![DimSpec::Replicated, rows]);
        let mut specs: Vec<Option<PartitionSpec>> =
            params.flatten().into_iter().map(Some).collect();
        specs.extend(state.flatten().into_iter().map(Some));
        specs.push(Some(PartitionSpec::replicated()));
        specs.extend(std::iter::repeat_n(Some(data), data_args));
        Ok(specs)
    }

    /// How a decoder's attention runs per shard in each group, where it runs on cuDNN (whose
    /// calls XLA cannot partition) and a group has several devices: on the group's mesh, a
    /// micro-batch's `rows` over `data` and the heads over `model`, each where it divides them.
    /// `None` elsewhere (XLA partitions the decomposition itself).
    pub fn attention_shards(&self, choice: &ModelChoice, rows: i64) -> Option<AttentionShards> {
        let ModelChoice::Decoder(config) = choice else {
            return None;
        };
        if config.attention != AttentionImpl::Cudnn {
            return None;
        }
        let whole = self.shape.abstract_mesh();
        let keep: Vec<usize> = (0..whole.axis_names().len())
            .filter(|&i| whole.axis_names()[i] != self.mpmd_axis)
            .collect();
        let group = AbstractMesh::from_parts(
            keep.iter()
                .map(|&i| whole.axis_names()[i].clone())
                .collect(),
            keep.iter().map(|&i| whole.axis_sizes()[i]).collect(),
            keep.iter().map(|&i| whole.axis_types()[i]).collect(),
        )
        .ok()?;
        let over = |axis: &str, counts: &[i64]| match group.axis_size(axis) {
            Some(size) if size > 1 && counts.iter().all(|n| n % size == 0) => vec![axis.into()],
            Some(_) | None => Vec::new(),
        };
        let batch = over(DATA_AXIS, &[rows]);
        let heads = over(MODEL_AXIS, &[config.heads, config.kv_heads]);
        (!batch.is_empty() || !heads.is_empty()).then_some(AttentionShards {
            mesh: group,
            batch,
            heads,
        })
    }

    /// Checks that a micro-batch's rows split evenly over `data`, saying which flags to change.
    pub fn check_rows(&self, rows: u32) -> anyhow::Result<()> {
        match self.axis_size(DATA_AXIS) {
            Some(size) if self.explicit && i64::from(rows) % size != 0 => bail!(
                "a micro-batch has {rows} rows (--batch / --microbatches), which the {size} \
                 devices of the '{DATA_AXIS}' axis do not divide; pick a --batch that gives each \
                 micro-batch a multiple of {size} rows"
            ),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_nn::DecoderConfig;

    fn layout(axes: &[(&str, i64)]) -> Layout {
        Layout {
            shape: Mesh::auto(axes).unwrap(),
            mpmd_axis: "stage".into(),
            explicit: true,
            fsdp: false,
        }
    }

    fn llama(attention: AttentionImpl) -> ModelChoice {
        let config = DecoderConfig::llama(256, 2, 64, 4, 16).with_attention(attention);
        ModelChoice::Decoder(DecoderConfig {
            kv_heads: 2,
            ..config
        })
    }

    /// cuDNN's attention runs per shard on the group's mesh, rows over `data` and heads over
    /// `model` where they divide; XLA's decomposition, and one-device groups, are left alone.
    #[test]
    fn cudnn_attention_runs_per_shard_in_a_group_of_several_devices() {
        let cudnn = llama(AttentionImpl::Cudnn);
        let mesh = layout(&[("stage", 2), ("data", 2), ("model", 2)]);
        let shards = mesh.attention_shards(&cudnn, 4).unwrap();
        assert_eq!(shards.mesh.axis_names(), ["data", "model"]);
        assert_eq!(
            (shards.batch, shards.heads),
            (vec!["data".into()], vec!["model".into()])
        );
        // 3 rows do not split over 2 devices: the heads alone.
        let shards = mesh.attention_shards(&cudnn, 3).unwrap();
        assert_eq!((shards.batch.len(), shards.heads.len()), (0, 1));
        // 2 key/value heads do not split over 4 devices, nor 3 rows: nothing to split.
        let wide = layout(&[("stage", 1), ("data", 1), ("model", 4)]);
        assert_eq!(wide.attention_shards(&cudnn, 3), None);
        assert_eq!(mesh.attention_shards(&llama(AttentionImpl::Xla), 4), None);
        let lone = layout(&[("stage", 4), ("data", 1)]);
        assert_eq!(lone.attention_shards(&cudnn, 4), None);
    }
}
