//! The Tessera IR: a typed, SSA, jaxpr-like program representation with its JAX-compatible text
//! form, a verifier and a reference interpreter.
//!
//! This crate is a facade: it re-exports, under the paths users know, three crates layered one
//! above the other:
//!
//! - `tessera-ir-core`: dtypes, avals, [`Array`]s, the program ([`jaxpr`]) and its [`params`],
//!   the primitive table with its shape rules ([`prim`]), the [`text`] form and [`verify()`];
//! - `tessera-interp`: the reference interpreter ([`interp`]) and the SPMD one ([`spmd`]),
//!   owning the primitives' evaluation rules;
//! - `tessera-transform`: tracing ([`trace`]), [`autodiff`] ([`vjp`], [`value_and_grad`],
//!   [`jvp()`], [`linearize()`]), [`batching`] ([`vmap`]) and the [`passes`].
//!
//! [`axis_env`] holds the named axes `shard_map` binds for its collectives.

pub use tessera_interp::spmd;
pub use tessera_ir_core::{
    array, aval, axis_env, callback, dtype, error, jaxpr, panics, params, text,
};
pub use tessera_transform::{autodiff, batching, passes};
#[cfg(feature = "oracle")]
pub use tessera_transform::{oracle, oracle_collectives};

pub mod prim {
    //! The primitive table (`tessera_ir_core::prim`), with the expansion programs of
    //! `tessera_transform::programs` under their former paths.
    pub use tessera_ir_core::prim::*;
    pub use tessera_transform::programs::{
        attention_per_shard_program, attention_program, cumulative_program, gather_fill_program,
        scatter_clip_program, scatter_clip_program_for,
    };
}

pub mod interp {
    //! The reference interpreter (`tessera_interp::interp`); [`PrimEval`] brings a primitive's
    //! evaluation rule (`prim.eval(...)`) into scope.
    pub use tessera_interp::interp::*;
}

pub mod trace {
    //! Tracing (`tessera_transform::trace`), with the transformations of traced functions
    //! (`tessera_transform::transforms`).
    pub use tessera_transform::trace::*;
    pub use tessera_transform::transforms::*;
}

pub use tessera_ir_core::{
    Array, Atom, Block, ClosedJaxpr, DType, Elem, Element, Eqn, ExplicitType, IrError, Jaxpr,
    Literal, ParamValue, Params, Prim, Result, ShapedArray, Var, element_count, verify,
};
pub use tessera_transform::{
    jvp, linearize, value_and_grad, value_and_grad_with_aux, vjp, vmap, vmap_named, vmap_spmd,
};
