//! The built-in schedules (JAXPP's set) and their registration.
//!
//! | name | struct | placement | backward |
//! |---|---|---|---|
//! | `gpipe` | [`GPipe`] | plain | whole |
//! | `interleaved-gpipe` | [`InterleavedGPipe`] | round-robin | whole |
//! | `1f1b` | [`Std1F1B`] | plain | whole, last stage fused |
//! | `eager-1f1b` | [`Eager1F1B`] | plain | whole, last stage fused |
//! | `interleaved-1f1b` | [`Interleaved1F1B`] | round-robin | whole, last stage fused |
//! | `interleaved-1f1b-fused` | [`Interleaved1F1B`] with fused steady state | round-robin | whole |
//! | `zero-bubble` | [`ZeroBubble`] (ZB-H1) | plain | split; fused at both ends |
//! | `dualpipev` | [`DualPipeV`] | V | mixed; F&B fused |

mod common;
mod dualpipev;
mod eager;
mod gpipe;
mod interleaved;
mod one_f_one_b;
mod zero_bubble;

pub use dualpipev::DualPipeV;
pub use eager::Eager1F1B;
pub use gpipe::{GPipe, InterleavedGPipe};
pub use interleaved::Interleaved1F1B;
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
        "eager-1f1b",
        "1F1B issuing forwards as early as memory allows",
        |p| Eager1F1B::with_mpmd_dim(p.stages, p.mpmd_dim).map(boxed),
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
        "zero-bubble",
        "ZB-H1 zero-bubble schedule (split backward)",
        |p| ZeroBubble::with_mpmd_dim(p.stages, p.mpmd_dim).map(boxed),
    );
    r.register(
        "dualpipev",
        "DeepSeek DualPipeV (V-shaped, 2 stages per actor)",
        |p| DualPipeV::new(p.stages, p.mpmd_dim).map(boxed),
    );
}
