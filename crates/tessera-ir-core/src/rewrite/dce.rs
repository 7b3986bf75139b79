//! Dead-code elimination: drops equations none of whose results is used, inside nested jaxprs
//! too, except effectful ones (`io_callback`, `debug_callback`, and any equation whose nested
//! jaxprs hold one), which always run, as in JAX. `pure_callback` is pure and may be dropped.

use crate::program::jaxpr::{Atom, ClosedJaxpr, Eqn, Jaxpr};
use crate::program::params::ParamValue;

use super::Rebuild;

/// Removes every equation whose results are not needed for the outputs.
pub fn eliminate_dead_code(closed: &ClosedJaxpr) -> ClosedJaxpr {
    ClosedJaxpr {
        jaxpr: dce_jaxpr(&closed.jaxpr),
        consts: closed.consts.clone(),
    }
}

fn dce_jaxpr(jaxpr: &Jaxpr) -> Jaxpr {
    let mut live = vec![false; jaxpr.vars.len()];
    let mark = |live: &mut Vec<bool>, a: &Atom| {
        if let Atom::Var(v) = a {
            live[v.index()] = true;
        }
    };
    jaxpr.outvars.iter().for_each(|a| mark(&mut live, a));
    let mut keep = vec![false; jaxpr.eqns.len()];
    for (i, eqn) in jaxpr.eqns.iter().enumerate().rev() {
        if eqn.outputs.iter().any(|v| live[v.index()]) || has_effects(eqn) {
            keep[i] = true;
            eqn.inputs.iter().for_each(|a| mark(&mut live, a));
        }
    }
    let mut rb = Rebuild::new(jaxpr);
    for (eqn, _) in jaxpr.eqns.iter().zip(&keep).filter(|(_, k)| **k) {
        rb.copy(&with_dce_params(eqn));
    }
    rb.finish()
}

/// Whether `eqn` has a side effect: an effectful primitive, or one in its nested jaxprs.
pub fn has_effects(eqn: &Eqn) -> bool {
    crate::program::prim::is_effectful(eqn.prim)
        || eqn
            .params
            .jaxprs()
            .iter()
            .any(|j| j.jaxpr.eqns.iter().any(has_effects))
}

fn with_dce_params(eqn: &Eqn) -> Eqn {
    let mut eqn = eqn.clone();
    for (_, value) in eqn.params.entries_mut().iter_mut() {
        if let ParamValue::Jaxpr(inner) = value {
            **inner = eliminate_dead_code(inner);
        }
    }
    eqn
}
