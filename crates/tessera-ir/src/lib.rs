//! The Tessera IR: a typed, SSA, jaxpr-like program representation with its text form, tracing,
//! transformations and a reference interpreter.
//!
//! - [`types`]: dtypes, shapes and `ShapedArray` avals.
//! - [`ir`]: `Jaxpr`/`ClosedJaxpr` over an arena of variables (`Var(u32)`).
//! - [`prims`]: the `Primitive` enum; each family's shape rule and interpretation.
//! - [`text`]: JAX's jaxpr syntax, printed and parsed.
//! - [`interp`]: the reference interpreter over host arrays.
//! - [`trace`]: the Rust tracing API (`trace(|x: Tensor, w: Tensor| ...)`).
//! - [`verify`]: the verifier.
//! - [`passes`]: DCE, CSE, inlining, constant folding.
//! - [`oracle`] (feature `oracle`): the runner for JAX's `jaxpr_cases.json`.

pub mod interp;
pub mod ir;
#[cfg(feature = "oracle")]
pub mod oracle;
pub mod passes;
pub mod prims;
pub mod text;
pub mod trace;
pub mod types;
pub mod verify;

pub use interp::{Array, eval_closed, eval_jaxpr};
pub use ir::{Atom, ClosedJaxpr, Eqn, Jaxpr, Literal, Scalar, Var};
pub use prims::Primitive;
pub use types::{DType, ShapedArray};
