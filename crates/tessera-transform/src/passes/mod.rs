//! Passes over closed jaxprs, one per file, each a free function from a jaxpr to a new one.
//! Every pass keeps the verifier's invariants and the program's meaning (tests check both on the
//! JAX oracle programs). The passes that only move equations live in the core
//! (`tessera_ir_core::rewrite`) and are re-exported here; those here trace (unrolling, output
//! and `shard_map` splitting) or evaluate (constant folding).

mod flatten_shard_map;
mod fold;
mod shard_attention;
mod split_outputs;
mod unroll;

pub use flatten_shard_map::flatten_nested_shard_maps;
pub use fold::fold_constants;
pub use shard_attention::shard_attention;
pub use split_outputs::{OutputSplit, split_outputs};
pub use tessera_ir_core::rewrite::{
    Rebuild, StageInput, StageProgram, StageSplit, desugar_positional_axes,
    eliminate_common_subexpressions, eliminate_dead_code, has_effects, inline_all, inline_calls,
    keep_partial_sums, split_stages,
};
pub use unroll::{unroll_treduce, unroll_treduce_if};
