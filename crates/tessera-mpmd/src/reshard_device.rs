//! SPMD→MPMD on the devices for an array whose groups' blocks no device holds whole (one split
//! over the MPMD axis), as JAXPP's `_spmd_to_mpmd_reshard` does with `jit(identity,
//! out_shardings=...)`: one identity program compiled over the whole mesh takes the array as it
//! is laid out and returns it laid out by the target spec, which has no MPMD axis and so
//! replicates the value across the groups; each group's array is that result's shards on the
//! group's devices. XLA moves the blocks between the devices; nothing goes through the host.
//! The program goes through the persistent compile cache (`Client::compile_cached`).

use std::collections::BTreeMap;

use tessera_ir::ShapedArray;
use tessera_ir::trace::trace;
use tessera_pjrt::{Array, Buffer, Client, CompileOptions};
use tessera_sharding::NamedSharding;
use tessera_stablehlo::{LowerOptions, Partitioner, lower_closed};

use crate::error::{MpmdError, Result};
use crate::mesh::MpmdMesh;
use crate::sharding::MpmdSharding;

/// Every group of `sharding` with its copy of `source`, moved by one program on the devices,
/// or `None` where this path does not apply and [`Array::reshard`] does the work: a source not
/// laid out on the MPMD mesh itself (the program runs over the mesh's devices in its order),
/// not fully addressable here, or with a memory kind on either side.
pub(crate) fn replicate_over_groups(
    client: &Client,
    mesh: &MpmdMesh,
    source: &Array,
    sharding: &MpmdSharding,
) -> Result<Option<BTreeMap<usize, Array>>> {
    let whole = mesh.mesh();
    let applies = source.sharding().concrete_mesh() == Some(whole)
        && source.sharding().memory_kind().is_none()
        && source.sharding().logical_device_ids().is_none()
        && source.is_fully_addressable()?;
    if !applies {
        return Ok(None);
    }
    let target = NamedSharding::new(whole, sharding.spec().clone())?;
    let devices = whole.device_ids().to_vec();
    let aval = ShapedArray::new(source.element_type().dtype(), source.shape());
    let program = trace(&[aval], |a| vec![a[0].clone()])?;
    let partitioner = Partitioner::default();
    let options = LowerOptions {
        num_partitions: devices.len(),
        arg_shardings: vec![Some(source.sharding().clone())],
        result_shardings: vec![Some(target.clone())],
        aliased_outputs: Vec::new(),
        partitioner,
        attention: Default::default(),
    };
    let module = lower_closed(&program, &options).map_err(|e| MpmdError::ReshardProgram {
        what: e.to_string(),
    })?;
    let compile = CompileOptions::spmd(&devices).with_shardy(partitioner.is_shardy());
    let executable = client.compile_cached(module.text.as_bytes(), &compile)?;
    let shards = source.addressable_shards()?;
    let lists = devices
        .iter()
        .map(|&d| {
            shards
                .iter()
                .find(|s| i64::from(s.device) == d)
                .map(|s| vec![s.buffer.as_ref()])
                .ok_or_else(|| MpmdError::ReshardProgram {
                    what: format!("the source array holds no shard on device {d}"),
                })
        })
        .collect::<Result<Vec<Vec<&Buffer>>>>()?;
    let mut outputs: BTreeMap<i64, Buffer> = BTreeMap::new();
    for (&device, mut results) in devices.iter().zip(executable.execute(&lists)?) {
        let buffer = results.pop().ok_or_else(|| MpmdError::ReshardProgram {
            what: format!("the identity program returned nothing on device {device}"),
        })?;
        outputs.insert(device, buffer);
    }
    let mut per_group = BTreeMap::new();
    for group in sharding.groups() {
        let group_sharding = sharding.group_sharding(group)?;
        let mine = group_sharding
            .concrete_mesh()
            .map(|m| m.device_ids().to_vec())
            .unwrap_or_default();
        let held =
            mine.iter()
                .map(|d| {
                    outputs.remove(d).map(|b| (*d as i32, b)).ok_or_else(|| {
                        MpmdError::ReshardProgram {
                            what: format!("group {group}'s device {d} is not on the mesh"),
                        }
                    })
                })
                .collect::<Result<Vec<_>>>()?;
        let array = Array::from_addressable_shards(
            source.shape(),
            source.element_type(),
            &group_sharding,
            held,
        )?;
        per_group.insert(group, array);
    }
    Ok(Some(per_group))
}
