//! Programs on one device: JAX's `jit` of a function whose arguments carry no sharding runs
//! on the default device (`jax_default_device`, else `jax.devices()[0]`).
//! [`Jit::on_device`] puts every argument and result whole on one device (JAX's
//! `SingleDeviceSharding`, here a replicated sharding over a mesh of that one device), and
//! [`Jit::on_default_device`] on the client's first addressable device ([`default_device`]).
//! An array on another device is refused by the call, as any other layout is, naming
//! `Array::reshard` to move it.

use tessera_ir::ClosedJaxpr;
use tessera_pjrt::Client;
use tessera_sharding::{AbstractMesh, Mesh, NamedSharding, PartitionSpec};

use super::{Jit, JitError};

/// The device a program without shardings runs on: the client's first addressable device
/// (JAX's `jax.devices()[0]`, the default when `jax_default_device` is not set).
pub fn default_device(client: &Client) -> Result<i64, JitError> {
    let devices = client.addressable_devices()?;
    let first = devices
        .first()
        .ok_or_else(|| JitError::Convert("the client has no addressable device".into()))?;
    Ok(i64::from(first.id()?))
}

/// Every value whole on `device`: a replicated sharding over a mesh of that one device.
pub fn single_device_sharding(device: i64) -> Result<NamedSharding, JitError> {
    let convert = |e: tessera_sharding::ShardingError| JitError::Convert(e.to_string());
    let shape = AbstractMesh::auto(&[]).map_err(convert)?;
    let mesh = Mesh::new(shape, vec![device]).map_err(convert)?;
    NamedSharding::new(&mesh, PartitionSpec::replicated()).map_err(convert)
}

impl Jit {
    /// `program` with every argument and result whole on `device` (JAX's `jit` with
    /// `jax_default_device` set to it). A program with neither arguments nor results has no
    /// device to run on and is refused when lowered.
    pub fn on_device(program: ClosedJaxpr, device: i64) -> Result<Jit, JitError> {
        let sharding = single_device_sharding(device)?;
        let (ins, outs) = (program.jaxpr.invars.len(), program.jaxpr.outvars.len());
        Jit::new(program, vec![sharding.clone(); ins], vec![sharding; outs])
    }

    /// `program` on the client's default device ([`default_device`]): JAX's `jit` of a
    /// function whose arguments carry no sharding.
    pub fn on_default_device(program: ClosedJaxpr, client: &Client) -> Result<Jit, JitError> {
        Jit::on_device(program, default_device(client)?)
    }
}
