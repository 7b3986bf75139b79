//! Values that cross MPMD groups outside the pipeline's transfers: a tied parameter placed on
//! every group that uses it, the parts of its gradient summed, the inputs and results of an
//! update that mixes groups (e.g. clipping by the global gradient norm), and a parameter handed
//! to a step in another layout than the step's. [`onto_group`] moves a value shard by shard
//! (each target block that a source shard holds whole is copied device to device, the rest cut
//! from a host copy: `tessera_pjrt::Array::reshard`), so a value keeps or changes its spec as the
//! target asks. (The tied gradient's parts are summed on the devices, `tied_sum.rs`.)

use tessera_pjrt::{Array as DeviceArray, Client};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

use crate::driver::DriverError;

/// Whether `array` lies on `group` laid out by `spec`: the same devices in mesh order, the same
/// block on each, the same unreduced axes and memory kind (typed shardings compared by
/// `NamedSharding::is_equivalent_to`, so `P('x', None)` and `P('x')` agree, and logical device
/// ids or another device order that move blocks do not).
pub fn lies_on(array: &DeviceArray, group: &Mesh, spec: &PartitionSpec) -> bool {
    let Ok(target) = NamedSharding::new(group, spec.clone()) else {
        return false;
    };
    array
        .sharding()
        .is_equivalent_to(&target, array.shape().len())
        .unwrap_or(false)
}

/// `array` on `group` laid out by `spec`: itself if it lies so, else a copy moved shard by
/// shard (device to device where a shard holds a target block whole, else through the host).
pub fn onto_group(
    client: &Client,
    array: &DeviceArray,
    group: &Mesh,
    spec: &PartitionSpec,
) -> Result<DeviceArray, DriverError> {
    if lies_on(array, group, spec) {
        return Ok(array.clone());
    }
    let sharding = NamedSharding::new(group, spec.clone())?;
    Ok(array.reshard(client, &sharding)?)
}
