//! The reference interpreter of the Tessera IR: evaluates a closed jaxpr on host arrays,
//! equation by equation, and the SPMD interpreter that runs a `shard_map` on simulated
//! devices. It owns the primitives' evaluation rules ([`interp::rules`]), one exhaustive match
//! over the primitive families, so a primitive without an evaluation rule does not compile.
//!
//! It depends only on `tessera-ir-core`; tracing and the transformations (`tessera-transform`)
//! sit above it.
//!
//! The core's modules are imported at the crate root (`crate::array`, `crate::jaxpr`, ...) so
//! that the interpreter's code names them as it did inside the single `tessera-ir` crate.

pub mod interp;

pub use interp::rules::PrimEval;
pub use interp::{eval_closed, eval_closed_with_limit, spmd};

use tessera_ir_core::{array, aval, axis_env, error, jaxpr, params, prim, rewrite, text};
