//! One group's array seen as one slice of an array stacked over the MPMD axis (JAXPP's
//! `logically_stacked`): every group holds its own value, and together they form one array over
//! the whole mesh with a new dimension, sharded over the MPMD axis, at `array_axis`.

use tessera_pjrt::{Array, Buffer, Client, HostArray};
use tessera_sharding::{DimSpec, Mesh, NamedSharding, PartitionSpec};

use crate::error::{MpmdError, Result};
use crate::sharding::filter_axis;

/// `array` (this process's shards of one group's value) as this process's part of an array over
/// `comm_mesh` stacked along mesh axis `axis`: its shape gains a dimension of the axis's size at
/// `array_axis`, and its spec names `axis` there. With `strict`, an array whose spec already
/// uses `axis` is refused ([`MpmdError::AxisInSpec`]); otherwise `axis` is dropped from its spec
/// first. Each shard gets the new unit dimension through host memory (PJRT has no reshape of a
/// buffer in place); the other processes' groups hold the other slices.
pub fn logically_stacked(
    client: &Client,
    array: &Array,
    comm_mesh: &Mesh,
    axis: &str,
    array_axis: usize,
    strict: bool,
) -> Result<Array> {
    let spec = array.sharding().spec();
    if strict && spec.used_axes().any(|a| a == axis) {
        return Err(MpmdError::AxisInSpec {
            axis: axis.to_string(),
            spec: spec.to_string(),
        });
    }
    let spec = filter_axis(spec, axis);
    let size = comm_mesh
        .abstract_mesh()
        .axis_size(axis)
        .ok_or_else(|| MpmdError::Stacking(format!("the mesh has no axis {axis:?}")))?;
    let rank = array.shape().len();
    if array_axis > rank {
        return Err(MpmdError::Stacking(format!(
            "array axis {array_axis} is past the {rank} dimensions of the array"
        )));
    }
    let mut dims: Vec<DimSpec> = spec.dims().to_vec();
    dims.resize(dims.len().max(array_axis), DimSpec::Replicated);
    dims.insert(array_axis, DimSpec::from_axes(&[axis]));
    let mut shape = array.shape().to_vec();
    shape.insert(array_axis, size);
    let sharding = NamedSharding::new(comm_mesh, PartitionSpec::new(dims))?;
    let blocks = sharding.devices_indices_map(&shape)?;
    let mut shards = Vec::new();
    for shard in array.addressable_shards()? {
        let host = shard.buffer.to_host()?;
        let mut dims = host.dims().to_vec();
        dims.insert(array_axis, 1);
        let extents = blocks
            .iter()
            .find(|(d, _)| *d == i64::from(shard.device))
            .map(|(_, b)| b.iter().map(|(lo, hi)| hi - lo).collect::<Vec<_>>());
        if extents.as_deref() != Some(dims.as_slice()) {
            return Err(MpmdError::Stacking(format!(
                "device {}'s shard would be {dims:?}, but the stacked sharding gives it {extents:?}; \
                 is the array laid out on one group of the mesh?",
                shard.device
            )));
        }
        let expanded = HostArray::from_bytes(host.dtype(), &dims, host.bytes().to_vec())?;
        shards.push((
            shard.device,
            Buffer::from_host_to(client, &expanded, shard.device)?,
        ));
    }
    Ok(Array::from_addressable_shards(
        &shape,
        array.element_type(),
        &sharding,
        shards,
    )?)
}
