//! A loop invariant that the body's `value_and_grad_call` differentiates at several argument
//! positions (`loss(w, w, x)` with `argnums = (0, 1)`): JAX returns one gradient per position,
//! each the partial derivative with respect to that argument alone. The pipeline holds one
//! parameter, and one gradient accumulator, per differentiated loop invariant, so
//! [`split_repeated`] gives every repeated position a loop invariant of its own: a `copy` of the
//! value computed before the loop (`analyze::LossInput::ComputedParam`, placed on the stages
//! reading it like any value the step computes), which the call reads at that position.

use tessera_ir::prim::{TreduceParams, treduce_params};
use tessera_ir::{Atom, ClosedJaxpr, Eqn, Params, Prim, Var};

use super::analyze::{read_call, the_call};
use super::config;
use super::retrace::keep_other_params;
use crate::driver::DriverError;

/// The step with the loop at `index` rewritten so that no loop invariant is differentiated at
/// two argument positions of the body's call (see the module docs); `None` when none is.
pub(super) fn split_repeated(
    step: &ClosedJaxpr,
    index: usize,
) -> Result<Option<ClosedJaxpr>, DriverError> {
    let Some(eqn) = step.jaxpr.eqns.get(index) else {
        return Ok(None);
    };
    let p = TreduceParams::read(&eqn.params).map_err(|e| config(e.to_string()))?;
    let body = &p.body.jaxpr;
    let Some(at) = the_call(body) else {
        return Ok(None);
    };
    let (_, argnums) = read_call(&body.eqns[at])?;
    let repeated = repeated_positions(&body.eqns[at], &body.invars, p.num_invariants, &argnums);
    if repeated.is_empty() {
        return Ok(None);
    }
    // The body: one more invariant per repeated position, read there by the call.
    let mut new_body = p.body.clone();
    let mut fresh: Vec<Var> = Vec::new();
    for &(a, b) in &repeated {
        let aval = body.aval(body.invars[b]).clone();
        let v = new_body.jaxpr.new_var(aval);
        new_body.jaxpr.eqns[at].inputs[a] = Atom::Var(v);
        fresh.push(v);
    }
    let n = p.num_invariants;
    new_body.jaxpr.invars.splice(n..n, fresh.iter().copied());
    // The step: a copy of each repeated invariant's operand before the loop.
    let mut rewritten = step.clone();
    let mut copies: Vec<Eqn> = Vec::new();
    let mut operands: Vec<Atom> = Vec::new();
    for &(_, b) in &repeated {
        let aval = body.aval(body.invars[b]).clone();
        let v = rewritten.jaxpr.new_var(aval);
        copies.push(Eqn {
            prim: Prim::Copy,
            params: Params::new(),
            inputs: vec![eqn.inputs[b].clone()],
            outputs: vec![v],
        });
        operands.push(Atom::Var(v));
    }
    let params = keep_other_params(
        treduce_params(
            new_body,
            p.axis,
            p.length,
            n + repeated.len(),
            &p.ops,
            &p.schedule,
        ),
        eqn,
    );
    let mut inputs = eqn.inputs.clone();
    inputs.splice(n..n, operands);
    let looped = Eqn {
        prim: Prim::Treduce,
        params,
        inputs,
        outputs: eqn.outputs.clone(),
    };
    rewritten
        .jaxpr
        .eqns
        .splice(index..=index, copies.into_iter().chain([looped]));
    tessera_ir::verify(&rewritten).map_err(|e| {
        config(format!(
            "the step with a repeated differentiated argument split: {e}"
        ))
    })?;
    Ok(Some(rewritten))
}

/// `(argument position, loop invariant)` for each differentiated argument of `call` that reads
/// a loop invariant an earlier differentiated argument already reads.
fn repeated_positions(
    call: &Eqn,
    invars: &[Var],
    num_invariants: usize,
    argnums: &[usize],
) -> Vec<(usize, usize)> {
    let invariants = &invars[..num_invariants.min(invars.len())];
    let mut seen: Vec<usize> = Vec::new();
    let mut repeated = Vec::new();
    for &a in argnums {
        let Some(Atom::Var(v)) = call.inputs.get(a) else {
            continue;
        };
        let Some(b) = invariants.iter().position(|i| i == v) else {
            continue;
        };
        if seen.contains(&b) {
            repeated.push((a, b));
        } else {
            seen.push(b);
        }
    }
    repeated
}
