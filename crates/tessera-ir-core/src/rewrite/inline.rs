//! Inlining: replaces each nested call (`jit`) by the equations of its jaxpr, recursively.
//! `checkpoint` regions are kept by [`inline_calls`] (autodiff needs their boundary to recompute
//! them) and flattened too by [`inline_all`] (for evaluators that want one flat program).

use crate::program::jaxpr::{Atom, ClosedJaxpr, Eqn};
use crate::program::prim::Prim;

use super::Rebuild;

/// Flattens every nested call into the calling jaxpr. Calls whose jaxpr has constants are kept.
pub fn inline_calls(closed: &ClosedJaxpr) -> ClosedJaxpr {
    inline_where(closed, &[Prim::Jit])
}

/// Flattens nested calls and `checkpoint` regions alike.
pub fn inline_all(closed: &ClosedJaxpr) -> ClosedJaxpr {
    inline_where(closed, &[Prim::Jit, Prim::Checkpoint])
}

fn inline_where(closed: &ClosedJaxpr, prims: &[Prim]) -> ClosedJaxpr {
    let jaxpr = &closed.jaxpr;
    let mut rb = Rebuild::new(jaxpr);
    for eqn in &jaxpr.eqns {
        match inlinable(eqn, prims) {
            Some(inner) => splice(&mut rb, eqn, &inline_where(inner, prims)),
            None => rb.copy(eqn),
        }
    }
    ClosedJaxpr {
        jaxpr: rb.finish(),
        consts: closed.consts.clone(),
    }
}

fn inlinable<'a>(eqn: &'a Eqn, prims: &[Prim]) -> Option<&'a ClosedJaxpr> {
    if !prims.contains(&eqn.prim) {
        return None;
    }
    eqn.params
        .jaxpr("jit", "jaxpr")
        .ok()
        .filter(|j| j.consts.is_empty())
}

/// Copies `inner`'s equations into `rb` with its invars bound to `eqn`'s operands.
fn splice(rb: &mut Rebuild<'_>, eqn: &Eqn, inner: &ClosedJaxpr) {
    let body = &inner.jaxpr;
    let mut sub = std::collections::HashMap::new();
    for (&iv, a) in body.invars.iter().zip(&eqn.inputs) {
        sub.insert(iv, rb.atom(a));
    }
    let resolve = |sub: &std::collections::HashMap<_, Atom>, a: &Atom| match a {
        Atom::Var(v) => sub.get(v).cloned().unwrap_or(Atom::Var(*v)),
        lit => lit.clone(),
    };
    for e in &body.eqns {
        let inputs = e.inputs.iter().map(|a| resolve(&sub, a)).collect();
        let outputs = e
            .outputs
            .iter()
            .map(|&v| {
                let nv = rb.new.new_var(body.aval(v).clone());
                sub.insert(v, Atom::Var(nv));
                nv
            })
            .collect();
        rb.new.eqns.push(Eqn {
            prim: e.prim,
            params: e.params.clone(),
            inputs,
            outputs,
        });
    }
    for (&outer, inner_out) in eqn.outputs.iter().zip(&body.outvars) {
        rb.map.insert(outer, resolve(&sub, inner_out));
    }
}
