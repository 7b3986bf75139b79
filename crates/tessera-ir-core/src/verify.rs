//! The verifier. Invariants of a jaxpr:
//! - every variable is defined once (constvars, invars, or one equation's outputs), before use;
//! - every equation's result types are what its primitive's rule gives for its operand types;
//! - the pending result of an asynchronous collective's start is taken by its done alone,
//!   once (`prim/pending.rs`);
//! - nested jaxprs verify too, and a closed jaxpr has one constant per constvar of its type.
//!
//! Errors show the offending equation with its printed neighbours.

use crate::error::{IrError, Result};
use crate::program::jaxpr::{Atom, ClosedJaxpr, Jaxpr};
use crate::program::params::ParamValue;

/// Checks the invariants above.
pub fn verify(closed: &ClosedJaxpr) -> Result<()> {
    if closed.consts.len() != closed.jaxpr.constvars.len() {
        return Err(IrError::Verify {
            message: format!(
                "{} constants for {} constvars",
                closed.consts.len(),
                closed.jaxpr.constvars.len()
            ),
            context: String::new(),
        });
    }
    verify_jaxpr(&closed.jaxpr)
}

fn verify_jaxpr(jaxpr: &Jaxpr) -> Result<()> {
    let mut defined = vec![false; jaxpr.vars.len()];
    let fail = |index: usize, message: String| IrError::Verify {
        message,
        context: context(jaxpr, index),
    };
    for &v in jaxpr.constvars.iter().chain(&jaxpr.invars) {
        if v.index() >= defined.len() || std::mem::replace(&mut defined[v.index()], true) {
            return Err(fail(
                0,
                format!("parameter {} is bound twice or does not exist", v.0),
            ));
        }
    }
    for (i, eqn) in jaxpr.eqns.iter().enumerate() {
        for atom in &eqn.inputs {
            if let Atom::Var(v) = atom
                && !defined.get(v.index()).copied().unwrap_or(false)
            {
                return Err(fail(
                    i,
                    format!(
                        "equation {i} ({}) uses a variable before it is defined",
                        eqn.prim.name()
                    ),
                ));
            }
        }
        let in_avals: Vec<_> = eqn
            .inputs
            .iter()
            .map(|a| jaxpr.atom_aval(a).clone())
            .collect();
        let written: Vec<_> = eqn.outputs.iter().map(|&v| jaxpr.aval(v).clone()).collect();
        let expected = eqn
            .prim
            .abstract_eval(&eqn.params, &in_avals, Some(&written))
            .map_err(|e| fail(i, format!("equation {i}: {e}")))?;
        if expected.len() != written.len()
            || expected.iter().zip(&written).any(|(e, w)| !e.same_type(w))
        {
            let show = |v: &[crate::aval::ShapedArray]| {
                v.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(fail(
                i,
                format!(
                    "equation {i} ({}) produces ({}) but its results are typed ({})",
                    eqn.prim.name(),
                    show(&expected),
                    show(&written)
                ),
            ));
        }
        if let Some(message) = explicit_mismatch(eqn.prim, &expected, &written) {
            return Err(fail(i, format!("equation {i}: {message}")));
        }
        if let Some(message) = reduced_mismatch(eqn.prim, &eqn.params, &expected, &written) {
            return Err(fail(i, format!("equation {i}: {message}")));
        }
        for &v in &eqn.outputs {
            if std::mem::replace(&mut defined[v.index()], true) {
                return Err(fail(i, format!("equation {i} redefines a variable")));
            }
        }
        for (_, value) in eqn.params.entries() {
            for inner in nested_jaxprs(value) {
                if eqn.prim == crate::program::prim::Prim::ShardMap {
                    crate::program::prim::ShardMapParams::read(&eqn.params)?
                        .in_body(|| verify(inner))?;
                } else if let Some(mesh) = crate::program::prim::context_mesh(&eqn.params) {
                    // A `jit` on an explicit mesh: its sharding rules know the axis sizes.
                    crate::axis_env::use_mesh(&mesh, || verify(inner))?;
                } else {
                    verify(inner)?;
                }
            }
        }
    }
    if let Some((index, message)) = crate::program::prim::pending_misuse(jaxpr)
        .or_else(|| crate::program::prim::token_misuse(jaxpr))
    {
        return Err(fail(index.min(jaxpr.eqns.len().saturating_sub(1)), message));
    }
    for atom in &jaxpr.outvars {
        if let Atom::Var(v) = atom
            && !defined.get(v.index()).copied().unwrap_or(false)
        {
            return Err(fail(jaxpr.eqns.len(), "a result is never defined".into()));
        }
    }
    Ok(())
}

/// Where `prim` is one of the collectives that make values reduced or unreduced (or undo it),
/// a result typed with other reduced (`R:`) or unreduced (`U:`) axes than the rule derives.
/// (Other primitives keep or drop these axes less precisely than JAX, so their results are not
/// checked.)
fn reduced_mismatch(
    prim: crate::program::prim::Prim,
    params: &crate::program::params::Params,
    expected: &[crate::aval::ShapedArray],
    written: &[crate::aval::ShapedArray],
) -> Option<String> {
    use crate::program::prim::CollectiveOp as C;
    // A `shard_map` on an explicit mesh types its results by its out specs' reduced and
    // unreduced sets.
    let explicit_shard_map = prim == crate::program::prim::Prim::ShardMap
        && crate::program::prim::on_explicit_mesh(params);
    let checked = explicit_shard_map
        || match prim.collective()? {
            C::Preduced
            | C::VaryUnreducedCast
            | C::ReducedVaryCast
            | C::UnreducedPsum
            | C::AllGatherReduced
            | C::UnreducedReduceScatter => true,
            C::Psum
            | C::Pmax
            | C::Pmin
            | C::AllGather
            | C::ReduceScatter
            | C::Ppermute
            | C::AllToAll
            | C::AxisIndex
            | C::Pvary
            | C::Pbroadcast
            | C::PsumInvariant
            | C::AllGatherInvariant
            | C::RaggedAllToAll
            | C::Psend
            | C::Precv => false,
        };
    let (e, w) = expected
        .iter()
        .zip(written)
        .find(|(e, w)| checked && (e.reduced() != w.reduced() || e.unreduced() != w.unreduced()))?;
    Some(format!(
        "{} gives a result of type {e}, but it is typed {w} (its reduced and unreduced axes \
         differ)",
        prim.name()
    ))
}

/// A result whose printed explicit sharding (`f32[8@pp,4]`) is not the one its primitive's
/// sharding rule derives (primitives without a rule take the written one, so pass); a
/// `shard_map` on an explicit mesh types its results by its out specs. The collectives, inside
/// `shard_map` bodies, split no dimension explicitly.
fn explicit_mismatch(
    prim: crate::program::prim::Prim,
    expected: &[crate::aval::ShapedArray],
    written: &[crate::aval::ShapedArray],
) -> Option<String> {
    if prim.is_collective() {
        return None;
    }
    let (e, w) = expected
        .iter()
        .zip(written)
        .find(|(e, w)| e.explicit_dims() != w.explicit_dims())?;
    Some(format!(
        "{} gives a result split as {} (type {e}), but it is typed {w}; print the type the \
         rule derives, or reshard the value to the sharding wanted",
        prim.name(),
        e.explicit_spec(),
    ))
}

/// The jaxprs a parameter holds: itself, or those inside a tuple (a `cond`'s branches).
fn nested_jaxprs(value: &ParamValue) -> Vec<&ClosedJaxpr> {
    match value {
        ParamValue::Jaxpr(inner) => vec![inner],
        ParamValue::Tuple(items) => items.iter().flat_map(nested_jaxprs).collect(),
        _ => Vec::new(),
    }
}

/// The printed equations around equation `index` (two on each side), the failing one marked.
fn context(jaxpr: &Jaxpr, index: usize) -> String {
    let lines = crate::program::print::print_eqn_lines(jaxpr);
    let lo = index.saturating_sub(2);
    let hi = (index + 3).min(lines.len());
    (lo..hi)
        .map(|i| format!("{} {}", if i == index { ">>" } else { "  " }, lines[i]))
        .collect::<Vec<_>>()
        .join("\n")
}
