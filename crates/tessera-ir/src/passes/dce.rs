//! Dead-code elimination: drops equations none of whose results is used (every primitive is
//! pure), in nested bodies too.

use crate::ir::{Atom, Jaxpr};
use crate::prims::Primitive;

/// Removes the equations whose results are unused, walking backwards from the outputs.
pub fn eliminate_dead_code(j: &Jaxpr) -> Jaxpr {
    let mut live = vec![false; j.vars.len()];
    let mark = |live: &mut Vec<bool>, atoms: &[Atom]| {
        for a in atoms {
            if let Some(l) = match a {
                Atom::Var(v) => live.get_mut(v.index()),
                Atom::Lit(_) => None,
            } {
                *l = true;
            }
        }
    };
    mark(&mut live, &j.outvars);
    let mut kept = Vec::new();
    for e in j.eqns.iter().rev() {
        if e.outputs
            .iter()
            .any(|v| live.get(v.index()).copied().unwrap_or(false))
        {
            mark(&mut live, &e.inputs);
            let mut e = e.clone();
            if let Primitive::Jit { jaxpr, .. } = &mut e.prim {
                jaxpr.jaxpr = eliminate_dead_code(&jaxpr.jaxpr);
            }
            kept.push(e);
        }
    }
    kept.reverse();
    Jaxpr {
        eqns: kept,
        ..j.clone()
    }
}
