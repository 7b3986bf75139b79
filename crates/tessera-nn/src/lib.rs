//! Models as a library on Tessera's tracing API.
//!
//! - [`Tree`]: parameters as nested, named trees (JAX's pytrees), flattened to and from the
//!   argument lists that traced programs take, in one fixed depth-first order.
//! - [`layers`]: Linear, Embedding, LayerNorm, RMSNorm, causal multi-head attention with optional
//!   rotary position embeddings, a GELU MLP and SwiGLU; each declares its parameters as a tree of
//!   shapes and applies itself to a tree of traced tensors.
//! - [`trace_trees`] and [`value_and_grad_tree`]: tracing and differentiation with trees in and
//!   out, instead of positional argument lists.
//! - [`DecoderConfig`]: GPT-2 style and Llama style decoders, their initial parameters and their
//!   loss program, split into pipeline stages at the layer indices the caller names
//!   ([`StagePlan`]: even, at given layers, or from layer counts per stage).
//! - [`parallel`]: the decoders' parameter layouts for tensor parallelism (Megatron style) and
//!   FSDP over a device group's mesh axes ([`DecoderConfig::param_specs`]).
//! - [`optim`]: SGD with momentum and AdamW as traced updates, gradient clipping by global norm;
//!   [`lr`]: learning-rate schedules (constant, linear warm-up then cosine).
//! - [`data`]: byte-level data from any file, with a held-out split and batches that are a pure
//!   function of a position (so a resumed run sees the same batches).
//! - [`checkpoint`]: parameters and optimizer state in `safetensors` files with a manifest,
//!   written atomically (a crash mid-write never leaves a torn checkpoint).
//! - [`hf`]: Hugging Face Llama-family folders (config, safetensors weights, tokenizer) imported
//!   into a decoder and its parameters, and exported back.
//! - [`tensorboard`]: scalars (losses, learning rate, throughput) as TensorBoard event files,
//!   and a reader that checks them.
//! - [`toy`]: a small teacher-student `tanh` network for trying pipelines quickly.
//!
//! Everything here builds programs with `tessera_ir::trace`; running them (interpreted, under
//! `jit`, or pipelined by `mpmd_jit`) is the caller's choice.

pub mod checkpoint;
pub mod data;
mod decoder;
mod error;
pub mod hf;
mod init;
mod kv_cache;
pub mod layers;
pub mod lr;
pub mod optim;
pub mod parallel;
mod rope;
mod stage_plan;
pub mod tensorboard;
pub mod toy;
mod tree;
mod trees;

pub use decoder::{DecoderConfig, DecoderKind, MAX_LAYERS};
pub use error::{NnError, Result};
pub use init::{Init, Rng};
pub use parallel::{MeshAxis, ParallelAxes};
pub use rope::{Rope, RopeScaling};
pub use stage_plan::{StagePlan, StagePlanError};
pub use tree::Tree;
pub use trees::{trace_trees, value_and_grad_tree};
