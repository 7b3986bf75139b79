//! Remat policies: which of a stage's forward values its backward reads saved, and which it
//! recomputes (JAX's `jax.checkpoint_policies`, by the same names).
//!
//! A stage's forward is split by [`tessera_ir::autodiff::vjp_split`] into a primal program,
//! which computes the stage's results and the residuals its backward needs, and a linear
//! backward from those residuals and the cotangents. A policy picks the residuals the forward
//! task saves ([`RematPolicy::saves`]); the backward recomputes the others from the stage's
//! inputs and the saved ones ([`recompute_program`]). `nothing_saveable` saves none, and the
//! backward recomputes the whole forward from the stage's inputs (Tessera's behaviour before
//! policies: least memory, a forward's work again in every backward).

use std::collections::HashMap;

pub use tessera_ir::autodiff::{RematPolicy, UnknownRematPolicy, needed, recompute_program};

/// The policy of every stage of a pipeline: one for all, and any stage's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Remat {
    /// The policy of every stage without its own.
    pub policy: RematPolicy,
    /// Stages with their own policy.
    pub stages: HashMap<u32, RematPolicy>,
    /// The memory the saved residuals wait in between their forward and backward tasks
    /// (`pinned_host`: JAX's offloading policies), where the plugin's devices have it; `None`:
    /// on the device.
    pub offload: Option<String>,
}

impl Remat {
    /// Every stage under `policy`.
    pub fn all(policy: RematPolicy) -> Self {
        Remat {
            policy,
            stages: HashMap::new(),
            offload: None,
        }
    }

    /// `self`, the saved residuals waiting in memory `kind` (e.g. `pinned_host`).
    pub fn with_offload(mut self, kind: &str) -> Self {
        self.offload = Some(kind.to_string());
        self
    }

    /// `self`, stage `stage` under `policy`.
    pub fn with_stage(mut self, stage: u32, policy: RematPolicy) -> Self {
        self.stages.insert(stage, policy);
        self
    }

    /// Stage `stage`'s policy.
    pub fn of_stage(&self, stage: u32) -> RematPolicy {
        self.stages.get(&stage).copied().unwrap_or(self.policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_read_and_print_jax_names() {
        for p in RematPolicy::ALL {
            assert_eq!(p.name().parse::<RematPolicy>(), Ok(p));
            assert_eq!(p.to_string(), p.name());
        }
        let err = "all".parse::<RematPolicy>().unwrap_err().to_string();
        assert!(err.contains("dots_saveable"), "{err}");
        let remat =
            Remat::all(RematPolicy::DotsSaveable).with_stage(1, RematPolicy::NothingSaveable);
        assert_eq!(remat.of_stage(0), RematPolicy::DotsSaveable);
        assert_eq!(remat.of_stage(1), RematPolicy::NothingSaveable);
    }
}
