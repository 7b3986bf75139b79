//! Common-subexpression elimination: an equation with the same primitive, params and operands
//! as an earlier one is dropped and its results replaced by the earlier results.

use super::Subst;
use crate::ir::{Atom, Eqn, Jaxpr};

/// Replaces repeated equations by the results of their first occurrence.
pub fn eliminate_common_subexpressions(j: &Jaxpr) -> Jaxpr {
    let mut subst = Subst::default();
    let mut seen: Vec<Eqn> = Vec::new();
    let mut eqns = Vec::new();
    for e in &j.eqns {
        let mut e = e.clone();
        subst.apply_all(&mut e.inputs);
        let same = seen
            .iter()
            .find(|s| s.prim == e.prim && s.inputs == e.inputs);
        match same {
            Some(s) => {
                for (v, w) in e.outputs.iter().zip(&s.outputs) {
                    subst.insert(*v, Atom::Var(*w));
                }
            }
            None => {
                seen.push(e.clone());
                eqns.push(e);
            }
        }
    }
    let mut outvars = j.outvars.clone();
    subst.apply_all(&mut outvars);
    Jaxpr {
        eqns,
        outvars,
        ..j.clone()
    }
}
