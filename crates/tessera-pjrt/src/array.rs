//! `Array`: a global array made of per-device buffers laid out by a `NamedSharding` (JAX's
//! `jax.Array`).

use tessera_sharding::NamedSharding;

use crate::buffer::Buffer;
use crate::client::Client;
use crate::element_type::ElementType;
use crate::error::{PjrtError, Result};
use crate::host::HostArray;

/// One device's piece of an [`Array`]. Clones share the device buffer.
#[derive(Debug, Clone)]
pub struct Shard {
    /// The device holding it.
    pub device: i32,
    /// The block of the global array it holds, `[start, stop)` per dimension.
    pub block: Vec<(i64, i64)>,
    /// The data (shared by the clones of the array).
    pub buffer: std::sync::Arc<Buffer>,
}

/// A global array sharded over devices. Shards are kept in mesh order (the device order that
/// SPMD executables compiled for the same mesh take their arguments in). Cloning is cheap: the
/// clones share the device buffers, which are freed when the last clone lets go of them.
#[derive(Debug, Clone)]
pub struct Array {
    shape: Vec<i64>,
    ty: ElementType,
    sharding: NamedSharding,
    shards: Option<Vec<Shard>>,
}

impl Array {
    /// Splits `host` by `sharding` and copies each block to its device, in the sharding's memory
    /// kind when it has one ([`PjrtError::UnknownMemoryKind`], naming the device's kinds, when
    /// the device has no such memory).
    pub fn device_put(
        client: &Client,
        host: &HostArray,
        sharding: &NamedSharding,
    ) -> Result<Array> {
        if host.dtype().is_key() {
            return Err(PjrtError::InvalidProgram(
                "PRNG keys go to devices as their u32 words: pass `keys.key_words()`".into(),
            ));
        }
        let blocks = sharding.devices_indices_map(host.dims())?;
        let mut shards = Vec::with_capacity(blocks.len());
        for (device, block) in blocks {
            let device = i32::try_from(device).map_err(|_| PjrtError::UnknownDevice {
                id: i32::MAX,
                available: Vec::new(),
            })?;
            let piece = host.block(&block)?;
            shards.push(Shard {
                device,
                buffer: std::sync::Arc::new(put(client, &piece, device, sharding)?),
                block,
            });
        }
        Ok(Array {
            shape: host.dims().to_vec(),
            ty: ElementType::from_dtype(host.dtype()),
            sharding: sharding.clone(),
            shards: Some(shards),
        })
    }

    /// Wraps buffers an executable returned, one per device in mesh order, as an array of
    /// global `shape` laid out by `sharding`.
    pub fn from_shards(
        shape: &[i64],
        ty: ElementType,
        sharding: &NamedSharding,
        buffers: Vec<Buffer>,
    ) -> Result<Array> {
        let blocks = sharding.devices_indices_map(shape)?;
        if blocks.len() != buffers.len() {
            return Err(PjrtError::Arity {
                what: "shards",
                expected: blocks.len(),
                actual: buffers.len(),
            });
        }
        let shards = blocks
            .into_iter()
            .zip(buffers)
            .map(|((device, block), buffer)| Shard {
                device: device as i32,
                block,
                buffer: std::sync::Arc::new(buffer),
            })
            .collect();
        Ok(Array {
            shape: shape.to_vec(),
            ty,
            sharding: sharding.clone(),
            shards: Some(shards),
        })
    }

    /// An array of which this process holds only some shards (a process of a multi-process job,
    /// JAX's partially addressable `jax.Array`): `shards` gives the buffer of each of this
    /// process's devices of `sharding`; the other devices belong to other processes. Reading it
    /// whole ([`Array::to_host`]) needs every block here.
    pub fn from_addressable_shards(
        shape: &[i64],
        ty: ElementType,
        sharding: &NamedSharding,
        shards: Vec<(i32, Buffer)>,
    ) -> Result<Array> {
        let shards = shards
            .into_iter()
            .map(|(d, b)| (d, std::sync::Arc::new(b)))
            .collect();
        Array::from_shared_shards(shape, ty, sharding, shards)
    }

    /// [`Array::from_addressable_shards`] with buffers other arrays may also hold: the new array
    /// shares them (no copy), as a view of the same data under another sharding.
    pub fn from_shared_shards(
        shape: &[i64],
        ty: ElementType,
        sharding: &NamedSharding,
        shards: Vec<(i32, std::sync::Arc<Buffer>)>,
    ) -> Result<Array> {
        let blocks = sharding.devices_indices_map(shape)?;
        let mut held: Vec<(usize, Shard)> = Vec::with_capacity(shards.len());
        for (device, buffer) in shards {
            let position = blocks
                .iter()
                .position(|(d, _)| *d == i64::from(device))
                .ok_or_else(|| PjrtError::UnknownDevice {
                    id: device,
                    available: blocks.iter().map(|(d, _)| *d as i32).collect(),
                })?;
            let block = blocks[position].1.clone();
            held.push((
                position,
                Shard {
                    device,
                    block,
                    buffer,
                },
            ));
        }
        held.sort_by_key(|(position, _)| *position);
        Ok(Array {
            shape: shape.to_vec(),
            ty,
            sharding: sharding.clone(),
            shards: Some(held.into_iter().map(|(_, s)| s).collect()),
        })
    }

    /// Whether this process holds a shard for every device of the sharding.
    pub fn is_fully_addressable(&self) -> Result<bool> {
        let devices = self.sharding.devices_indices_map(&self.shape)?.len();
        Ok(self.addressable_shards()?.len() == devices)
    }

    /// The global shape.
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// The element type.
    pub fn element_type(&self) -> ElementType {
        self.ty
    }

    /// The sharding.
    pub fn sharding(&self) -> &NamedSharding {
        &self.sharding
    }

    /// The shards, in mesh order.
    pub fn addressable_shards(&self) -> Result<&[Shard]> {
        self.shards.as_deref().ok_or(PjrtError::Deleted)
    }

    /// Watches every shard of `arrays` until it is computed, without blocking a thread per
    /// buffer ([`crate::Readiness`]).
    pub fn readiness(arrays: &[Array]) -> Result<crate::Readiness> {
        let mut buffers = Vec::new();
        for array in arrays {
            buffers.extend(
                array
                    .addressable_shards()?
                    .iter()
                    .map(|s| s.buffer.as_ref()),
            );
        }
        crate::Readiness::watch(&buffers)
    }

    /// Watches the launch that computed `outputs` (all the results of one execution of one
    /// program): PJRT gives every result of an execution on a device the same definition event,
    /// so one result's shard per device stands for the rest, and the wait costs one callback
    /// per device instead of one per result and device.
    pub fn launch_readiness(outputs: &[Array]) -> Result<crate::Readiness> {
        match outputs.last() {
            Some(last) => Array::readiness(std::slice::from_ref(last)),
            None => crate::Readiness::watch(&[]),
        }
    }

    /// Waits until every shard is computed.
    pub fn block_until_ready(&self) -> Result<()> {
        self.addressable_shards()?
            .iter()
            .try_for_each(|s| s.buffer.block_until_ready())
    }

    /// Assembles the global array on the host (each block is read once, from its first holder).
    /// An array only partly held here is an error unless its shards hold every block.
    pub fn to_host(&self) -> Result<HostArray> {
        let mut out = HostArray::zeros(&tessera_ir::ShapedArray::new(self.ty.dtype(), &self.shape));
        let mut seen = Vec::new();
        for shard in self.addressable_shards()? {
            if seen.contains(&shard.block) {
                continue;
            }
            out.write_block(&shard.block, &shard.buffer.to_host()?)?;
            seen.push(shard.block.clone());
        }
        let missing = self
            .sharding
            .devices_indices_map(&self.shape)?
            .into_iter()
            .find(|(_, block)| !seen.contains(block));
        if let Some((device, block)) = missing {
            return Err(PjrtError::NotAddressable { device, block });
        }
        Ok(out)
    }

    /// Lets go of the device buffers (freed unless a clone still holds them); later use of this
    /// array is an error.
    pub fn delete(&mut self) {
        self.shards = None;
    }

    /// Whether [`Array::delete`] was called.
    pub fn is_deleted(&self) -> bool {
        self.shards.is_none()
    }

    /// The same values laid out by another sharding. Each target block that some shard already
    /// holds whole is copied device to device (into the target's memory kind when it names
    /// one, where the plugin copies between memories); the rest are cut from a host copy of the
    /// array, counted by [`Array::host_round_trips`].
    pub fn reshard(&self, client: &Client, sharding: &NamedSharding) -> Result<Array> {
        let shards = self.addressable_shards()?;
        let mut host: Option<HostArray> = None;
        let mut out = Vec::new();
        for (device, block) in sharding.devices_indices_map(&self.shape)? {
            let device = device as i32;
            let source = shards
                .iter()
                .filter(|s| s.block == block)
                .min_by_key(|s| s.device != device);
            let copied = match (source, sharding.memory_kind()) {
                (Some(shard), None) => Some(shard.buffer.copy_to(device)?),
                (Some(shard), Some(kind)) => copy_to_memory(&shard.buffer, device, kind)?,
                (None, _) => None,
            };
            let buffer = match copied {
                Some(buffer) => buffer,
                None => {
                    if host.is_none() {
                        HOST_ROUND_TRIPS.with(|n| n.set(n.get() + 1));
                        host = Some(self.to_host()?);
                    }
                    let piece = host
                        .as_ref()
                        .map(|h| h.block(&block))
                        .transpose()?
                        .unwrap_or_else(|| {
                            HostArray::zeros(&tessera_ir::ShapedArray::new(self.ty.dtype(), &[]))
                        });
                    put(client, &piece, device, sharding)?
                }
            };
            out.push(Shard {
                device,
                block,
                buffer: std::sync::Arc::new(buffer),
            });
        }
        Ok(Array {
            shape: self.shape.clone(),
            ty: self.ty,
            sharding: sharding.clone(),
            shards: Some(out),
        })
    }

    /// How many reshards on this thread so far read their array to the host to cut target
    /// blocks no device held whole (a count per thread, so concurrent work elsewhere does not
    /// change it).
    pub fn host_round_trips() -> u64 {
        HOST_ROUND_TRIPS.with(std::cell::Cell::get)
    }

    /// The size of one shard in bytes.
    pub fn shard_bytes(&self) -> Result<usize> {
        let shape = self.sharding.shard_shape(&self.shape)?;
        Ok(crate::host::element_count(&shape) * self.ty.size_in_bytes())
    }
}

thread_local! {
    /// Reshards on this thread that went through the host ([`Array::host_round_trips`]).
    static HOST_ROUND_TRIPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// `buffer` copied into memory `kind` of `device`, or `None` where the plugin does not copy
/// between memories (the block is then cut from the host).
fn copy_to_memory(buffer: &Buffer, device: i32, kind: &str) -> Result<Option<Buffer>> {
    match buffer.copy_to_memory(device, kind) {
        Ok(copied) => Ok(Some(copied)),
        Err(PjrtError::Call {
            code: crate::error::ErrorCode::Unimplemented,
            ..
        }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `piece` copied to `device`, in `sharding`'s memory kind when it has one.
fn put(
    client: &Client,
    piece: &HostArray,
    device: i32,
    sharding: &NamedSharding,
) -> Result<Buffer> {
    match sharding.memory_kind() {
        Some(kind) => Buffer::from_host_in(client, piece, device, kind),
        None => Buffer::from_host_to(client, piece, device),
    }
}
