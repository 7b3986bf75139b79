//! The Tessera IR: a typed, SSA, jaxpr-like program representation with its JAX-compatible text
//! form, a verifier and a reference interpreter.
//!
//! - [`jaxpr`]: `Jaxpr`/`ClosedJaxpr`; variables are `u32` indices into an arena of avals.
//! - [`prim`]: the primitive table; each family module holds its primitives' rules.
//! - [`text`]: printer and parser of `jax.make_jaxpr`'s syntax.
//! - [`verify()`]: the invariants every pass preserves.
//! - [`interp`]: the reference interpreter over [`Array`]s.
//! - [`autodiff`]: [`vjp`], [`value_and_grad`], forward-mode [`jvp()`] and [`linearize()`].
//! - [`batching`]: [`vmap`], JAX's batching with `in_axes`/`out_axes`.
//! - [`axis_env`], [`spmd`]: the named axes `shard_map` binds for its collectives, and the SPMD
//!   interpreter that runs a `shard_map` on simulated devices.

pub mod array;
pub mod autodiff;
pub mod aval;
pub mod axis_env;
pub mod batching;
pub mod callback;
pub mod dtype;
pub mod error;
pub mod interp;
pub mod jaxpr;
#[cfg(feature = "oracle")]
pub mod oracle;
#[cfg(feature = "oracle")]
pub mod oracle_collectives;
pub mod panics;
pub mod params;
pub mod passes;
pub mod prim;
pub mod spmd;
pub mod text;
pub mod trace;
mod verify;

pub use array::{Array, Block, Elem, Element, element_count};
pub use autodiff::{jvp, linearize, value_and_grad, value_and_grad_with_aux, vjp};
pub use aval::{ExplicitType, ShapedArray};
pub use batching::{vmap, vmap_named, vmap_spmd};
pub use dtype::DType;
pub use error::{IrError, Result};
pub use jaxpr::{Atom, ClosedJaxpr, Eqn, Jaxpr, Literal, Var};
pub use params::{ParamValue, Params};
pub use prim::Prim;
pub use verify::verify;
