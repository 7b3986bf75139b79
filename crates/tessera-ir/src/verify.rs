//! The verifier. Invariants of a well-formed jaxpr:
//!
//! 1. every variable used is in the jaxpr's arena;
//! 2. SSA: each variable is bound once (constvar, invar or equation result);
//! 3. every use comes after its definition;
//! 4. literals are rank 0;
//! 5. each equation's result avals equal (dtype and shape) what the primitive's shape rule gives
//!    for its operands;
//! 6. nested jaxprs satisfy all of this too, and a closed jaxpr has one constant of the right
//!    type per constvar.
//!
//! Errors name the equation and show it with its printed neighbours (±3 equations).

use crate::ir::{Atom, ClosedJaxpr, Jaxpr, Var};
use crate::prims::{Primitive, abstract_eval};
use crate::text::print::eqn_texts;
use crate::types::ShapedArray;

/// The jaxpr breaks an invariant.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}{}", context_text(.eqn, .context))]
pub struct VerifyError {
    /// What is wrong.
    pub message: String,
    /// The index of the offending equation, if one is to blame.
    pub eqn: Option<usize>,
    /// The printed equations around it (the offending one marked with `>>`).
    pub context: String,
}

fn context_text(eqn: &Option<usize>, context: &str) -> String {
    match eqn {
        Some(i) => format!(" (equation {i}):\n{context}"),
        None => String::new(),
    }
}

fn fail(j: &Jaxpr, eqn: Option<usize>, message: String) -> VerifyError {
    let context = match eqn {
        Some(i) => {
            let texts = eqn_texts(j);
            let lo = i.saturating_sub(3);
            let hi = (i + 4).min(texts.len());
            (lo..hi)
                .map(|k| {
                    format!(
                        "{}{}",
                        if k == i { ">>" } else { "  " },
                        texts[k].trim_start_matches("  ")
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        }
        None => String::new(),
    };
    VerifyError {
        message,
        eqn,
        context,
    }
}

/// Verifies a closed jaxpr (see the module docs for the invariants).
pub fn verify_closed(cj: &ClosedJaxpr) -> Result<(), VerifyError> {
    let j = &cj.jaxpr;
    if cj.consts.len() != j.constvars.len() {
        return Err(fail(
            j,
            None,
            format!(
                "{} constvars but {} constants",
                j.constvars.len(),
                cj.consts.len()
            ),
        ));
    }
    for (v, c) in j.constvars.iter().zip(&cj.consts) {
        if j.aval(*v).is_none_or(|a| !a.same_type(&c.aval())) {
            return Err(fail(
                j,
                None,
                format!(
                    "constant of type {} bound to constvar {v} of another type",
                    c.aval()
                ),
            ));
        }
    }
    verify_jaxpr(j)
}

/// Verifies an open jaxpr (see the module docs for the invariants).
pub fn verify_jaxpr(j: &Jaxpr) -> Result<(), VerifyError> {
    let mut defined = vec![false; j.vars.len()];
    for v in j.constvars.iter().chain(&j.invars) {
        define(j, &mut defined, *v, None)?;
    }
    for (i, e) in j.eqns.iter().enumerate() {
        let ins = e
            .inputs
            .iter()
            .map(|a| check_use(j, &defined, a, Some(i)))
            .collect::<Result<Vec<_>, _>>()?;
        if let Primitive::Jit { jaxpr, .. } = &e.prim {
            verify_closed(jaxpr)
                .map_err(|err| fail(j, Some(i), format!("in the body of this call: {err}")))?;
        }
        let want = abstract_eval(&e.prim, &ins).map_err(|err| fail(j, Some(i), err.to_string()))?;
        if want.len() != e.outputs.len() {
            let m = format!(
                "{} results, the primitive gives {}",
                e.outputs.len(),
                want.len()
            );
            return Err(fail(j, Some(i), m));
        }
        for (v, w) in e.outputs.iter().zip(&want) {
            if let Some(a) = j.aval(*v)
                && !a.same_type(w)
            {
                let m = format!("a result has type {a} but the shape rule gives {w}");
                return Err(fail(j, Some(i), m));
            }
            define(j, &mut defined, *v, Some(i))?;
        }
    }
    for a in &j.outvars {
        check_use(j, &defined, a, None)?;
    }
    Ok(())
}

fn define(j: &Jaxpr, defined: &mut [bool], v: Var, eqn: Option<usize>) -> Result<(), VerifyError> {
    match defined.get_mut(v.index()) {
        None => Err(fail(j, eqn, format!("variable {v} is not in the arena"))),
        Some(true) => Err(fail(j, eqn, format!("variable {v} is bound twice"))),
        Some(d) => {
            *d = true;
            Ok(())
        }
    }
}

fn check_use(
    j: &Jaxpr,
    defined: &[bool],
    a: &Atom,
    eqn: Option<usize>,
) -> Result<ShapedArray, VerifyError> {
    match a {
        Atom::Lit(l) if l.aval.ndim() != 0 => Err(fail(
            j,
            eqn,
            format!("literal of type {} is not rank 0", l.aval),
        )),
        Atom::Lit(l) => Ok(l.aval.clone()),
        Atom::Var(v) => match (j.aval(*v), defined.get(v.index())) {
            (Some(a), Some(true)) => Ok(a.clone()),
            (Some(_), _) => Err(fail(
                j,
                eqn,
                format!("variable {v} is used before it is defined"),
            )),
            (None, _) => Err(fail(j, eqn, format!("variable {v} is not in the arena"))),
        },
    }
}
