//! The gradient of a tied parameter (one that several stages read) is the sum of each stage's
//! part. The parts are summed on the devices of the group holding the running sum (the first
//! stage's, in one process), by a small program compiled with the pipeline for each tied
//! parameter and group using it (`a + b`, both laid out by the parameter's spec); a part on
//! another group is moved there shard by shard first. Nothing goes through the host.
//!
//! A floating-point `a + b` on the device is the correctly rounded sum, as the host's sum in
//! `f64` rounded once to the dtype was, so the gradients are the same bit for bit.

use std::collections::HashMap;

use tessera_ir::ShapedArray;
use tessera_ir::trace::trace;
use tessera_pjrt::{Array as DeviceArray, Client, ElementType};
use tessera_sharding::{NamedSharding, PartitionSpec};
use tessera_stablehlo::{LowerOptions, Partitioner, lower_closed};

use crate::driver::DriverError;
use crate::mesh::MpmdMesh;
use crate::partition::{StagePrograms, key_aval};
use crate::pipeline::Key;
use crate::runtime::{OutputLayout, PjrtExecutor};
use crate::specs::ValueSpecs;

/// One tied parameter's adding program: where it runs and how its operands are laid out.
#[derive(Debug, Clone)]
struct TiedAdd {
    /// The program's index in the pipeline's executor.
    program: usize,
    /// The group of the parameter's first stage.
    group: usize,
    /// The parameter's spec inside its group.
    spec: PartitionSpec,
}

/// The adding programs of a pipeline's tied parameters: per parameter loss argument, one for
/// each group of this process running a stage that reads it.
#[derive(Debug, Clone, Default)]
pub(crate) struct TiedAdds {
    by_arg: HashMap<usize, Vec<TiedAdd>>,
}

/// What compiling the adding programs reads from the pipeline being built.
pub(crate) struct TiedSetup<'a> {
    pub parts: &'a [StagePrograms],
    pub specs: &'a ValueSpecs,
    pub mesh: &'a MpmdMesh,
    pub partitioner: Partitioner,
    /// The group running stage `s`.
    pub group_of_stage: &'a dyn Fn(usize) -> Option<usize>,
    /// Whether this process runs group `g`.
    pub local: &'a dyn Fn(usize) -> bool,
}

impl TiedAdds {
    /// Compiles `a + b` into `executor` for every parameter read by more than one stage, on each
    /// group of this process running one of those stages.
    pub(crate) fn compile(
        setup: &TiedSetup<'_>,
        executor: &mut PjrtExecutor,
    ) -> Result<TiedAdds, DriverError> {
        let mut by_arg: HashMap<usize, Vec<TiedAdd>> = HashMap::new();
        for (s, part) in setup.parts.iter().enumerate() {
            for (k, &arg) in part.param_args.iter().enumerate() {
                let uses = setup.parts.iter().filter(|p| p.param_args.contains(&arg));
                if uses.count() < 2 {
                    continue;
                }
                let Some(group) = (setup.group_of_stage)(s).filter(|&g| (setup.local)(g)) else {
                    continue;
                };
                let adds = by_arg.entry(arg).or_default();
                if adds.iter().any(|a| a.group == group) {
                    continue;
                }
                let key = Key::Param { stage: s as u32, k };
                let aval = key_aval(setup.parts, key)
                    .ok_or_else(|| DriverError::Config(format!("no type for {key:?}")))?;
                let spec = setup.specs.param(arg);
                let program = compile_add(setup, executor, group, &aval, &spec)?;
                adds.push(TiedAdd {
                    program,
                    group,
                    spec,
                });
            }
        }
        Ok(TiedAdds { by_arg })
    }

    /// `earlier + part`, two parts of the gradient of tied parameter `arg`, laid out as
    /// `earlier` on the group it lies on; `part` may lie on another group.
    pub(crate) fn add(
        &self,
        client: &Client,
        mesh: &MpmdMesh,
        executor: &PjrtExecutor,
        arg: usize,
        earlier: &DeviceArray,
        part: &DeviceArray,
    ) -> Result<DeviceArray, DriverError> {
        let adds = self.by_arg.get(&arg).map_or(&[][..], Vec::as_slice);
        let lies_on = |a: &&TiedAdd| {
            mesh.group(a.group)
                .is_ok_and(|g| crate::cross_group::lies_on(earlier, g, &a.spec))
        };
        let add = adds.iter().find(lies_on).ok_or_else(|| {
            DriverError::Config(format!(
                "parameter argument {arg} has gradient parts from several stages, but none of \
                 its groups in this process holds the first part ({})",
                earlier.sharding().spec()
            ))
        })?;
        let group = mesh.group(add.group)?;
        let onto = |a: &DeviceArray| crate::cross_group::onto_group(client, a, group, &add.spec);
        let (earlier, part) = (onto(earlier)?, onto(part)?);
        let mut sum = executor
            .execute(add.program, &[&earlier, &part])
            .map_err(|e| {
                DriverError::Config(format!(
                    "summing the gradient parts of tied parameter argument {arg}: {e}"
                ))
            })?;
        sum.pop().ok_or_else(|| {
            DriverError::Config(format!(
                "summing the gradient parts of tied parameter argument {arg} returned nothing"
            ))
        })
    }
}

/// Compiles `a + b` of type `aval`, every operand and the result laid out by `spec`, for
/// `group`.
fn compile_add(
    setup: &TiedSetup<'_>,
    executor: &mut PjrtExecutor,
    group: usize,
    aval: &ShapedArray,
    spec: &PartitionSpec,
) -> Result<usize, DriverError> {
    let program = trace(&[aval.clone(), aval.clone()], |a| vec![&a[0] + &a[1]])
        .map_err(|e| DriverError::Config(format!("tracing a tied gradient's sum: {e}")))?;
    let lowering = setup.mesh.lowering_mesh();
    let sharding = NamedSharding::new(lowering, spec.clone())?;
    let options = LowerOptions {
        num_partitions: lowering.device_ids().len(),
        arg_shardings: vec![Some(sharding.clone()), Some(sharding.clone())],
        result_shardings: vec![Some(sharding)],
        aliased_outputs: Vec::new(),
        partitioner: setup.partitioner,
        attention: Default::default(),
    };
    let module = lower_closed(&program, &options)?;
    let layout = OutputLayout {
        shape: aval.shape.clone(),
        ty: ElementType::from_dtype(aval.dtype),
        spec: spec.clone(),
    };
    Ok(executor.compile(&module, group, vec![layout])?)
}
