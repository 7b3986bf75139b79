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

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use tessera_ir::jaxpr::{Atom, ClosedJaxpr, Jaxpr, Var};
use tessera_ir::passes::eliminate_dead_code;
use tessera_ir::prim::Prim;

/// Which forward values a stage's backward reads saved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RematPolicy {
    /// Save every residual: the backward computes no forward value again (the default, as
    /// `jax.jit` of a step without `jax.checkpoint`).
    #[default]
    EverythingSaveable,
    /// Save the results of matrix products (`dot_general`); recompute the rest.
    DotsSaveable,
    /// Save the results of matrix products without batch dimensions (a layer's `x @ W`, not
    /// attention's batched products); recompute the rest.
    DotsWithNoBatchDimsSaveable,
    /// Save nothing: the backward recomputes its stage's forward from the stage's inputs.
    NothingSaveable,
}

impl RematPolicy {
    /// Every policy, in the order the planner tries them.
    pub const ALL: [RematPolicy; 4] = [
        RematPolicy::EverythingSaveable,
        RematPolicy::DotsSaveable,
        RematPolicy::DotsWithNoBatchDimsSaveable,
        RematPolicy::NothingSaveable,
    ];

    /// JAX's name of the policy.
    pub fn name(self) -> &'static str {
        match self {
            RematPolicy::EverythingSaveable => "everything_saveable",
            RematPolicy::DotsSaveable => "dots_saveable",
            RematPolicy::DotsWithNoBatchDimsSaveable => "dots_with_no_batch_dims_saveable",
            RematPolicy::NothingSaveable => "nothing_saveable",
        }
    }

    /// Whether the policy saves residual `var` of the primal program `primal`: every residual,
    /// none, or those a `dot_general` (without batch dimensions) computes.
    pub fn saves(self, primal: &Jaxpr, var: Var) -> bool {
        let dot = || {
            primal
                .eqns
                .iter()
                .find(|e| e.outputs.contains(&var))
                .filter(|e| e.prim == Prim::DotGeneral)
        };
        match self {
            RematPolicy::EverythingSaveable => true,
            RematPolicy::NothingSaveable => false,
            RematPolicy::DotsSaveable => dot().is_some(),
            RematPolicy::DotsWithNoBatchDimsSaveable => dot()
                .is_some_and(|e| lhs_batch_dims(&e.params).is_some_and(|batch| batch.is_empty())),
        }
    }
}

/// The left operand's batch dimensions of a `dot_general` (its `dimension_numbers` are
/// `((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))`).
fn lhs_batch_dims(params: &tessera_ir::Params) -> Option<Vec<i64>> {
    let [_, batch] = params.get("dimension_numbers")?.as_seq()? else {
        return None;
    };
    let [lhs, _] = batch.as_seq()? else {
        return None;
    };
    lhs.as_ints().map(|v| v.to_vec())
}

impl serde::Serialize for RematPolicy {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl fmt::Display for RematPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a remat policy; use everything_saveable (the default), dots_saveable, \
     dots_with_no_batch_dims_saveable or nothing_saveable"
)]
pub struct UnknownRematPolicy(pub String);

impl FromStr for RematPolicy {
    type Err = UnknownRematPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RematPolicy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownRematPolicy(s.to_owned()))
    }
}

/// The policy of every stage of a pipeline: one for all, and any stage's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Remat {
    /// The policy of every stage without its own.
    pub policy: RematPolicy,
    /// Stages with their own policy.
    pub stages: HashMap<u32, RematPolicy>,
}

impl Remat {
    /// Every stage under `policy`.
    pub fn all(policy: RematPolicy) -> Self {
        Remat {
            policy,
            stages: HashMap::new(),
        }
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

/// The program from `(x..., saved...)` to `outputs`: `primal`'s equations without those that
/// define `saved` (its arguments now), and without whatever only those needed.
pub fn recompute_program(primal: &ClosedJaxpr, saved: &[Var], outputs: &[Atom]) -> ClosedJaxpr {
    let defined: HashSet<Var> = saved.iter().copied().collect();
    let mut jaxpr = primal.jaxpr.clone();
    jaxpr
        .eqns
        .retain(|e| !e.outputs.iter().any(|v| defined.contains(v)));
    jaxpr.invars.extend(saved.iter().copied());
    jaxpr.outvars = outputs.to_vec();
    eliminate_dead_code(&ClosedJaxpr {
        jaxpr,
        consts: primal.consts.clone(),
    })
}

/// Of the values `candidates` of `primal`, those that computing `outputs` reads when the
/// candidates are given (not computed): the ones a recompute program takes.
pub fn needed(primal: &Jaxpr, candidates: &[Var], outputs: &[Atom]) -> Vec<Var> {
    let given: HashSet<Var> = candidates.iter().copied().collect();
    let mut live: HashSet<Var> = outputs
        .iter()
        .filter_map(|a| match a {
            Atom::Var(v) => Some(*v),
            Atom::Lit(_) => None,
        })
        .collect();
    for eqn in primal.eqns.iter().rev() {
        let defines_given = eqn.outputs.iter().any(|v| given.contains(v));
        if defines_given || !eqn.outputs.iter().any(|v| live.contains(v)) {
            continue;
        }
        for input in &eqn.inputs {
            if let Atom::Var(v) = input {
                live.insert(*v);
            }
        }
    }
    candidates
        .iter()
        .filter(|v| live.contains(v))
        .copied()
        .collect()
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
