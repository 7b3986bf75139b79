//! Values that cross MPMD groups outside the pipeline's transfers: a tied parameter placed on
//! every group that uses it, the parts of its gradient summed, and the inputs and results of an
//! update that mixes groups (e.g. clipping by the global gradient norm). They are staged through
//! host memory, which is what a transfer between groups of the CPU plugin does anyway.

use tessera_pjrt::{Array as DeviceArray, Client};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

use crate::driver::DriverError;
use crate::host::{from_host, to_host};

/// Whether `array` lies replicated on exactly the devices of `group`.
pub fn lies_on(array: &DeviceArray, group: &Mesh) -> bool {
    let mut have = array.sharding().device_set().unwrap_or_default();
    let mut want = group.device_ids().to_vec();
    have.sort_unstable();
    want.sort_unstable();
    have == want && array.sharding().spec().used_axes().next().is_none()
}

/// `array` replicated on `group`: itself if it lies there, else a copy through the host.
pub fn onto_group(
    client: &Client,
    array: &DeviceArray,
    group: &Mesh,
) -> Result<DeviceArray, DriverError> {
    if lies_on(array, group) {
        return Ok(array.clone());
    }
    let sharding = NamedSharding::new(group, PartitionSpec::replicated())?;
    Ok(DeviceArray::device_put(
        client,
        &array.to_host()?,
        &sharding,
    )?)
}

/// `a + b`, laid out as `a` (`b` may live on another group); `dtype` is their type.
pub fn add(
    client: &Client,
    a: &DeviceArray,
    b: &DeviceArray,
    dtype: tessera_ir::DType,
) -> Result<DeviceArray, DriverError> {
    let convert = |e: crate::host::ConvertError| DriverError::Config(e.0);
    let x = from_host(&a.to_host()?, dtype).map_err(convert)?;
    let y = from_host(&b.to_host()?, dtype).map_err(convert)?;
    let sum: Vec<f64> = x
        .to_vec()
        .iter()
        .zip(y.to_vec())
        .map(|(p, q)| p + q)
        .collect();
    let summed = tessera_ir::Array::new(dtype, &x.shape(), sum)
        .map_err(|e| DriverError::Config(e.to_string()))?;
    Ok(DeviceArray::device_put(
        client,
        &to_host(&summed).map_err(convert)?,
        a.sharding(),
    )?)
}
