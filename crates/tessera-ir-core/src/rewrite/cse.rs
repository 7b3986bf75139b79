//! Common-subexpression elimination: an equation with the same primitive, parameters and
//! operands as an earlier one reuses the earlier results. Effectful equations (`io_callback`,
//! `debug_callback`, or one whose nested jaxprs hold one) each run: they are never merged.

use std::collections::HashMap;

use crate::program::jaxpr::{Atom, ClosedJaxpr};

use super::Rebuild;

/// Replaces repeated computations by their first occurrence.
pub fn eliminate_common_subexpressions(closed: &ClosedJaxpr) -> ClosedJaxpr {
    let jaxpr = &closed.jaxpr;
    let mut rb = Rebuild::new(jaxpr);
    let mut seen: HashMap<String, Vec<Atom>> = HashMap::new();
    for eqn in &jaxpr.eqns {
        if super::has_effects(eqn) {
            rb.copy(eqn);
            continue;
        }
        let inputs: Vec<Atom> = eqn.inputs.iter().map(|a| rb.atom(a)).collect();
        let key = format!("{:?}|{:?}|{:?}", eqn.prim, eqn.params, inputs);
        let out_types: Vec<_> = eqn.outputs.iter().map(|&v| jaxpr.aval(v).clone()).collect();
        let key = format!("{key}|{out_types:?}");
        if let Some(previous) = seen.get(&key) {
            for (&v, a) in eqn.outputs.iter().zip(previous) {
                rb.map.insert(v, a.clone());
            }
            continue;
        }
        rb.copy(eqn);
        seen.insert(
            key,
            eqn.outputs
                .iter()
                .map(|v| rb.atom(&Atom::Var(*v)))
                .collect(),
        );
    }
    ClosedJaxpr {
        jaxpr: rb.finish(),
        consts: closed.consts.clone(),
    }
}
