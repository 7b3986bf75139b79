//! When two shardings lay an array out the same way: JAX's `is_equivalent_to` (equal XLA
//! shardings for the array's rank, the same device assignment, the same memory kind), the check
//! behind `check_gda_or_array_xla_sharding_match`, and a normal form for cache keys.
//!
//! [`NamedSharding::layout_difference`] says what differs, in this order: the device assignment
//! (the mesh's device ids in mesh order), the layout (the `HloSharding` for the array's rank,
//! compared by value: `P('x', None)` and `P('x')` agree, an iota and an explicit tile assignment
//! of the same devices agree, logical device ids that move blocks between devices do not), the
//! unreduced and reduced axes (an unreduced array holds partial sums), and the memory kind (no
//! kind reads as [`DEFAULT_MEMORY_KIND`]). Mesh axis names and types are not compared: two
//! meshes over the same devices that put the same blocks on the same devices hold the same
//! array, as in JAX.
//!
//! [`NamedSharding::normalized`] is one spelling per sharding for hashing: trailing `None`s of
//! the spec dropped and identity logical device ids removed, so equivalent spellings on one mesh
//! key one map entry.

use std::fmt;

use super::NamedSharding;
use crate::error::{Result, ShardingError};
use crate::hlo::HloSharding;
use crate::spec::{DimSpec, PartitionSpec};

/// The memory kind a sharding without one means (JAX's default memory on every platform).
pub const DEFAULT_MEMORY_KIND: &str = "device";

/// How an array's sharding differs from the one a program expects (the first difference found).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutDifference {
    /// The device assignments (device ids in mesh order) differ.
    Devices {
        /// The array's devices.
        have: Vec<i64>,
        /// The expected devices.
        want: Vec<i64>,
    },
    /// Same devices, but other blocks on them (the XLA shardings differ).
    Layout {
        /// The array's XLA sharding.
        have: HloSharding,
        /// The expected XLA sharding.
        want: HloSharding,
    },
    /// The unreduced or reduced axes differ.
    Unreduced {
        /// The array's spec.
        have: PartitionSpec,
        /// The expected spec.
        want: PartitionSpec,
    },
    /// The memory kinds differ.
    MemoryKind {
        /// The array's memory kind.
        have: String,
        /// The expected memory kind.
        want: String,
    },
}

impl fmt::Display for LayoutDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutDifference::Devices { have, want } => write!(
                f,
                "its devices in mesh order are {have:?}, not {want:?} (another device order \
                 puts the blocks on other devices)"
            ),
            LayoutDifference::Layout { have, want } => {
                write!(f, "its blocks lie on the devices as {have}, not as {want}")
            }
            LayoutDifference::Unreduced { have, want } => write!(
                f,
                "its unreduced/reduced axes are {:?}/{:?}, not {:?}/{:?}",
                have.unreduced(),
                have.reduced(),
                want.unreduced(),
                want.reduced()
            ),
            LayoutDifference::MemoryKind { have, want } => {
                write!(f, "it is in memory kind '{have}', not '{want}'")
            }
        }
    }
}

impl NamedSharding {
    /// What differs between this sharding (an array's) and `want` (a program's) for an array of
    /// rank `rank`, or `None` when they lay it out the same way. Both need concrete meshes
    /// ([`ShardingError::AbstractMesh`] otherwise).
    pub fn layout_difference(
        &self,
        want: &NamedSharding,
        rank: usize,
    ) -> Result<Option<LayoutDifference>> {
        let devices = |s: &NamedSharding| {
            s.concrete_mesh()
                .map(|m| m.device_ids().to_vec())
                .ok_or(ShardingError::AbstractMesh {
                    what: "is_equivalent_to",
                })
        };
        let (have_devices, want_devices) = (devices(self)?, devices(want)?);
        if have_devices != want_devices {
            return Ok(Some(LayoutDifference::Devices {
                have: have_devices,
                want: want_devices,
            }));
        }
        let (have_hlo, want_hlo) = (self.to_hlo_sharding(rank)?, want.to_hlo_sharding(rank)?);
        if !have_hlo.is_equivalent_to(&want_hlo) {
            return Ok(Some(LayoutDifference::Layout {
                have: have_hlo,
                want: want_hlo,
            }));
        }
        let sorted = |axes: &[String]| {
            let mut v = axes.to_vec();
            v.sort();
            v
        };
        if sorted(self.spec.unreduced()) != sorted(want.spec.unreduced())
            || sorted(self.spec.reduced()) != sorted(want.spec.reduced())
        {
            return Ok(Some(LayoutDifference::Unreduced {
                have: self.spec.clone(),
                want: want.spec.clone(),
            }));
        }
        let kind = |s: &NamedSharding| s.memory_kind().unwrap_or(DEFAULT_MEMORY_KIND).to_string();
        if kind(self) != kind(want) {
            return Ok(Some(LayoutDifference::MemoryKind {
                have: kind(self),
                want: kind(want),
            }));
        }
        Ok(None)
    }

    /// JAX's `is_equivalent_to(other, ndim)`: whether both lay an array of rank `rank` out the
    /// same way ([`NamedSharding::layout_difference`] finds nothing).
    pub fn is_equivalent_to(&self, other: &NamedSharding, rank: usize) -> Result<bool> {
        Ok(self.layout_difference(other, rank)?.is_none())
    }

    /// One spelling of this sharding: the spec without trailing `None`s (`P('x', None)` is
    /// `P('x')`), logical device ids that are the identity removed, and no memory kind where it
    /// is [`DEFAULT_MEMORY_KIND`]. Equivalent spellings on one mesh normalize equal, so the
    /// result keys caches.
    pub fn normalized(&self) -> NamedSharding {
        let mut out = self.clone();
        let mut dims = self.spec.dims().to_vec();
        while dims.last() == Some(&DimSpec::Replicated) {
            dims.pop();
        }
        out.spec = PartitionSpec::new(dims)
            .with_unreduced(&sorted_axes(self.spec.unreduced()))
            .with_reduced(&sorted_axes(self.spec.reduced()));
        let identity = self
            .logical_device_ids
            .as_ref()
            .is_some_and(|ids| ids.iter().enumerate().all(|(i, &d)| d == i as i64));
        if identity {
            out.logical_device_ids = None;
        }
        if out.memory_kind.as_deref() == Some(DEFAULT_MEMORY_KIND) {
            out.memory_kind = None;
        }
        out
    }
}

fn sorted_axes(axes: &[String]) -> Vec<String> {
    let mut v = axes.to_vec();
    v.sort();
    v
}

impl HloSharding {
    /// XLA's `HloSharding::operator==` on values (JAX's `are_hlo_shardings_equal`): every
    /// replicated sharding is equal, and tile assignments compare by their devices, so an iota
    /// and an explicit list of the same devices agree.
    pub fn is_equivalent_to(&self, other: &HloSharding) -> bool {
        if self.is_replicated() && other.is_replicated() {
            return true;
        }
        match (self, other) {
            (HloSharding::Tiled(a), HloSharding::Tiled(b)) => {
                a.last_tile_dim_replicate() == b.last_tile_dim_replicate()
                    && a.subgroup_types() == b.subgroup_types()
                    && a.tile_assignment().dims() == b.tile_assignment().dims()
                    && a.tile_assignment().devices() == b.tile_assignment().devices()
            }
            (HloSharding::Tuple(a), HloSharding::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.is_equivalent_to(y))
            }
            _ => self == other,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;
    use crate::mesh::Mesh;

    fn named(mesh: &Mesh, spec: &str) -> NamedSharding {
        NamedSharding::new(mesh, PartitionSpec::parse(spec).unwrap()).unwrap()
    }

    #[test]
    fn equivalent_spellings_agree_and_normalize_equal() {
        let mesh = Mesh::auto(&[("x", 2), ("y", 2)]).unwrap();
        let (a, b) = (named(&mesh, "P('x', None)"), named(&mesh, "P('x')"));
        assert_ne!(a, b, "different spellings are different values");
        assert!(a.is_equivalent_to(&b, 2).unwrap());
        assert_eq!(a.normalized(), b.normalized());
        let identity = b.clone().with_logical_device_ids(vec![0, 1, 2, 3]).unwrap();
        assert!(identity.is_equivalent_to(&b, 2).unwrap());
        assert_eq!(identity.normalized(), b.normalized());
        assert_eq!(
            b.clone().with_memory_kind("device").normalized(),
            b.normalized()
        );
        assert!(
            b.clone()
                .with_memory_kind("device")
                .is_equivalent_to(&b, 2)
                .unwrap()
        );
    }

    #[test]
    fn device_order_logical_ids_and_memory_kinds_are_differences() {
        let shape = crate::mesh::AbstractMesh::auto(&[("x", 2), ("y", 2)]).unwrap();
        let plain = Mesh::new(shape.clone(), vec![0, 1, 2, 3]).unwrap();
        let swapped = Mesh::new(shape, vec![1, 0, 3, 2]).unwrap();
        let want = named(&plain, "P('x', 'y')");
        let diff = named(&swapped, "P('x', 'y')")
            .layout_difference(&want, 2)
            .unwrap();
        assert_eq!(
            diff,
            Some(LayoutDifference::Devices {
                have: vec![1, 0, 3, 2],
                want: vec![0, 1, 2, 3]
            })
        );
        let logical = want
            .clone()
            .with_logical_device_ids(vec![1, 0, 3, 2])
            .unwrap();
        let diff = logical.layout_difference(&want, 2).unwrap().unwrap();
        assert!(matches!(diff, LayoutDifference::Layout { .. }), "{diff}");
        assert_ne!(logical.normalized(), want.normalized());
        let host = want.clone().with_memory_kind("pinned_host");
        assert_eq!(
            host.layout_difference(&want, 2).unwrap(),
            Some(LayoutDifference::MemoryKind {
                have: "pinned_host".into(),
                want: "device".into()
            })
        );
        let abstract_one =
            NamedSharding::new_abstract(plain.abstract_mesh(), PartitionSpec::replicated())
                .unwrap();
        assert!(abstract_one.is_equivalent_to(&want, 2).is_err());
    }

    #[test]
    fn iota_and_explicit_tiles_of_the_same_devices_are_equal() {
        let iota = HloSharding::parse("{devices=[2,2]<=[4]}").unwrap();
        let explicit = HloSharding::parse("{devices=[2,2]0,1,2,3}").unwrap();
        let other = HloSharding::parse("{devices=[2,2]1,0,3,2}").unwrap();
        assert!(iota.is_equivalent_to(&explicit));
        assert!(!iota.is_equivalent_to(&other));
        assert!(HloSharding::Replicated.is_equivalent_to(&HloSharding::Replicated));
    }
}
