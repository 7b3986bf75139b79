//! Expansion programs: small jaxprs, built by tracing, that stand for one primitive where a
//! consumer has no direct rule for it (the cumulative reductions' associative scan, the
//! `FILL_OR_DROP` gather and `CLIP` scatter modes, attention and its backward decomposed). The transformations and the StableHLO
//! lowering use them; `tessera_ir::prim` re-exports them under their former paths.

mod attention;
pub(crate) mod conv;
mod cumulative;
mod index_modes;

pub use attention::{attention_per_shard_program, attention_program};
pub use cumulative::cumulative_program;
pub(crate) use cumulative::flip;
pub use index_modes::{gather_fill_program, scatter_clip_program, scatter_clip_program_for};
