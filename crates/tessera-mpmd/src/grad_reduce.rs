//! The once-per-step reduction of a data-parallel group ([`GradReduce::PerStep`]): the step's
//! gradient accumulators, losses and float metrics leave their tasks unreduced over the group's
//! data-parallel axes (each device holds its partial sum, see [`ValueSpecs`]), and after the
//! schedule has run, one program per group lays them out as the step returns them (the
//! parameter's spec, the loss replicated). XLA's partitioner turns that change of layout into
//! the step's only reductions: all-reduces (combined where XLA combines them) or, for a
//! gradient whose parameter is split over a data-parallel axis (FSDP), a reduce-scatter.
//!
//! Nothing unreduced is ever read on the host or moved between groups: the programs run before
//! the step hands any result on.
//!
//! [`GradReduce::PerStep`]: crate::specs::GradReduce::PerStep

use std::collections::{BTreeMap, HashMap};

use tessera_ir::ShapedArray;
use tessera_ir::trace::trace;
use tessera_pjrt::{Array as DeviceArray, ElementType};
use tessera_sharding::{NamedSharding, PartitionSpec};
use tessera_stablehlo::{LowerOptions, Partitioner, lower_closed};

use crate::driver::DriverError;
use crate::mesh::MpmdMesh;
use crate::partition::{StagePrograms, key_aval};
use crate::pipeline::Key;
use crate::runtime::{OutputLayout, PjrtExecutor, ValueId};
use crate::specs::{GradReduce, ValueSpecs};

/// One group's reducing program and the step results it reads and replaces.
#[derive(Debug, Clone)]
struct GroupReduce {
    /// The program's index in the pipeline's executor.
    program: usize,
    /// Positions in the plan's results, in the program's argument order.
    positions: Vec<usize>,
}

/// The reducing programs of a pipeline, one per group of this process that ends the step with
/// unreduced values.
#[derive(Debug, Clone, Default)]
pub(crate) struct StepReduces {
    by_group: BTreeMap<usize, GroupReduce>,
}

/// What compiling the reducing programs reads from the pipeline being built.
pub(crate) struct ReduceSetup<'a> {
    pub parts: &'a [StagePrograms],
    pub specs: &'a ValueSpecs,
    pub mesh: &'a MpmdMesh,
    pub partitioner: Partitioner,
    /// The plan's results: value and group.
    pub results: &'a [(ValueId, usize)],
    /// The key of each value.
    pub keys: &'a HashMap<ValueId, Key>,
    /// Whether this process runs group `g`.
    pub local: &'a dyn Fn(usize) -> bool,
}

impl StepReduces {
    /// Compiles, for each group of this process, the program laying out its unreduced results
    /// as the step returns them.
    pub(crate) fn compile(
        setup: &ReduceSetup<'_>,
        executor: &mut PjrtExecutor,
    ) -> Result<StepReduces, DriverError> {
        let lowering = setup.mesh.lowering_mesh();
        let mut wanted: BTreeMap<usize, Vec<(usize, Key, PartitionSpec)>> = BTreeMap::new();
        for (position, (id, group)) in setup.results.iter().enumerate() {
            let Some(&key) = setup.keys.get(id) else {
                continue;
            };
            let spec = setup.specs.spec(setup.parts, key, lowering);
            if spec.unreduced().is_empty() || !(setup.local)(*group) {
                continue;
            }
            wanted
                .entry(*group)
                .or_default()
                .push((position, key, spec));
        }
        let mut by_group = BTreeMap::new();
        for (group, values) in wanted {
            let program = compile_group(setup, executor, group, &values)?;
            let positions = values.iter().map(|(p, _, _)| *p).collect();
            by_group.insert(group, GroupReduce { program, positions });
        }
        Ok(StepReduces { by_group })
    }

    /// Runs every group's program over `results` (the plan's results, in order), replacing
    /// the unreduced values by their reduced layouts.
    pub(crate) fn apply(
        &self,
        executor: &PjrtExecutor,
        results: &mut [Option<DeviceArray>],
    ) -> Result<(), DriverError> {
        for (group, reduce) in &self.by_group {
            let inputs: Vec<&DeviceArray> = reduce
                .positions
                .iter()
                .map(|&p| results.get(p).and_then(Option::as_ref))
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    DriverError::Config(format!(
                        "group {group} ended the step without one of the values it reduces"
                    ))
                })?;
            let outputs = executor.execute(reduce.program, &inputs).map_err(|e| {
                DriverError::Config(format!("reducing group {group}'s gradients: {e}"))
            })?;
            for (&p, out) in reduce.positions.iter().zip(outputs) {
                results[p] = Some(out);
            }
        }
        Ok(())
    }

    /// The executor's index of each group's program.
    pub(crate) fn programs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.by_group.iter().map(|(&g, r)| (g, r.program))
    }
}

/// Compiles the identity over `values` (their keys and unreduced specs), each argument laid out
/// by its unreduced spec and each result by the spec the step returns it in.
fn compile_group(
    setup: &ReduceSetup<'_>,
    executor: &mut PjrtExecutor,
    group: usize,
    values: &[(usize, Key, PartitionSpec)],
) -> Result<usize, DriverError> {
    let lowering = setup.mesh.lowering_mesh();
    let avals: Vec<ShapedArray> = values
        .iter()
        .map(|(_, key, _)| {
            key_aval(setup.parts, *key)
                .ok_or_else(|| DriverError::Config(format!("no type for {key:?}")))
        })
        .collect::<Result<_, _>>()?;
    let program = trace(&avals, |a| a.to_vec())
        .map_err(|e| DriverError::Config(format!("tracing a group's reduction: {e}")))?;
    let mut arg_shardings = Vec::new();
    let mut result_shardings = Vec::new();
    let mut layouts = Vec::new();
    let returned = setup
        .specs
        .clone()
        .with_grad_reduce(GradReduce::PerMicrobatch);
    for ((_, key, spec), aval) in values.iter().zip(&avals) {
        let reduced = returned.spec(setup.parts, *key, lowering);
        arg_shardings.push(Some(NamedSharding::with_partial_axes(
            lowering,
            spec.clone(),
        )?));
        result_shardings.push(Some(NamedSharding::new(lowering, reduced.clone())?));
        layouts.push(OutputLayout {
            shape: aval.shape.clone(),
            ty: ElementType::from_dtype(aval.dtype),
            spec: reduced,
        });
    }
    let options = LowerOptions {
        num_partitions: lowering.device_ids().len(),
        arg_shardings,
        result_shardings,
        aliased_outputs: Vec::new(),
        partitioner: setup.partitioner,
    };
    let module = lower_closed(&program, &options)?;
    Ok(executor.compile(&module, group, layouts)?)
}
