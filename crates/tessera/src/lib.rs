//! Tessera: SPMD sharding and MPMD pipeline parallelism for array programs, in Rust.
//!
//! This facade re-exports the layered crates under short names; the `tessera` binary (in
//! `src/main.rs` and `src/cli/`) is the command-line front end. See `docs/ARCHITECTURE.md` for the
//! code map.

pub mod alloc;
pub mod attention_check;
pub mod generate;
pub mod jit;
mod jit_trivial;
mod jit_unused;
pub mod perf;
pub mod plot;
pub mod pmap;
pub mod selfcheck;
pub mod trees;

pub use tessera_ir as ir;
pub use tessera_mpmd as mpmd;
pub use tessera_nn as nn;
pub use tessera_pjrt as pjrt;
pub use tessera_schedule as schedule;
pub use tessera_sharding as sharding;
pub use tessera_stablehlo as stablehlo;
