//! Lowering of the Tessera IR to StableHLO modules through MLIR.
//!
//! Architecture invariant: this is the only Tessera crate that links MLIR.
