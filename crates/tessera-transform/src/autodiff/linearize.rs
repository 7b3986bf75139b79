//! `linearize` (JAX's `jax.linearize`): the JVP program split by partial evaluation into a
//! primal program, which computes the results and the residuals the tangents need, and a linear
//! tangent program from the residuals and the argument tangents to the result tangents.
//!
//! The split is by dependence: an equation of the JVP program belongs to the tangent program
//! when one of its operands depends on a tangent argument, and to the primal program otherwise.
//! Residuals are the primal values the tangent program reads.

use std::collections::HashSet;

use super::jvp::jvp;
use crate::error::{IrError, Result};
use crate::jaxpr::{Atom, ClosedJaxpr, Jaxpr, Var};
use crate::passes::eliminate_dead_code;

/// A linearized program.
#[derive(Debug, Clone, PartialEq)]
pub struct Linearized {
    /// Arguments `x...`; results `(y..., residuals...)`.
    pub primal: ClosedJaxpr,
    /// Arguments `(residuals..., t...)` with one tangent per argument of the original program;
    /// results one tangent per result. Linear in `t`.
    pub tangent: ClosedJaxpr,
    /// How many residuals the primal program appends to the results.
    pub num_residuals: usize,
}

/// Linearizes `program` at symbolic primal arguments: see [`Linearized`].
pub fn linearize(program: &ClosedJaxpr) -> Result<Linearized> {
    let j = jvp(program)?;
    let jaxpr = &j.jaxpr;
    let n_in = program.jaxpr.invars.len();
    let n_out = program.jaxpr.outvars.len();
    let (primal_in, tangent_in) = jaxpr.invars.split_at(n_in);
    let (primal_out, tangent_out) = jaxpr.outvars.split_at(n_out);
    let mut unknown: HashSet<Var> = tangent_in.iter().copied().collect();
    let depends =
        |unknown: &HashSet<Var>, a: &Atom| matches!(a, Atom::Var(v) if unknown.contains(v));
    let mut known_eqns = Vec::new();
    let mut tangent_eqns = Vec::new();
    for eqn in &jaxpr.eqns {
        if eqn.inputs.iter().any(|a| depends(&unknown, a)) {
            unknown.extend(eqn.outputs.iter().copied());
            tangent_eqns.push(eqn.clone());
        } else {
            known_eqns.push(eqn.clone());
        }
    }
    if primal_out.iter().any(|a| depends(&unknown, a)) {
        return Err(IrError::Type {
            prim: "linearize".into(),
            message: "a primal result depends on a tangent".into(),
        });
    }
    let residuals = residuals(&tangent_eqns, tangent_out, &unknown);
    let primal = Jaxpr {
        vars: jaxpr.vars.clone(),
        constvars: Vec::new(),
        invars: primal_in.to_vec(),
        eqns: known_eqns,
        outvars: primal_out
            .iter()
            .cloned()
            .chain(residuals.iter().map(|&v| Atom::Var(v)))
            .collect(),
    };
    let tangent = Jaxpr {
        vars: jaxpr.vars.clone(),
        constvars: Vec::new(),
        invars: residuals.iter().chain(tangent_in).copied().collect(),
        eqns: tangent_eqns,
        outvars: tangent_out.to_vec(),
    };
    let primal = eliminate_dead_code(&ClosedJaxpr::new(primal));
    let tangent = eliminate_dead_code(&ClosedJaxpr::new(tangent));
    crate::verify(&primal)?;
    crate::verify(&tangent)?;
    Ok(Linearized {
        primal,
        tangent,
        num_residuals: residuals.len(),
    })
}

/// The primal variables the tangent equations or results read, in first-use order.
fn residuals(
    tangent_eqns: &[crate::jaxpr::Eqn],
    tangent_out: &[Atom],
    unknown: &HashSet<Var>,
) -> Vec<Var> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let atoms = tangent_eqns
        .iter()
        .flat_map(|e| e.inputs.iter())
        .chain(tangent_out);
    for atom in atoms {
        if let Atom::Var(v) = atom
            && !unknown.contains(v)
            && seen.insert(*v)
        {
            out.push(*v);
        }
    }
    out
}
