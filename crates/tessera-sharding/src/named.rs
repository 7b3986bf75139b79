//! `NamedSharding`: a mesh plus a partition spec, with JAX's checks, shard shapes, per-device
//! blocks, array mappings, and the conversions to and from `HloSharding`.
//!
//! A sharding is a value: equal shardings (same mesh and devices, spec, memory kind and logical
//! device ids) hash equal, so they can key a map. The `with_*`/`without_*` builders are JAX's
//! `NamedSharding.update`, each re-running the constructor's checks
//! ([`NamedSharding::with_spec`], [`NamedSharding::with_mesh`], ...). The device questions of a
//! sharding over an [`AbstractMesh`] ([`NamedSharding::new_abstract`]) answer
//! [`ShardingError::AbstractMesh`]; which devices one process addresses is asked with that
//! process's device ids ([`NamedSharding::addressable_devices`]). Whether two shardings lay an
//! array out the same way (JAX's `is_equivalent_to`) and what differs when they do not is
//! `named/equivalence.rs` ([`NamedSharding::layout_difference`], [`NamedSharding::normalized`]).

use std::fmt;

use crate::error::{Result, ShardingError};
use crate::hlo::{HloSharding, SubgroupType};
use crate::mesh::{AbstractMesh, AxisType, Mesh};
use crate::spec::{DimSpec, PartitionSpec};

mod checks;
mod convert;
mod equivalence;
mod update;

pub use equivalence::{DEFAULT_MEMORY_KIND, LayoutDifference};

/// The highest array rank the conversions accept.
pub const MAX_RANK: usize = 1024;

/// Which array dimension each mesh axis shards, in spec order (JAX's `ArrayMapping`).
pub type ArrayMapping = Vec<(String, usize)>;

/// A sharding of an array over a mesh by a partition spec. `Eq` and `Hash` compare the mesh (its
/// devices too, when concrete), the spec, the memory kind and the logical device ids, as JAX's
/// `__eq__`/`__hash__` do.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NamedSharding {
    mesh: AbstractMesh,
    devices: Option<Mesh>,
    spec: PartitionSpec,
    memory_kind: Option<String>,
    logical_device_ids: Option<Vec<i64>>,
}

/// The block `[start, stop)` per dimension that one device holds.
pub type Block = Vec<(i64, i64)>;

impl NamedSharding {
    /// Checks `spec` against `mesh` the way JAX does and builds the sharding.
    pub fn new(mesh: &Mesh, spec: PartitionSpec) -> Result<NamedSharding> {
        checks::check_spec(mesh.abstract_mesh(), &spec)?;
        Ok(NamedSharding {
            mesh: mesh.abstract_mesh().clone(),
            devices: Some(mesh.clone()),
            spec,
            memory_kind: None,
            logical_device_ids: None,
        })
    }

    /// [`NamedSharding::new`] over `mesh` with the axes `spec` holds unreduced or reduced
    /// typed Explicit (JAX lets only Explicit axes hold partial sums; a program lowered from
    /// it annotates the same whatever the types), the other axes as `mesh` has them.
    pub fn with_partial_axes(mesh: &Mesh, spec: PartitionSpec) -> Result<NamedSharding> {
        if spec.unreduced().is_empty() && spec.reduced().is_empty() {
            return NamedSharding::new(mesh, spec);
        }
        let axes: Vec<&String> = spec.unreduced().iter().chain(spec.reduced()).collect();
        NamedSharding::new(&mesh.with_explicit(&axes), spec)
    }

    /// A sharding over an abstract mesh (device questions answer [`ShardingError::AbstractMesh`]).
    pub fn new_abstract(mesh: &AbstractMesh, spec: PartitionSpec) -> Result<NamedSharding> {
        checks::check_spec(mesh, &spec)?;
        Ok(NamedSharding {
            mesh: mesh.clone(),
            devices: None,
            spec,
            memory_kind: None,
            logical_device_ids: None,
        })
    }

    /// Refuses a spec whose tuples mix axis types (a check of older JAX versions; JAX 0.10.2
    /// accepts such specs, so [`NamedSharding::new`] does too).
    pub fn check_tuple_axis_types(&self) -> Result<()> {
        checks::check_tuple_types(&self.mesh, &self.spec)
    }

    /// The mesh shape.
    pub fn mesh(&self) -> &AbstractMesh {
        &self.mesh
    }

    /// The mesh with its devices, when concrete.
    pub fn concrete_mesh(&self) -> Option<&Mesh> {
        self.devices.as_ref()
    }

    /// The partition spec.
    pub fn spec(&self) -> &PartitionSpec {
        &self.spec
    }

    /// The memory kind, if set.
    pub fn memory_kind(&self) -> Option<&str> {
        self.memory_kind.as_deref()
    }

    /// The logical device ids, if set.
    pub fn logical_device_ids(&self) -> Option<&[i64]> {
        self.logical_device_ids.as_deref()
    }

    /// The number of devices (the mesh size).
    pub fn num_devices(&self) -> i64 {
        self.mesh.size()
    }

    /// Whether every device holds the whole array.
    pub fn is_fully_replicated(&self) -> bool {
        let partitions: i64 = self
            .spec
            .used_axes()
            .filter_map(|a| self.mesh.axis_size(a))
            .product();
        self.mesh.size() == 1 || partitions == 1
    }

    /// JAX's `get_array_mapping`: each mesh axis of the spec and the dimension it shards.
    pub fn array_mapping(&self) -> ArrayMapping {
        get_array_mapping(&self.spec)
    }

    /// The device ids, sorted.
    pub fn device_set(&self) -> Result<Vec<i64>> {
        self.device_set_for("device_set")
    }

    /// The device ids, sorted; over an abstract mesh the error names the question `what`.
    fn device_set_for(&self, what: &'static str) -> Result<Vec<i64>> {
        let mesh = self
            .devices
            .as_ref()
            .ok_or(ShardingError::AbstractMesh { what })?;
        let mut ids = mesh.device_ids().to_vec();
        ids.sort_unstable();
        Ok(ids)
    }

    /// How many ways each of the first `rank` dimensions is split.
    pub fn tiles_per_dim(&self, rank: usize) -> Result<Vec<i64>> {
        self.check_rank(rank)?;
        let mut ways = vec![1i64; rank];
        for (axis, dim) in self.array_mapping() {
            ways[dim] *= self.mesh.axis_size(&axis).unwrap_or(1);
        }
        Ok(ways)
    }

    /// The shape of each device's block; a dimension its shards do not divide is an error.
    pub fn shard_shape(&self, shape: &[i64]) -> Result<Vec<i64>> {
        let ways = self.tiles_per_dim(shape.len())?;
        if let Some(dim) = shape.iter().position(|&d| d < 0) {
            return Err(ShardingError::InvalidShape {
                reason: format!("dimension {dim} of {shape:?} is negative"),
            });
        }
        shape
            .iter()
            .zip(&ways)
            .enumerate()
            .map(|(dim, (&size, &w))| {
                if size % w != 0 {
                    Err(ShardingError::NotDivisible {
                        dim,
                        size,
                        ways: w,
                        shape: shape.to_vec(),
                    })
                } else {
                    Ok(size / w)
                }
            })
            .collect()
    }

    /// For each device (in mesh order), the block of the array it holds.
    pub fn devices_indices_map(&self, shape: &[i64]) -> Result<Vec<(i64, Block)>> {
        let mesh = self.devices.as_ref().ok_or(ShardingError::AbstractMesh {
            what: "devices_indices_map",
        })?;
        let shard = self.shard_shape(shape)?;
        let n = self.mesh.size();
        let mut blocks: Vec<Option<Block>> = vec![None; n as usize];
        for q in 0..n {
            let coords = self.mesh.coords(q);
            let block = (0..shape.len())
                .map(|dim| {
                    let axes = self.spec.dims().get(dim).map(DimSpec::axes).unwrap_or(&[]);
                    let chunk = axes.iter().fold(0i64, |acc, a| {
                        let k = self.mesh.axis_index(a).unwrap_or(0);
                        acc * self.mesh.axis_sizes()[k] + coords[k]
                    });
                    (chunk * shard[dim], (chunk + 1) * shard[dim])
                })
                .collect();
            let p = self
                .logical_device_ids
                .as_ref()
                .map_or(q, |l| l[q as usize]);
            blocks[p as usize] = Some(block);
        }
        let ids = mesh.device_ids();
        Ok(ids
            .iter()
            .zip(blocks)
            .map(|(&d, b)| (d, b.unwrap_or_default()))
            .collect())
    }

    /// The XLA sharding for an array of rank `rank` (JAX's `_to_xla_hlo_sharding`).
    pub fn to_hlo_sharding(&self, rank: usize) -> Result<HloSharding> {
        self.check_rank(rank)?;
        convert::to_hlo(self, rank)
    }

    /// The NamedSharding over `mesh` whose XLA sharding is `hlo` (JAX's
    /// `_gspmd_to_named_sharding`), or [`ShardingError::NotRepresentable`].
    pub fn from_hlo_sharding(hlo: &HloSharding, mesh: &Mesh) -> Result<NamedSharding> {
        convert::from_hlo(hlo, mesh)
    }

    fn check_rank(&self, rank: usize) -> Result<()> {
        if rank > MAX_RANK {
            return Err(ShardingError::InvalidShape {
                reason: format!("rank {rank} is above the supported {MAX_RANK}"),
            });
        }
        if self.spec.len() > rank {
            let hint = if rank == 0 {
                " (a scalar takes P())"
            } else {
                ""
            };
            return Err(ShardingError::RankTooSmall {
                spec: self.spec.to_string(),
                needed: self.spec.len(),
                rank,
                hint,
            });
        }
        Ok(())
    }
}

/// JAX's `get_array_mapping`: each mesh axis used by `spec` and the dimension it shards.
pub fn get_array_mapping(spec: &PartitionSpec) -> ArrayMapping {
    let mut out: ArrayMapping = Vec::new();
    for (dim, d) in spec.dims().iter().enumerate() {
        for axis in d.axes() {
            match out.iter_mut().find(|(a, _)| a == axis) {
                Some(slot) => slot.1 = dim,
                None => out.push((axis.clone(), dim)),
            }
        }
    }
    out
}

/// JAX's `array_mapping_to_axis_resources`: the spec that an array mapping describes.
pub fn array_mapping_to_axis_resources(mapping: &ArrayMapping) -> PartitionSpec {
    let Some(max) = mapping.iter().map(|(_, d)| *d).max() else {
        return PartitionSpec::replicated();
    };
    let dims = (0..=max)
        .map(|i| {
            let axes: Vec<&str> = mapping
                .iter()
                .filter(|(_, d)| *d == i)
                .map(|(a, _)| a.as_str())
                .collect();
            DimSpec::from_axes(&axes)
        })
        .collect();
    PartitionSpec::new(dims)
}

impl fmt::Display for NamedSharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mesh = match &self.devices {
            Some(m) => m.to_string(),
            None => self.mesh.to_string(),
        };
        write!(f, "NamedSharding(mesh={mesh}, spec={}", self.spec)?;
        if let Some(kind) = &self.memory_kind {
            write!(f, ", memory_kind={kind}")?;
        }
        if let Some(ids) = &self.logical_device_ids {
            write!(f, ", logical_device_ids={ids:?}")?;
        }
        f.write_str(")")
    }
}

/// The subgroup kind of a mesh axis left out of the spec.
pub(crate) fn leftover_kind(ty: AxisType) -> SubgroupType {
    if ty == AxisType::Manual {
        SubgroupType::Manual
    } else {
        SubgroupType::Replicated
    }
}

#[cfg(test)]
mod tests;
