//! `MpmdArray`: an array held by one or more MPMD groups, each group holding an SPMD `Array`
//! laid out on its own devices (JAXPP's `MpmdArray`).

use std::collections::BTreeMap;

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

    /// Wraps per-group arrays. Each must lie exactly on one group's devices, that group must be
    /// one of `sharding`'s, no group may appear twice, and all must agree in shape, element type
    /// and spec (without the MPMD axis).
    pub fn new(arrays: Vec<Array>, sharding: MpmdSharding) -> Result<MpmdArray> {
        let mesh = sharding.mpmd_mesh();
        let groups = sharding.groups();
        let mut by_group = BTreeMap::new();
        for (index, array) in arrays.into_iter().enumerate() {
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
            if by_group.insert(group, array).is_some() {
                return Err(MpmdError::DuplicateGroup { index, group });
            }
        }
        let first = by_group.values().next().ok_or(MpmdError::NotAddressable)?;
        let (shape, ty) = (first.shape().to_vec(), first.element_type());
        if let Some(other) = by_group
            .values()
            .find(|a| a.shape() != shape || a.element_type() != ty)
        {
            return Err(MpmdError::Mismatch {
                what: format!(
                    "{:?}{:?} and {:?}{:?}",
                    ty,
                    shape,
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
            return Err(tessera_pjrt::PjrtError::Deleted.into());
        }
        Ok(&self.arrays)
    }

    /// The array of this process's group (JAXPP's `to_mpmd_local_array`): `None` when the
    /// process holds none of the array's groups; when one process holds several (a one-process
    /// run), the lowest group's ([`MpmdArray::to_mpmd_local_arrays`] gives them all).
    pub fn to_mpmd_local_array(&self) -> Result<Option<&Array>> {
        if self.is_deleted() {
            return Err(tessera_pjrt::PjrtError::Deleted.into());
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
            return Err(tessera_pjrt::PjrtError::Deleted.into());
        }
        Ok(array)
    }

    /// Takes the per-group arrays out (the reshards consume their inputs).
    pub fn into_arrays(self) -> BTreeMap<usize, Array> {
        self.arrays
    }

    /// Frees every group's buffers.
    pub fn delete(&mut self) {
        self.arrays.values_mut().for_each(Array::delete);
    }

    /// Whether [`MpmdArray::delete`] was called.
    pub fn is_deleted(&self) -> bool {
        self.arrays.values().any(Array::is_deleted)
    }

    /// Waits until every group's data is computed.
    pub fn block_until_ready(&self) -> Result<()> {
        for array in self.arrays.values() {
            array.block_until_ready()?;
        }
        Ok(())
    }
}
