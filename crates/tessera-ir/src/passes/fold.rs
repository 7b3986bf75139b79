//! Constant folding: an equation whose operands are all literals and whose single result is
//! rank 0 is evaluated with the interpreter and its result becomes a literal.

use super::Subst;
use crate::interp::{Array, literal_array};
use crate::ir::{Atom, Jaxpr, Literal, Scalar};
use crate::prims::{Primitive, eval};

/// Evaluates scalar equations of literals and substitutes their results.
pub fn fold_constants(j: &Jaxpr) -> Jaxpr {
    let mut subst = Subst::default();
    let mut eqns = Vec::new();
    for e in &j.eqns {
        let mut e = e.clone();
        subst.apply_all(&mut e.inputs);
        if let Some(lit) = fold_one(j, &e) {
            subst.insert(e.outputs[0], Atom::Lit(lit));
        } else {
            eqns.push(e);
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

fn fold_one(j: &Jaxpr, e: &crate::ir::Eqn) -> Option<Literal> {
    let [out] = e.outputs.as_slice() else {
        return None;
    };
    let aval = j.aval(*out)?;
    if aval.ndim() != 0
        || matches!(
            e.prim,
            Primitive::Jit { .. } | Primitive::PipelineEnterStage { .. }
        )
    {
        return None;
    }
    let args: Option<Vec<Array>> = e
        .inputs
        .iter()
        .map(|a| match a {
            Atom::Lit(l) => Some(literal_array(l)),
            Atom::Var(_) => None,
        })
        .collect();
    let args = args?;
    let r = eval(&e.prim, &args).ok()?.into_iter().next()?;
    let x = r.to_f64_vec().first().copied()?;
    let value = if aval.dtype == crate::types::DType::Bool {
        Scalar::Bool(x != 0.0)
    } else if aval.dtype.is_float() {
        Scalar::Float(x)
    } else {
        Scalar::Int(r.widen().to_i64().iter().next().copied()?)
    };
    Some(Literal {
        value,
        aval: aval.clone(),
    })
}
