//! Dead-code elimination: drops equations none of whose results is used, inside nested jaxprs
//! too, except effectful ones (`io_callback`, `debug_callback`, and any equation whose nested
//! jaxprs hold one), which always run, as in JAX. `pure_callback` is pure and may be dropped.
//! A `shard_map` loses its unused results and the operands its pruned body no longer reads.

use crate::program::jaxpr::{Atom, ClosedJaxpr, Eqn, Jaxpr};
use crate::program::params::ParamValue;
use crate::program::prim::Prim;

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
    let mut kept: Vec<Option<Eqn>> = vec![None; jaxpr.eqns.len()];
    for (i, eqn) in jaxpr.eqns.iter().enumerate().rev() {
        if eqn.outputs.iter().any(|v| live[v.index()]) || has_effects(eqn) {
            let eqn = if eqn.prim == Prim::ShardMap {
                shard_map_pruned(eqn, &live)
            } else {
                with_dce_params(eqn)
            };
            eqn.inputs.iter().for_each(|a| mark(&mut live, a));
            kept[i] = Some(eqn);
        }
    }
    let mut rb = Rebuild::new(jaxpr);
    for eqn in kept.iter().flatten() {
        rb.copy(eqn);
    }
    rb.finish()
}

/// A `shard_map` without its unused results and, once its body is pruned, without the operands
/// its body no longer reads, their specs dropped with them (JAX's DCE rule for `shard_map`). One
/// whose body has effects keeps them all.
fn shard_map_pruned(eqn: &Eqn, live: &[bool]) -> Eqn {
    let pruned = with_dce_params(eqn);
    let Ok(body) = eqn.params.jaxpr("shard_map", "jaxpr") else {
        return pruned;
    };
    if body.jaxpr.eqns.iter().any(has_effects) || body.jaxpr.outvars.len() != eqn.outputs.len() {
        return pruned;
    }
    let used_out: Vec<bool> = eqn.outputs.iter().map(|v| live[v.index()]).collect();
    let mut inner = body.clone();
    inner.jaxpr.outvars = keep_where(&inner.jaxpr.outvars, &used_out);
    let mut inner = eliminate_dead_code(&inner);
    let mut read = vec![false; inner.jaxpr.vars.len()];
    let atoms = inner.jaxpr.eqns.iter().flat_map(|e| e.inputs.iter());
    for atom in atoms.chain(inner.jaxpr.outvars.iter()) {
        if let Atom::Var(v) = atom {
            read[v.index()] = true;
        }
    }
    let used_in: Vec<bool> = inner.jaxpr.invars.iter().map(|v| read[v.index()]).collect();
    if used_in.len() != eqn.inputs.len() {
        return pruned;
    }
    inner.jaxpr.invars = keep_where(&inner.jaxpr.invars, &used_in);
    let mut out = pruned;
    out.inputs = keep_where(&eqn.inputs, &used_in);
    out.outputs = keep_where(&eqn.outputs, &used_out);
    for (name, value) in out.params.entries_mut().iter_mut() {
        if let ParamValue::Jaxpr(j) = value {
            **j = inner.clone();
        } else if let ParamValue::Tuple(specs) = value {
            if name == "in_specs" {
                *specs = keep_where(specs, &used_in);
            } else if name == "out_specs" {
                *specs = keep_where(specs, &used_out);
            }
        }
    }
    out
}

/// The items of `items` whose flag in `keep` is set.
fn keep_where<T: Clone>(items: &[T], keep: &[bool]) -> Vec<T> {
    items
        .iter()
        .zip(keep)
        .filter(|(_, k)| **k)
        .map(|(x, _)| x.clone())
        .collect()
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
