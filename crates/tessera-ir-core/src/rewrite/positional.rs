//! Positional axes of `psum`, `pmax` and `pmin` (JAX's `psum(x, axis_name=(0, 'i'))`: an
//! integer names a dimension of the operand, reduced like `reduce_sum` over it, beside the
//! named mesh axes). JAX prints them in the `axes` tuple (`psum[axes=(0, 'i') ...]`); this pass
//! rewrites such an equation into a `reduce_sum`/`reduce_max`/`reduce_min` over those
//! dimensions followed by the collective over the named axes alone (or the reduction alone),
//! inside nested jaxprs too, so every other rule sees named axes only. It runs when jaxpr text
//! is parsed.

use crate::program::jaxpr::{Atom, ClosedJaxpr, Eqn, Jaxpr};
use crate::program::params::{ParamValue, Params};
use crate::program::prim::Prim;

/// `closed` with every positional axis of a reduction collective rewritten (see the module).
pub fn desugar_positional_axes(closed: &ClosedJaxpr) -> ClosedJaxpr {
    let mut jaxpr = closed.jaxpr.clone();
    rewrite(&mut jaxpr);
    ClosedJaxpr {
        jaxpr,
        consts: closed.consts.clone(),
    }
}

fn rewrite(jaxpr: &mut Jaxpr) {
    let eqns = std::mem::take(&mut jaxpr.eqns);
    for mut eqn in eqns {
        for (_, value) in eqn.params.entries_mut().iter_mut() {
            if let ParamValue::Jaxpr(inner) = value {
                **inner = desugar_positional_axes(inner);
            }
        }
        match split(jaxpr, &eqn) {
            Some(replacement) => jaxpr.eqns.extend(replacement),
            None => jaxpr.eqns.push(eqn),
        }
    }
}

/// The reduction over the positional axes and the collective over the named ones, where the
/// equation has positional axes.
fn split(jaxpr: &mut Jaxpr, eqn: &Eqn) -> Option<Vec<Eqn>> {
    let reduce = match eqn.prim {
        Prim::Psum | Prim::PsumInvariant => Prim::ReduceSum,
        Prim::Pmax => Prim::ReduceMax,
        Prim::Pmin => Prim::ReduceMin,
        _ => return None,
    };
    let axes = eqn.params.get("axes")?.as_seq()?.to_vec();
    if !axes.iter().any(|a| matches!(a, ParamValue::Int(_))) {
        return None;
    }
    let input = eqn.inputs.first()?;
    let aval = match input {
        Atom::Var(v) => jaxpr.aval(*v).clone(),
        Atom::Lit(l) => l.aval.clone(),
    };
    let rank = aval.rank() as i64;
    let mut dims: Vec<i64> = axes
        .iter()
        .filter_map(ParamValue::as_int)
        .map(|d| if d < 0 { d + rank } else { d })
        .collect();
    if dims.iter().any(|d| !(0..rank).contains(d)) {
        return None; // out of range: left for the shape rule to refuse
    }
    dims.sort_unstable();
    dims.dedup();
    let names: Vec<ParamValue> = axes
        .into_iter()
        .filter(|a| !matches!(a, ParamValue::Int(_)))
        .collect();
    let reduce_params = Params::new()
        .with("axes", ParamValue::ints(&dims))
        .with("out_sharding", ParamValue::Name("None".into()));
    if names.is_empty() {
        return Some(vec![Eqn {
            prim: reduce,
            params: reduce_params,
            inputs: eqn.inputs.clone(),
            outputs: eqn.outputs.clone(),
        }]);
    }
    let mut reduced = aval.clone();
    reduced.shape = (0..rank)
        .filter(|d| !dims.contains(d))
        .map(|d| aval.shape[d as usize])
        .collect();
    let var = jaxpr.new_var(reduced);
    let mut collective = eqn.clone();
    collective.params = eqn.params.clone().with("axes", ParamValue::Tuple(names));
    collective.inputs = vec![Atom::Var(var)];
    Some(vec![
        Eqn {
            prim: reduce,
            params: reduce_params,
            inputs: eqn.inputs.clone(),
            outputs: vec![var],
        },
        collective,
    ])
}
