//! Constant folding of literals: an equation whose operands are all literals and whose single
//! result is a scalar (not a PRNG key, which has no literal form) is evaluated now, and its uses
//! read the literal instead.

use crate::array::Array;
use crate::jaxpr::{Atom, ClosedJaxpr, Literal};
use crate::prim::Prim;
use tessera_interp::PrimEval;

use crate::rewrite::Rebuild;

/// Folds scalar computations on literals.
pub fn fold_constants(closed: &ClosedJaxpr) -> ClosedJaxpr {
    let jaxpr = &closed.jaxpr;
    let mut rb = Rebuild::new(jaxpr);
    for eqn in &jaxpr.eqns {
        let inputs: Vec<Atom> = eqn.inputs.iter().map(|a| rb.atom(a)).collect();
        let literals: Option<Vec<Array>> = inputs
            .iter()
            .map(|a| match a {
                Atom::Lit(l) => Some(l.to_array()),
                Atom::Var(_) => None,
            })
            .collect();
        let out_aval = (eqn.outputs.len() == 1).then(|| jaxpr.aval(eqn.outputs[0]).clone());
        let foldable = !matches!(eqn.prim, Prim::Jit | Prim::Checkpoint | Prim::ShardMap)
            && !eqn.prim.is_collective()
            && !inputs.is_empty();
        if let (true, Some(args), Some(aval)) = (
            foldable,
            literals,
            out_aval.filter(|a| a.rank() == 0 && !a.dtype.is_key()),
        ) && let Ok(mut out) = eqn
            .prim
            .eval(&eqn.params, &args, std::slice::from_ref(&aval))
            && let Some(value) = out.pop().and_then(|a| a.first_elem())
        {
            rb.map
                .insert(eqn.outputs[0], Atom::Lit(Literal { value, aval }));
            continue;
        }
        rb.copy(eqn);
    }
    ClosedJaxpr {
        jaxpr: rb.finish(),
        consts: closed.consts.clone(),
    }
}
