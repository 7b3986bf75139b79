//! Lowering of the Tessera IR to StableHLO modules through MLIR (`melior`).
//!
//! Debian's MLIR 22 does not register the StableHLO dialect, so modules are built from generic
//! operations (`"stablehlo.add"(...)`) in a context that allows unregistered dialects; the
//! builtin and `func` dialects are real and verified. XLA's PJRT plugin parses the printed text.
//! Sharding annotations are emitted for one of XLA's partitioners ([`Partitioner`]): Shardy's
//! `sdy` dialect (generic operations and opaque attributes too) or GSPMD's `mhlo.sharding`.
//!
//! Architecture invariant: this is the only Tessera crate that links MLIR.

mod compose;
mod context;
mod emit;
mod lower;
mod sharding;

pub use compose::{KeyTypes, ModuleHeader, Part, PartBody, compose_module};
pub use context::{LowerError, new_context, verify_and_print, with_context};
pub use emit::{
    ArgSpec, Body, EmittedModule, ModuleEmitter, ResultSpec, parse_attr, parse_type, quote,
    tensor_type,
};
pub use lower::{
    AttentionLowering, DEFAULT_MEMORY_KIND, LowerOptions, element_type, lower_closed,
    lower_closed_unrolled, lower_flat, mlir_type,
};
/// MLIR values, as the bodies given to [`compose_module`] and [`ModuleEmitter`] see them.
pub use melior::ir::Value;
pub use sharding::{PARTITIONER_ENV, Partitioner};
