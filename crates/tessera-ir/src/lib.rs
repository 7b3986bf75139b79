//! The Tessera IR: a typed, SSA, jaxpr-like program representation with its text form, tracing,
//! transformations and a reference interpreter.
//!
//! ```
//! use tessera_ir::{text, interp, verify, Array, DType};
//! let cj = text::parse_closed_jaxpr(
//!     "{ lambda ; a:f32[2]. let\n    b:f32[2] = mul a 2.0:f32[]\n  in (b,) }",
//! ).unwrap();
//! verify::verify_closed(&cj).unwrap();
//! let x = Array::from_f64(DType::F32, &[2], &[1.0, 3.0]).unwrap();
//! let y = interp::eval_closed(&cj, &[x]).unwrap();
//! assert_eq!(y[0].to_f64_vec(), vec![2.0, 6.0]);
//! assert_eq!(cj.to_string(), "{ lambda ; a:f32[2]. let b:f32[2] = mul a 2.0:f32[] in (b,) }");
//! ```
//!
//! Code map:
//! - [`types`]: dtypes, shapes and `ShapedArray` avals (weak type, `vma` slot).
//! - [`ir`]: `Jaxpr`/`ClosedJaxpr`; variables are `Var(u32)` indices into a per-jaxpr arena of
//!   avals; equations in program order; nested jaxprs live in params (`Primitive::Jit`).
//! - [`prims`]: the `Primitive` enum with params; one file per family holding its shape rule and
//!   its interpretation (`abstract_eval` and `eval` dispatch with exhaustive matches).
//! - [`text`]: JAX's jaxpr syntax, printed byte for byte as JAX 0.10 and parsed back.
//! - [`interp`]: the reference interpreter over `Array`, a dtype-tagged enum of `ndarray`s.
//! - [`verify`]: the verifier; its doc lists the invariants.
//! - [`passes`]: DCE, CSE, inlining, constant folding (one file and one function each).
//! - [`trace`]: the Rust tracing API (`trace(&avals, |x: Tensor, w: Tensor| ...)`, `jnp`).
//! - `oracle` (feature `oracle`): the runner for JAX's `jaxpr_cases.json`.
//!
//! Architecture Invariant: the IR holds no analyses; names exist only in text; every primitive's
//! rules are reached through exhaustive matches on [`Primitive`], so a new primitive without a
//! rule does not compile. Nothing reachable from text, arrays or traced closures panics.

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
