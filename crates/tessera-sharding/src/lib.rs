//! JAX's sharding algebra in Rust: meshes, partition specs, named shardings, XLA `HloSharding`
//! text and Shardy attributes.
//!
//! This crate depends on no other Tessera crate; anyone emitting HLO from Rust can use it alone.
//!
//! ```
//! use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};
//! let mesh = Mesh::auto(&[("x", 2), ("y", 4)]).unwrap();
//! let spec = PartitionSpec::parse("P('x', None)").unwrap();
//! let sharding = NamedSharding::new(&mesh, spec).unwrap();
//! let hlo = sharding.to_hlo_sharding(2).unwrap();
//! assert_eq!(hlo.to_string(), "{devices=[2,1,4]<=[8] last_tile_dim_replicate}");
//! assert_eq!(sharding.shard_shape(&[8, 16]).unwrap(), vec![4, 16]);
//! ```
//!
//! Semantics follow JAX (`jax/_src/named_sharding.py`, the sharding parts of `pxla.py`) and XLA
//! (`hlo_sharding.cc`, `tile_assignment.cc`); the oracle files in `shared/oracle/` check them.
//! Where JAX 0.10.2 (the oracle) differs from the reference sources, the oracle wins:
//! - a spec tuple may mix axis types ([`NamedSharding::check_tuple_axis_types`] is opt-in);
//! - a Manual axis (of size > 1) in a spec is refused only when some mesh axis is left out of it;
//! - over a mesh of one device every sharding is `{replicated}`.
//!
//! Modules: [`mesh`] (meshes, device lookup, submeshes), [`spec`] (PartitionSpec text),
//! [`named`] (NamedSharding: checks, shard shapes, blocks, HloSharding conversions, the `update`
//! builders, hashing, layout equivalence and normal forms, the devices a process addresses),
//! [`hlo`] (HloSharding: construction, XLA normalisation, text), [`sdy`] (Shardy texts),
//! [`sharding_spec`] (pmap-era ShardingSpec), [`visualize`] (device pictures), and `oracle`
//! (feature `oracle`: the runner of JAX-made test files).

pub mod error;
pub mod groups;
pub mod hlo;
pub mod mesh;
pub mod named;
#[cfg(feature = "oracle")]
pub mod oracle;
pub mod sdy;
pub mod sharding_spec;
pub mod spec;
mod spec_parse;
pub mod visualize;

pub use error::{Result, ShardingError};
pub use hlo::{HloSharding, IotaTileAssignment, SubgroupType, TileAssignment};
pub use mesh::{AbstractMesh, AxisType, Mesh};
pub use named::{ArrayMapping, NamedSharding};
pub use spec::{DimSpec, PartitionSpec};
