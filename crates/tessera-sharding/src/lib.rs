//! JAX's sharding algebra in Rust: meshes, partition specs, named shardings, XLA `HloSharding`
//! text and Shardy attributes.
//!
//! This crate depends on no other Tessera crate; anyone emitting HLO from Rust can use it alone.
