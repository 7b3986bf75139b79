//! Inlining: replaces each `jit` call by the equations of its body (recursively), with the
//! body's variables copied into the caller's arena.

use super::Subst;
use crate::interp::Array;
use crate::ir::{Atom, Eqn, Jaxpr, Var};
use crate::prims::Primitive;
use hashbrown::HashMap;

/// Inlines every nested call. Bodies with constants are kept as calls (their constants would
/// need constvars of the caller).
pub fn inline_calls(j: &Jaxpr) -> Jaxpr {
    let mut out = Jaxpr {
        eqns: Vec::new(),
        ..j.clone()
    };
    let mut subst = Subst::default();
    for e in &j.eqns {
        let mut e = e.clone();
        subst.apply_all(&mut e.inputs);
        match &e.prim {
            Primitive::Jit { jaxpr, .. } if jaxpr.consts.is_empty() => {
                let body = inline_calls(&jaxpr.jaxpr);
                let results = splice(&mut out, &body, &e.inputs, &jaxpr.consts);
                for (v, r) in e.outputs.iter().zip(results) {
                    subst.insert(*v, r);
                }
            }
            _ => out.eqns.push(e),
        }
    }
    subst.apply_all(&mut out.outvars);
    out
}

/// Copies `body`'s equations into `out` with its invars bound to `args`; returns its results.
fn splice(out: &mut Jaxpr, body: &Jaxpr, args: &[Atom], _consts: &[Array]) -> Vec<Atom> {
    let mut map: HashMap<Var, Atom> = HashMap::new();
    for (v, a) in body.invars.iter().zip(args) {
        map.insert(*v, a.clone());
    }
    let tr = |map: &HashMap<Var, Atom>, a: &Atom| match a {
        Atom::Var(v) => map.get(v).cloned().unwrap_or_else(|| a.clone()),
        Atom::Lit(_) => a.clone(),
    };
    for e in &body.eqns {
        let inputs = e.inputs.iter().map(|a| tr(&map, a)).collect();
        let mut outputs = Vec::new();
        for v in &e.outputs {
            let aval = body
                .aval(*v)
                .cloned()
                .unwrap_or_else(|| crate::types::ShapedArray::scalar(crate::types::DType::F32));
            let nv = out.new_var(aval);
            map.insert(*v, Atom::Var(nv));
            outputs.push(nv);
        }
        out.eqns.push(Eqn {
            prim: e.prim.clone(),
            inputs,
            outputs,
        });
    }
    body.outvars.iter().map(|a| tr(&map, a)).collect()
}
