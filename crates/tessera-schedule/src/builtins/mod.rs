//! The built-in schedules (JAXPP's set) and their registration.
//!
//! | name | struct | placement | backward |
//! |---|---|---|---|
//! | `gpipe` | [`GPipe`] | plain | whole |
//! | `interleaved-gpipe` | [`InterleavedGPipe`] | round-robin | whole |
//! | `1f1b` | [`Std1F1B`] | plain | whole |
//! | `1f1b-fuse-last` | [`Std1F1B::fusing_last_stage`] | plain | whole, last stage fused |
//! | `eager-1f1b` | [`Eager1F1B`] | plain | whole |
//! | `eager-1f1b-fuse-last` | [`Eager1F1B::fusing_last_stage`] | plain | whole, last stage fused |
//! | `interleaved-1f1b` | [`Interleaved1F1B`] | round-robin | whole, last stage fused |
//! | `interleaved-1f1b-fused` | [`Interleaved1F1B`] with fused steady state | round-robin | whole |
//! | `kimi-k2` | [`KimiK2`] | round-robin | whole, last stage fused |
//! | `kimi-k2-fused` | [`KimiK2`] with fused steady state | round-robin | whole |
//! | `zero-bubble` | [`ZeroBubble`] (ZB-H1) | plain | split |
//! | `zero-bubble-fuse-ends` | [`ZeroBubble::fusing_ends`] | plain | split; fused at both ends |
//! | `dualpipev` | [`DualPipeV`] (JAXPP's order) | V | mixed; F&B fused |
//! | `dualpipev-deepseek` | [`DualPipeVDeepSeek`] (DeepSeek's order) | V | mixed; F&B fused |
//!
//! Where JAXPP has the schedule, the default names give JAXPP's `tasks()` exactly (each actor's
//! tasks, their order and which are fused), as `tests/jaxpp_orders.rs` checks; the `-fuse-*`
//! variants and `dualpipev-deepseek` are Tessera's own.

mod common;
mod dualpipev;
mod dualpipev_deepseek;
mod eager;
mod gpipe;
mod interleaved;
mod one_f_one_b;
mod zero_bubble;

pub use dualpipev::DualPipeV;
pub use dualpipev_deepseek::DualPipeVDeepSeek;
pub use eager::Eager1F1B;
pub use gpipe::{GPipe, InterleavedGPipe};
pub use interleaved::{Interleaved1F1B, KimiK2};
pub use one_f_one_b::Std1F1B;
pub use zero_bubble::ZeroBubble;

use crate::schedule::{Registry, Schedule};

fn boxed<S: Schedule + 'static>(s: S) -> Box<dyn Schedule> {
    Box::new(s)
}

/// Registers every built-in under its command-line name.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("gpipe", "GPipe: all forwards, then all backwards", |p| {
        GPipe::with_mpmd_dim(p.stages, p.mpmd_dim).map(boxed)
    });
    r.register(
        "interleaved-gpipe",
        "GPipe with several stages per actor",
        |p| InterleavedGPipe::new(p.stages, p.mpmd_dim).map(boxed),
    );
    r.register("1f1b", "PipeDream-Flush 1F1B", |p| {
        Std1F1B::with_mpmd_dim(p.stages, p.mpmd_dim).map(boxed)
    });
    r.register(
        "1f1b-fuse-last",
        "1F1B, the last stage's forward and backward fused",
        |p| Std1F1B::with_mpmd_dim(p.stages, p.mpmd_dim).map(|s| boxed(s.fusing_last_stage())),
    );
    r.register(
        "eager-1f1b",
        "1F1B issuing forwards as early as memory allows",
        |p| Eager1F1B::with_mpmd_dim(p.stages, p.mpmd_dim).map(boxed),
    );
    r.register(
        "eager-1f1b-fuse-last",
        "eager 1F1B, the last stage's forward and backward fused",
        |p| Eager1F1B::with_mpmd_dim(p.stages, p.mpmd_dim).map(|s| boxed(s.fusing_last_stage())),
    );
    r.register("interleaved-1f1b", "Megatron-LM interleaved 1F1B", |p| {
        Interleaved1F1B::new(p.stages, p.mpmd_dim, false).map(boxed)
    });
    r.register(
        "interleaved-1f1b-fused",
        "interleaved 1F1B, steady-state F and B fused",
        |p| Interleaved1F1B::new(p.stages, p.mpmd_dim, true).map(boxed),
    );
    r.register(
        "kimi-k2",
        "interleaved 1F1B with one more warm-up forward",
        |p| KimiK2::new(p.stages, p.mpmd_dim, false).map(boxed),
    );
    r.register("kimi-k2-fused", "KimiK2, steady-state F and B fused", |p| {
        KimiK2::new(p.stages, p.mpmd_dim, true).map(boxed)
    });
    r.register(
        "zero-bubble",
        "ZB-H1 zero-bubble schedule (split backward)",
        |p| ZeroBubble::with_mpmd_dim(p.stages, p.mpmd_dim).map(boxed),
    );
    r.register(
        "zero-bubble-fuse-ends",
        "ZB-H1, last stage F+I and first stage I+W fused",
        |p| ZeroBubble::with_mpmd_dim(p.stages, p.mpmd_dim).map(|s| boxed(s.fusing_ends())),
    );
    r.register(
        "dualpipev",
        "DualPipeV (V-shaped, 2 stages per actor) in JAXPP's order",
        |p| DualPipeV::new(p.stages, p.mpmd_dim).map(boxed),
    );
    r.register(
        "dualpipev-deepseek",
        "DualPipeV in DeepSeek's reference order",
        |p| DualPipeVDeepSeek::new(p.stages, p.mpmd_dim).map(boxed),
    );
}
