//! Remat policies: which of a differentiated region's forward values its backward reads saved,
//! and which it recomputes (JAX's `jax.checkpoint_policies`, by the same names). A pipeline
//! stage applies one to its forward and backward tasks (`tessera_mpmd::remat`), a `checkpoint`
//! region to its own VJP ([`crate::trace::checkpoint_with`]): the policy picks the residuals the
//! forward keeps ([`RematPolicy::saves`]), and [`recompute_program`] computes the others again
//! from the region's inputs and the kept ones.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use crate::jaxpr::{Atom, ClosedJaxpr, Eqn, Jaxpr, Var};
use crate::prim::Prim;
use crate::rewrite::eliminate_dead_code;

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
    /// none, or those a `dot_general` (without batch dimensions) computes. Looks up `var`'s
    /// equation; over many values, [`RematPolicy::saves_result_of`] with
    /// [`defining_equations`] asks once per value.
    pub fn saves(self, primal: &Jaxpr, var: Var) -> bool {
        self.saves_result_of(primal.eqns.iter().find(|e| e.outputs.contains(&var)))
    }

    /// Whether the policy saves a result of `eqn` (`None`: a value no equation computes).
    pub fn saves_result_of(self, eqn: Option<&Eqn>) -> bool {
        let dot = || eqn.filter(|e| e.prim == Prim::DotGeneral);
        match self {
            RematPolicy::EverythingSaveable => true,
            RematPolicy::NothingSaveable => false,
            RematPolicy::DotsSaveable => dot().is_some(),
            RematPolicy::DotsWithNoBatchDimsSaveable => dot()
                .is_some_and(|e| lhs_batch_dims(&e.params).is_some_and(|batch| batch.is_empty())),
        }
    }
}

/// Each value of `jaxpr` an equation computes, with that equation.
pub fn defining_equations(jaxpr: &Jaxpr) -> HashMap<Var, &Eqn> {
    jaxpr
        .eqns
        .iter()
        .flat_map(|e| e.outputs.iter().map(move |&v| (v, e)))
        .collect()
}

/// The left operand's batch dimensions of a `dot_general` (its `dimension_numbers` are
/// `((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))`).
fn lhs_batch_dims(params: &crate::params::Params) -> Option<Vec<i64>> {
    let [_, batch] = params.get("dimension_numbers")?.as_seq()? else {
        return None;
    };
    let [lhs, _] = batch.as_seq()? else {
        return None;
    };
    lhs.as_ints().map(|v| v.to_vec())
}

impl fmt::Display for RematPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a policy.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
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
