//! `MpmdArray`: an array held by one or more MPMD groups, each group holding an SPMD `Array`
//! laid out on its own devices (JAXPP's `MpmdArray`).
//!
//! JAXPP's assertions are typed errors here: an array off the sharding's groups
//! ([`MpmdError::WrongGroup`]), two arrays on one group ([`MpmdError::DuplicateGroup`]), arrays
//! disagreeing in shape, element type or spec ([`MpmdError::Mismatch`]), deleting an array twice
//! ([`MpmdError::Deleted`]) or one this process holds nothing of ([`MpmdError::NotAddressable`]).
//!
//! Deletion is all or none: an `MpmdArray` is built from live arrays only
//! ([`MpmdError::DeletedArray`]) and [`MpmdArray::delete`] deletes every group's array at once,
//! so the per-group arrays are never partly deleted (the state JAXPP's `is_deleted` asserts
//! against cannot be built). A clone holds its own handles on the same buffers: deleting one
//! handle leaves the other usable, as with [`tessera_pjrt::Array`].

use std::collections::BTreeMap;

use tessera_ir::ShapedArray;
use tessera_pjrt::{Array, ElementType};

use crate::error::{MpmdError, Result};
use crate::sharding::{MpmdSharding, filter_axis};

/// A logical array living on a subset of the MPMD groups of a mesh. Clones share the device
/// buffers.
#[derive(Debug, Clone)]
pub struct MpmdArray {
    sharding: MpmdSharding,
    shape: Vec<i64>,
    ty: ElementType,
    arrays: BTreeMap<usize, Array>,
}

impl MpmdArray {
    /// An array lying exactly on one group's devices (e.g. a batch loaded there), as an
    /// `MpmdArray` of that group with the array's spec.
    pub fn on_its_group(mesh: &crate::MpmdMesh, array: Array) -> Result<MpmdArray> {
        let devices = array.sharding().device_set()?;
        let group = mesh
            .group_with_devices(&devices)
            .ok_or_else(|| MpmdError::NotOnAGroup {
                index: 0,
                shape: array.shape().to_vec(),
                devices: devices.clone(),
            })?;
        let spec = filter_axis(array.sharding().spec(), mesh.mpmd_axis());
        let sharding = MpmdSharding::new(mesh, [group], &spec)?;
        MpmdArray::new(vec![array], sharding)
    }

    /// Wraps per-group arrays. Each must be live and lie exactly on one group's devices, that
    /// group must be one of `sharding`'s, no group may appear twice, and all must agree in shape,
    /// element type and spec (without the MPMD axis). Errors: [`MpmdError::DeletedArray`],
    /// [`MpmdError::NotOnAGroup`], [`MpmdError::WrongGroup`], [`MpmdError::DuplicateGroup`],
    /// [`MpmdError::Mismatch`]; no arrays at all is [`MpmdError::NotAddressable`] (use
    /// [`MpmdArray::remote`]).
    pub fn new(arrays: Vec<Array>, sharding: MpmdSharding) -> Result<MpmdArray> {
        let mesh = sharding.mpmd_mesh();
        let groups = sharding.groups();
        let mut by_group = BTreeMap::new();
        for (index, array) in arrays.into_iter().enumerate() {
            if array.is_deleted() {
                return Err(MpmdError::DeletedArray {
                    index,
                    shape: array.shape().to_vec(),
                });
            }
            let devices = array.sharding().device_set()?;
            let group =
                mesh.group_with_devices(&devices)
                    .ok_or_else(|| MpmdError::NotOnAGroup {
                        index,
                        shape: array.shape().to_vec(),
                        devices: devices.clone(),
                    })?;
            if !groups.contains(&group) {
                return Err(MpmdError::WrongGroup {
                    index,
                    group,
                    groups: groups.clone(),
                });
            }
            let spec = filter_axis(array.sharding().spec(), mesh.mpmd_axis());
            if &spec != sharding.spec() {
                return Err(MpmdError::Mismatch {
                    what: format!(
                        "array {index} has spec {spec}, the sharding says {}",
                        sharding.spec()
                    ),
                });
            }
            check_group_layout(index, &array, group, &sharding)?;
            if by_group.insert(group, array).is_some() {
                return Err(MpmdError::DuplicateGroup { index, group });
            }
        }
        let (&g0, first) = by_group.iter().next().ok_or(MpmdError::NotAddressable)?;
        let (shape, ty) = (first.shape().to_vec(), first.element_type());
        if let Some((g, other)) = by_group
            .iter()
            .find(|(_, a)| a.shape() != shape || a.element_type() != ty)
        {
            return Err(MpmdError::Mismatch {
                what: format!(
                    "group {g0}'s array is {ty:?}{shape:?}, group {g}'s is {:?}{:?}",
                    other.element_type(),
                    other.shape()
                ),
            });
        }
        Ok(MpmdArray {
            sharding,
            shape,
            ty,
            arrays: by_group,
        })
    }

    /// `array`, which a program compiled for `group` with `sharding`'s spec returned, wrapped
    /// without [`MpmdArray::new`]'s checks (the program's layout is the proof).
    pub(crate) fn of_group(array: Array, group: usize, sharding: &MpmdSharding) -> MpmdArray {
        MpmdArray {
            sharding: sharding.clone(),
            shape: array.shape().to_vec(),
            ty: array.element_type(),
            arrays: BTreeMap::from([(group, array)]),
        }
    }

    /// An array held by `sharding`'s groups in other processes only: it has a shape and type
    /// here but no data ([`MpmdArray::is_partially_addressable`] is false).
    pub fn remote(shape: &[i64], ty: ElementType, sharding: MpmdSharding) -> MpmdArray {
        MpmdArray {
            sharding,
            shape: shape.to_vec(),
            ty,
            arrays: BTreeMap::new(),
        }
    }

    /// The spec within a group.
    pub fn spec(&self) -> &tessera_sharding::PartitionSpec {
        self.sharding.spec()
    }

    /// The global shape.
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> ElementType {
        self.ty
    }

    /// The rank (the length of [`MpmdArray::shape`]).
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// The abstract value: shape and dtype, strongly typed and without a sharding (JAXPP's `aval`,
    /// a `ShapedArray(shape, dtype, weak_type=False)`). Known in every process, holding data or
    /// not.
    pub fn aval(&self) -> ShapedArray {
        ShapedArray::new(self.ty.dtype(), &self.shape)
    }

    /// The sharding over every device of the array's groups, by its spec within each group and
    /// replicated across the groups (JAXPP's `MpmdArray.sharding`, a `NamedSharding` of the
    /// `mpmd_idxs` submesh): the layout of [`MpmdArray::to_global_array`]. Known in every
    /// process, holding data or not.
    pub fn sharding(&self) -> Result<tessera_sharding::NamedSharding> {
        self.sharding.sharding()
    }

    /// The MPMD sharding.
    pub fn mpmd_sharding(&self) -> &MpmdSharding {
        &self.sharding
    }

    /// The groups holding the array, ascending (JAXPP's `mpmd_idxs`).
    pub fn mpmd_idxs(&self) -> Vec<usize> {
        self.sharding.groups()
    }

    /// Whether more than one group holds a copy.
    pub fn is_mpmd_replicated(&self) -> bool {
        self.sharding.groups().len() > 1
    }

    /// Whether this process holds data of the array (always in one process; in a process of a
    /// multi-process job, when one of its groups is among the array's).
    pub fn is_partially_addressable(&self) -> bool {
        !self.arrays.is_empty()
    }

    /// The per-group arrays, by group.
    pub fn to_mpmd_local_arrays(&self) -> Result<&BTreeMap<usize, Array>> {
        if self.is_deleted() {
            return Err(MpmdError::Deleted);
        }
        Ok(&self.arrays)
    }

    /// The array of this process's group (JAXPP's `to_mpmd_local_array`): `None` when the
    /// process holds none of the array's groups; when one process holds several (a one-process
    /// run), the lowest group's ([`MpmdArray::to_mpmd_local_arrays`] gives them all).
    pub fn to_mpmd_local_array(&self) -> Result<Option<&Array>> {
        if self.is_deleted() {
            return Err(MpmdError::Deleted);
        }
        Ok(self.arrays.values().next())
    }

    /// The array of the array's lowest group, if this process holds that group (JAXPP's
    /// `first_mpmd_replica`, which is `None` elsewhere): the one copy to read a replicated
    /// value from. [`MpmdError::NotAddressable`] in a process that does not hold it.
    pub fn first_mpmd_replica(&self) -> Result<&Array> {
        let first = self.sharding.groups().first().copied();
        let array = first
            .and_then(|g| self.arrays.get(&g))
            .ok_or(MpmdError::NotAddressable)?;
        if array.is_deleted() {
            return Err(MpmdError::Deleted);
        }
        Ok(array)
    }

    /// The array as one `tessera_pjrt::Array` over every device of its groups (JAXPP's
    /// `_to_global_jax_array`): sharded by its spec within each group and replicated across the
    /// groups ([`MpmdSharding::sharding`]). It shares the groups' buffers (no copy). In a process
    /// holding only some of the groups, it holds those groups' shards (a partially addressable
    /// array); where it holds none, no shards at all. [`MpmdError::Deleted`] once deleted.
    pub fn to_global_array(&self) -> Result<Array> {
        if self.is_deleted() {
            return Err(MpmdError::Deleted);
        }
        let sharding = self.sharding.sharding()?;
        let shards = self
            .arrays
            .values()
            .map(|a| a.addressable_shards())
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .flatten()
            .map(|s| (s.device, s.buffer.clone()))
            .collect();
        Ok(Array::from_shared_shards(
            &self.shape,
            self.ty,
            &sharding,
            shards,
        )?)
    }

    /// Takes the per-group arrays out (the reshards consume their inputs).
    pub fn into_arrays(self) -> BTreeMap<usize, Array> {
        self.arrays
    }

    /// Deletes every group's array (their buffers are freed unless a clone still holds them), as
    /// JAXPP's `delete`: an array this process holds nothing of is [`MpmdError::NotAddressable`]
    /// (its data lives in other processes, which delete it there), and a second delete is
    /// [`MpmdError::Deleted`].
    pub fn delete(&mut self) -> Result<()> {
        if !self.is_partially_addressable() {
            return Err(MpmdError::NotAddressable);
        }
        if self.is_deleted() {
            return Err(MpmdError::Deleted);
        }
        self.arrays.values_mut().for_each(Array::delete);
        Ok(())
    }

    /// Whether [`MpmdArray::delete`] was called. The per-group arrays are deleted all or none (see
    /// the module docs), so this is every group's answer. An array this process holds nothing of
    /// answers `false` (JAXPP asserts there; nothing of it was deleted here, and a step checks its
    /// arguments the same way in every process).
    pub fn is_deleted(&self) -> bool {
        self.arrays.values().any(Array::is_deleted)
    }

    /// Waits until every group's data held here is computed and returns the array, as JAX's
    /// `block_until_ready` does (`array.block_until_ready()?.first_mpmd_replica()?`). An array
    /// this process holds nothing of has nothing to wait for; a deleted one is
    /// [`MpmdError::Deleted`].
    pub fn block_until_ready(&self) -> Result<&Self> {
        if self.is_deleted() {
            return Err(MpmdError::Deleted);
        }
        for array in self.arrays.values() {
            array.block_until_ready()?;
        }
        Ok(self)
    }
}

/// Refuses `array` unless every device holds the block that `group`'s own layout with
/// `sharding`'s spec gives it. The device set alone does not say so: a mesh that lists the
/// group's devices in another order shards the same spec onto other devices, and reading it back
/// by the group's layout would permute the data (JAXPP raises there too).
fn check_group_layout(
    index: usize,
    array: &Array,
    group: usize,
    sharding: &MpmdSharding,
) -> Result<()> {
    let shape = array.shape();
    let mut held = array.sharding().devices_indices_map(shape)?;
    let mut expected = sharding.group_sharding(group)?.devices_indices_map(shape)?;
    held.sort_by_key(|(d, _)| *d);
    expected.sort_by_key(|(d, _)| *d);
    match held.iter().zip(&expected).find(|(h, e)| h != e) {
        None => Ok(()),
        Some(((device, held), (_, expected))) => Err(MpmdError::LayoutDiffers {
            index,
            shape: shape.to_vec(),
            group,
            device: *device,
            held: held.to_vec(),
            expected: expected.to_vec(),
        }),
    }
}
