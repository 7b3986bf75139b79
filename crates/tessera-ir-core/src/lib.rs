//! The core of the Tessera IR: the data every other IR crate reads. Dtypes and avals, host
//! arrays, the typed SSA program (`Jaxpr`/`ClosedJaxpr`) and its parameters, the primitive table
//! with each primitive's shape rule, the text form (printer and parser of `jax.make_jaxpr`'s
//! syntax), the verifier and the rewrites that need neither a tracer nor an interpreter.
//!
//! This crate depends on nothing that reads programs: evaluation lives in `tessera-interp`,
//! tracing and transformations in `tessera-transform`, and `tessera-ir` re-exports all three
//! under the paths users know.
//!
//! - [`program`]: the data model, one folder because its parts refer to one another:
//!   [`jaxpr`] (`Jaxpr`/`ClosedJaxpr`; variables are `u32` indices into an arena of avals),
//!   [`prim`] (the primitive table; each family module holds its primitives' shape rules),
//!   [`params`], and the printer ([`program::print`]).
//! - [`text`]: the printer re-exported, and the parser of `jax.make_jaxpr`'s syntax.
//! - [`verify()`]: the invariants every pass preserves.
//! - [`rewrite`]: dead-code elimination, inlining and the other rewrites that only move
//!   equations around.
//! - [`axis_env`]: the named axes `shard_map` binds for its collectives, and the mesh set by
//!   `use_mesh`.

pub mod array;
pub mod aval;
pub mod axis_env;
pub mod callback;
pub mod dtype;
pub mod error;
pub mod panics;
pub mod program;
pub mod rewrite;
pub mod text;
mod verify;

pub use array::{Array, Block, Elem, Element, element_count};
pub use aval::{ExplicitType, ShapedArray};
pub use dtype::DType;
pub use error::{IrError, Result};
pub use program::jaxpr::{Atom, ClosedJaxpr, Eqn, Jaxpr, Literal, Var};
pub use program::params::{ParamValue, Params};
pub use program::prim::Prim;
pub use program::{jaxpr, params, prim};
pub use verify::verify;
