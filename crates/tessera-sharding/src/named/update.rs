//! JAX's `NamedSharding.update(spec=, mesh=, memory_kind=, _logical_device_ids=)` as builders,
//! and the questions about which devices one process addresses.
//!
//! Each builder returns a new sharding, checked as [`NamedSharding::new`] checks one: a new spec
//! or mesh re-runs JAX's `check_pspec`, and logical device ids must stay a permutation of the
//! mesh positions (a new mesh of another size with ids set is an error).
//!
//! A mesh holds device ids but not which process owns them (one mesh may span processes: see
//! `MpmdMesh::for_process` in tessera-mpmd), so [`NamedSharding::addressable_devices`] and
//! [`NamedSharding::is_fully_addressable`] take the ids of the devices the asking process
//! addresses (its PJRT client's addressable devices).

use super::{NamedSharding, checks};
use crate::error::{Result, ShardingError};
use crate::mesh::{AbstractMesh, Mesh};
use crate::spec::PartitionSpec;

impl NamedSharding {
    /// The same sharding with another spec (`update(spec=...)`), checked against the mesh.
    pub fn with_spec(mut self, spec: PartitionSpec) -> Result<NamedSharding> {
        checks::check_spec(&self.mesh, &spec)?;
        self.spec = spec;
        Ok(self)
    }

    /// The same sharding over another mesh with devices (`update(mesh=...)`): the spec is checked
    /// against it, and logical device ids, if set, must still be a permutation of its positions.
    pub fn with_mesh(self, mesh: &Mesh) -> Result<NamedSharding> {
        let mut out = self.with_abstract_mesh(mesh.abstract_mesh())?;
        out.devices = Some(mesh.clone());
        Ok(out)
    }

    /// The same sharding over a mesh without devices (`update(mesh=AbstractMesh(...))`); device
    /// questions then answer [`ShardingError::AbstractMesh`]. Checked as
    /// [`NamedSharding::with_mesh`].
    pub fn with_abstract_mesh(mut self, mesh: &AbstractMesh) -> Result<NamedSharding> {
        checks::check_spec(mesh, &self.spec)?;
        if let Some(ids) = &self.logical_device_ids {
            check_permutation(ids, mesh.size())?;
        }
        self.mesh = mesh.clone();
        self.devices = None;
        Ok(self)
    }

    /// The same sharding with a memory kind (`device`, `pinned_host`, ...). The kind is recorded,
    /// printed and compared; whether a device has such a memory is the PJRT client's question.
    pub fn with_memory_kind(mut self, kind: &str) -> NamedSharding {
        self.memory_kind = Some(kind.to_string());
        self
    }

    /// The same sharding without a memory kind (`update(memory_kind=None)`).
    pub fn without_memory_kind(mut self) -> NamedSharding {
        self.memory_kind = None;
        self
    }

    /// The same sharding with JAX's `_logical_device_ids`: the mesh position, in device-assignment
    /// order, of the device at each mesh coordinate. Must be a permutation of `0..mesh size`.
    pub fn with_logical_device_ids(mut self, ids: Vec<i64>) -> Result<NamedSharding> {
        check_permutation(&ids, self.mesh.size())?;
        self.logical_device_ids = Some(ids);
        Ok(self)
    }

    /// The same sharding in plain mesh order (`update(_logical_device_ids=None)`).
    pub fn without_logical_device_ids(mut self) -> NamedSharding {
        self.logical_device_ids = None;
        self
    }

    /// The sharding's devices (sorted) that a process addressing `process_devices` holds (JAX's
    /// `addressable_devices`, with the process's devices given). [`ShardingError::AbstractMesh`]
    /// over an abstract mesh.
    pub fn addressable_devices(&self, process_devices: &[i64]) -> Result<Vec<i64>> {
        let mut ids = self.device_set_for("addressable_devices")?;
        ids.retain(|d| process_devices.contains(d));
        Ok(ids)
    }

    /// Whether a process addressing `process_devices` holds every device of the sharding (JAX's
    /// `is_fully_addressable`). [`ShardingError::AbstractMesh`] over an abstract mesh.
    pub fn is_fully_addressable(&self, process_devices: &[i64]) -> Result<bool> {
        Ok(self
            .device_set_for("is_fully_addressable")?
            .iter()
            .all(|d| process_devices.contains(d)))
    }
}

/// Refuses `ids` unless it is a permutation of `0..n`.
fn check_permutation(ids: &[i64], n: i64) -> Result<()> {
    let mut seen = vec![false; if ids.len() as i64 == n { ids.len() } else { 0 }];
    let bad = ids.len() as i64 != n
        || ids
            .iter()
            .any(|&i| i < 0 || i >= n || std::mem::replace(&mut seen[i as usize], true));
    if bad {
        return Err(ShardingError::InvalidLogicalDeviceIds {
            reason: format!(
                "{ids:?} is not a permutation of 0..{n} (one per mesh position); give one id per position of the mesh, each once"
            ),
        });
    }
    Ok(())
}
