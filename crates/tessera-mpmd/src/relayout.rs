//! The once-per-step changes of layout of a data-parallel group, each one program per group
//! (the identity over the values it moves, its arguments and results laid out as asked, so
//! XLA's partitioner adds the collectives):
//!
//! - **The reduction** ([`GradReduce::PerStep`]): the step's gradient accumulators, losses and
//!   float metrics leave their tasks unreduced over the group's data-parallel axes (each device
//!   holds its partial sum, see [`ValueSpecs`]); after the schedule has run, one program per
//!   group lays them out as the step returns them (the parameter's spec, the loss replicated):
//!   the step's only gradient reduction, an all-reduce (combined where XLA combines them) or,
//!   for a parameter split over a data-parallel axis (FSDP), a reduce-scatter (written out as a
//!   `shard_map` of `unreduced_psum_scatter`: XLA's CPU pipeline makes an all-reduce and a
//!   slice of the change of layout alone).
//! - **The gather** ([`FsdpGather::PerStep`]): a parameter split over a data-parallel axis is
//!   gathered once before the group's first task and kept whole over those axes until the
//!   step ends, instead of in every task.
//!
//! Nothing unreduced is ever read on the host or moved between groups: the reduction runs
//! before the step hands any result on.
//!
//! [`GradReduce::PerStep`]: crate::specs::GradReduce::PerStep
//! [`FsdpGather::PerStep`]: crate::specs::FsdpGather::PerStep

use std::collections::{BTreeMap, HashMap};

use tessera_ir::ShapedArray;
use tessera_ir::trace::trace;
use tessera_pjrt::{Array as DeviceArray, ElementType};
use tessera_sharding::{NamedSharding, PartitionSpec};
use tessera_stablehlo::{LowerOptions, Partitioner, lower_closed};

use crate::driver::DriverError;
use crate::mesh::MpmdMesh;
use crate::partition::{StagePrograms, key_aval};
use crate::pipeline::{Key, PipelinePlan};
use crate::runtime::{OutputLayout, PjrtExecutor, ValueId};
use crate::specs::{GradReduce, ValueSpecs};

/// One value a group's program moves: its position in the list the program reads from, its
/// type, and its layout before and after.
#[derive(Debug, Clone)]
pub(crate) struct Moved {
    pub position: usize,
    pub aval: ShapedArray,
    pub from: PartitionSpec,
    pub to: PartitionSpec,
}

/// One group's program and the positions it reads and replaces.
#[derive(Debug, Clone)]
struct GroupProgram {
    program: usize,
    positions: Vec<usize>,
}

/// Per group of this process, the program changing the layout of some values (see the module
/// docs); what it does is named by `what` in errors.
#[derive(Debug, Clone, Default)]
pub(crate) struct Relayouts {
    by_group: BTreeMap<usize, GroupProgram>,
    what: &'static str,
}

impl Relayouts {
    /// Compiles one program per group of `moved` (values by group), each for `mesh`'s group
    /// shape and `partitioner`.
    pub(crate) fn compile(
        moved: BTreeMap<usize, Vec<Moved>>,
        mesh: &MpmdMesh,
        partitioner: Partitioner,
        executor: &mut PjrtExecutor,
        what: &'static str,
    ) -> Result<Relayouts, DriverError> {
        let mut by_group = BTreeMap::new();
        for (group, values) in moved {
            if values.is_empty() {
                continue;
            }
            let program = compile_group(mesh, partitioner, executor, group, &values, what)?;
            let positions = values.iter().map(|m| m.position).collect();
            by_group.insert(group, GroupProgram { program, positions });
        }
        Ok(Relayouts { by_group, what })
    }

    /// Runs every group's program over `values`, replacing the values it moves by their new
    /// layouts.
    pub(crate) fn apply(
        &self,
        executor: &PjrtExecutor,
        values: &mut [Option<DeviceArray>],
    ) -> Result<(), DriverError> {
        for (group, p) in &self.by_group {
            let inputs: Vec<&DeviceArray> = p
                .positions
                .iter()
                .map(|&i| values.get(i).and_then(Option::as_ref))
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    DriverError::Config(format!(
                        "{}: group {group} lacks one of the values it moves",
                        self.what
                    ))
                })?;
            let outputs = executor
                .execute(p.program, &inputs)
                .map_err(|e| DriverError::Config(format!("{} on group {group}: {e}", self.what)))?;
            for (&i, out) in p.positions.iter().zip(outputs) {
                values[i] = Some(out);
            }
        }
        Ok(())
    }

    /// Each group's program, as an index of the executor.
    pub(crate) fn programs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.by_group.iter().map(|(&g, p)| (g, p.program))
    }
}

/// The dimension a value held unreduced is to be split along over exactly its unreduced axes
/// (an FSDP gradient), its other dimensions as they were: a reduce-scatter. `None` for any
/// other change of layout, which XLA's partitioner makes from the layouts alone.
fn scattered_dim(m: &Moved) -> Option<usize> {
    if m.from.unreduced().is_empty() || !m.to.unreduced().is_empty() {
        return None;
    }
    let mut unreduced: Vec<&String> = m.from.unreduced().iter().collect();
    unreduced.sort();
    let dims = m.to.dims().len().max(m.from.dims().len());
    let axes = |spec: &PartitionSpec, d: usize| {
        spec.dims()
            .get(d)
            .map(|x| x.axes().to_vec())
            .unwrap_or_default()
    };
    let mut split = None;
    for d in 0..dims {
        let (from, to) = (axes(&m.from, d), axes(&m.to, d));
        if from == to {
            continue;
        }
        let mut added: Vec<&String> = to.iter().filter(|a| !from.contains(a)).collect();
        added.sort();
        if split.is_some() || !from.is_empty() || added != unreduced {
            return None;
        }
        split = Some(d);
    }
    split
}

/// `x` (laid out `m.from`, unreduced) summed over its unreduced axes with each device keeping
/// its block of dimension `dim`: a `shard_map` over the group whose body is
/// `unreduced_psum_scatter`, so the program holds a reduce-scatter, not an all-reduce and a
/// slice (what XLA's CPU pipeline makes of the change of layout alone).
fn reduce_scatter(
    mesh: &tessera_sharding::AbstractMesh,
    x: &tessera_ir::trace::Tensor,
    m: &Moved,
    dim: usize,
) -> tessera_ir::trace::Tensor {
    let axes: Vec<String> = m.to.dims()[dim].axes().to_vec();
    let in_specs = [m.from.clone()];
    let out_specs = [m.to.clone()];
    let outs = tessera_ir::trace::shard_map(mesh, &in_specs, &out_specs, &[x], |b| {
        let names: Vec<&str> = axes.iter().map(String::as_str).collect();
        vec![b[0].unreduced_psum_scatter_over(&names, dim as i64, true)]
    });
    outs.into_iter().next().unwrap_or_else(|| x.clone())
}

/// Compiles the identity over `values`, each argument laid out `from` and each result `to`.
fn compile_group(
    mesh: &MpmdMesh,
    partitioner: Partitioner,
    executor: &mut PjrtExecutor,
    group: usize,
    values: &[Moved],
    what: &str,
) -> Result<usize, DriverError> {
    let lowering = mesh.lowering_mesh();
    let avals: Vec<ShapedArray> = values.iter().map(|m| m.aval.clone()).collect();
    let group_mesh = lowering.abstract_mesh();
    let program = trace(&avals, |a| {
        a.iter()
            .zip(values)
            .map(|(x, m)| match scattered_dim(m) {
                Some(dim) => reduce_scatter(group_mesh, x, m, dim),
                None => x.clone(),
            })
            .collect()
    })
    .map_err(|e| DriverError::Config(format!("tracing the {what}: {e}")))?;
    let mut arg_shardings = Vec::new();
    let mut result_shardings = Vec::new();
    let mut layouts = Vec::new();
    for m in values {
        arg_shardings.push(Some(NamedSharding::with_partial_axes(
            lowering,
            m.from.clone(),
        )?));
        result_shardings.push(Some(NamedSharding::with_partial_axes(
            lowering,
            m.to.clone(),
        )?));
        layouts.push(OutputLayout {
            shape: m.aval.shape.clone(),
            ty: ElementType::from_dtype(m.aval.dtype),
            spec: m.to.clone(),
        });
    }
    let options = LowerOptions {
        num_partitions: lowering.device_ids().len(),
        arg_shardings,
        result_shardings,
        aliased_outputs: Vec::new(),
        partitioner,
        attention: Default::default(),
    };
    let module = lower_closed(&program, &options)?;
    Ok(executor.compile(&module, group, layouts)?)
}

/// The values each group moves, by group.
pub(crate) type ByGroup = BTreeMap<usize, Vec<Moved>>;

/// The values each group of this process lays out anew once per step: the plan's results it
/// reduces (`unreduced` specs) and the plan's inputs it gathers (a parameter whose step spec
/// splits it over the data-parallel axes but whose tasks read it whole over them), with
/// positions in `built.plan.results` and `built.inputs`.
pub(crate) fn relayouts(
    parts: &[StagePrograms],
    specs: &ValueSpecs,
    built: &PipelinePlan<usize>,
    mesh: &MpmdMesh,
    local: &dyn Fn(usize) -> bool,
) -> Result<(ByGroup, ByGroup), DriverError> {
    let lowering = mesh.lowering_mesh();
    let returned = specs.clone().with_grad_reduce(GradReduce::PerMicrobatch);
    let keys: HashMap<ValueId, Key> = built.ids.iter().map(|(&k, &id)| (id, k)).collect();
    let aval = |key: Key| {
        key_aval(parts, key).ok_or_else(|| DriverError::Config(format!("no type for {key:?}")))
    };
    let mut reduced = ByGroup::new();
    for (position, (id, group)) in built.plan.results.iter().enumerate() {
        let Some(&key) = keys.get(id) else { continue };
        let from = specs.spec(parts, key, lowering);
        if from.unreduced().is_empty() || !local(*group) {
            continue;
        }
        let to = returned.spec(parts, key, lowering);
        let aval = aval(key)?;
        reduced.entry(*group).or_default().push(Moved {
            position,
            aval,
            from,
            to,
        });
    }
    let mut gathered = ByGroup::new();
    for (position, &(key, group)) in built.inputs.iter().enumerate() {
        let Key::Param { stage, k } = key else {
            continue;
        };
        let Some(&arg) = parts.get(stage as usize).and_then(|p| p.param_args.get(k)) else {
            continue;
        };
        let (from, to) = (specs.param(arg), specs.spec(parts, key, lowering));
        if from == to || !local(group) {
            continue;
        }
        let aval = aval(key)?;
        gathered.entry(group).or_default().push(Moved {
            position,
            aval,
            from,
            to,
        });
    }
    Ok((reduced, gathered))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moved(from: &str, to: &str) -> Moved {
        Moved {
            position: 0,
            aval: ShapedArray::new(tessera_ir::DType::F32, &[8, 4]),
            from: PartitionSpec::parse(from).unwrap(),
            to: PartitionSpec::parse(to).unwrap(),
        }
    }

    #[test]
    fn only_a_partial_sum_split_over_exactly_its_axes_is_reduce_scattered() {
        let fsdp = moved("P(unreduced={'data'})", "P('data')");
        assert_eq!(scattered_dim(&fsdp), Some(0));
        let with_tp = moved("P(None, 'model', unreduced={'data'})", "P('data', 'model')");
        assert_eq!(scattered_dim(&with_tp), Some(0));
        // Summed whole (an all-reduce), a gather, or a split over another axis: not a scatter.
        assert_eq!(scattered_dim(&moved("P(unreduced={'data'})", "P()")), None);
        assert_eq!(scattered_dim(&moved("P('data')", "P()")), None);
        assert_eq!(
            scattered_dim(&moved("P(unreduced={'data'})", "P('model')")),
            None
        );
    }
}
