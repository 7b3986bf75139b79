//! The tracing API and the transformations of the Tessera IR: [`trace`] builds programs from
//! Rust closures over [`trace::Tensor`]s; [`autodiff`] (`jvp`, `vjp`, `linearize`,
//! `value_and_grad`), [`batching`] (`vmap` and its named and SPMD forms) and [`passes`] rewrite
//! programs; [`transforms`] applies the transformations to traced functions; [`programs`]
//! holds the expansion programs (built by tracing) that the transformations and the StableHLO
//! lowering use in place of a primitive.
//!
//! It depends on `tessera-ir-core` and on `tessera-interp` (constant folding and the oracles
//! evaluate programs); nothing below depends on it.
//!
//! The core's and the interpreter's modules are imported at the crate root (`crate::jaxpr`,
//! `crate::interp`, ...) so that this code names them as it did inside the single `tessera-ir`
//! crate.

pub mod autodiff;
pub mod batching;
#[cfg(feature = "oracle")]
pub mod oracle;
#[cfg(feature = "oracle")]
pub mod oracle_collectives;
pub mod passes;
pub mod programs;
pub mod remat_policy;
pub mod trace;
pub mod transforms;

pub use autodiff::{jvp, linearize, value_and_grad, value_and_grad_with_aux, vjp};
pub use batching::{vmap, vmap_named, vmap_spmd};

use tessera_ir_core::Result;
use tessera_ir_core::{
    array, aval, axis_env, callback, dtype, error, jaxpr, params, prim, rewrite, verify,
};
