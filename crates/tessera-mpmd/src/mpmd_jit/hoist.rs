//! Differentiated values the loop body computes from loop invariants alone (`w16 =
//! w.astype(bf16)` or `w * mask` written inside the body): the same value for every
//! micro-batch, so [`hoist`] moves their code before the loop, where they become loop
//! invariants the step computes (`analyze::LossInput::ComputedParam`): placed on the groups of
//! the stages reading them like parameters, their gradient (with respect to the value, as JAX's
//! `value_and_grad` of its argument) accumulated over the micro-batches. A differentiated value
//! that reads the micro-batch (or a stage marker) stays in the body: its value differs per
//! micro-batch, so `stacked_grads.rs` differentiates a zero probe added to it instead.

use std::collections::{HashMap, HashSet};

use tessera_ir::prim::{TreduceParams, treduce_params};
use tessera_ir::trace::{Tensor, replay_atom, replay_into, trace};
use tessera_ir::{Atom, ClosedJaxpr, Eqn, Jaxpr, Prim, Var};

use super::analyze::{is_value_and_grad, read_call, the_call};
use super::config;
use super::retrace::{keep_other_params, retrace_loop};
use crate::driver::DriverError;

/// The step with the loop at `index` rewritten so that each differentiated argument of its
/// `value_and_grad_call` computed in the body from loop invariants alone is computed before the
/// loop and passed as one more loop invariant; `None` when there is none to move.
pub(super) fn hoist(step: &ClosedJaxpr, index: usize) -> Result<Option<ClosedJaxpr>, DriverError> {
    let jaxpr = &step.jaxpr;
    let Some(eqn) = jaxpr.eqns.get(index) else {
        return Ok(None);
    };
    if !jaxpr.constvars.is_empty() {
        return Ok(None);
    }
    let p = TreduceParams::read(&eqn.params).map_err(|e| config(e.to_string()))?;
    let body = &p.body.jaxpr;
    let Some(at) = the_call(body) else {
        return Ok(None);
    };
    let call = &body.eqns[at];
    let (_, argnums) = read_call(call)?;
    let producer: HashMap<Var, usize> = body
        .eqns
        .iter()
        .enumerate()
        .flat_map(|(i, e)| e.outputs.iter().map(move |&v| (v, i)))
        .collect();
    let invariants: HashSet<Var> = body.invars[..p.num_invariants.min(body.invars.len())]
        .iter()
        .copied()
        .collect();
    let mut moved: Vec<Var> = Vec::new();
    let mut code: HashSet<usize> = HashSet::new();
    for &a in &argnums {
        let Some(Atom::Var(v)) = call.inputs.get(a) else {
            continue;
        };
        if body.invars.contains(v) || moved.contains(v) {
            continue;
        }
        if let Some(needed) = invariant_code(body, &producer, &invariants, *v) {
            moved.push(*v);
            code.extend(needed);
        }
    }
    if moved.is_empty() {
        return Ok(None);
    }
    let mut code: Vec<usize> = code.into_iter().collect();
    code.sort_unstable();
    let new_body = body_reading(p.body, p.num_invariants, &moved)?;
    let num_invariants = p.num_invariants + moved.len();
    let params = keep_other_params(
        treduce_params(
            new_body,
            p.axis,
            p.length,
            num_invariants,
            &p.ops,
            &p.schedule,
        ),
        eqn,
    );
    let looped = Eqn {
        prim: Prim::Treduce,
        params,
        inputs: Vec::new(),
        outputs: eqn.outputs.clone(),
    };
    let inputs = |operands: &[Tensor], anchor: &Tensor| {
        // The moved code, from the loop's invariant operands.
        let mut inner: HashMap<Var, Tensor> = body
            .invars
            .iter()
            .copied()
            .zip(operands.iter().cloned())
            .take(p.num_invariants)
            .collect();
        for &i in &code {
            replay_into(&mut inner, body, &body.eqns[i], anchor);
        }
        let mut inputs: Vec<Tensor> = operands[..p.num_invariants].to_vec();
        inputs.extend(
            moved
                .iter()
                .map(|v| replay_atom(&inner, anchor, &Atom::Var(*v))),
        );
        inputs.extend(operands[p.num_invariants..].iter().cloned());
        inputs
    };
    let rewritten = retrace_loop(step, index, &looped, inputs, |outs| outs).map_err(|e| {
        config(format!(
            "the step with loop-invariant code moved before the loop: {e}"
        ))
    })?;
    tessera_ir::verify(&rewritten).map_err(|e| config(e.to_string()))?;
    Ok(Some(rewritten))
}

/// The body's equations computing `v` when they read loop invariants alone and enter no
/// pipeline stage (`None` otherwise).
fn invariant_code(
    body: &Jaxpr,
    producer: &HashMap<Var, usize>,
    invariants: &HashSet<Var>,
    v: Var,
) -> Option<HashSet<usize>> {
    let mut needed = HashSet::new();
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match producer.get(&v) {
            Some(&i) => {
                if !needed.insert(i) {
                    continue;
                }
                let e = &body.eqns[i];
                if matches!(e.prim, Prim::PipelineEnterStage) || is_value_and_grad(e) {
                    return None;
                }
                stack.extend(e.inputs.iter().filter_map(|a| match a {
                    Atom::Var(v) => Some(*v),
                    Atom::Lit(_) => None,
                }));
            }
            None if invariants.contains(&v) => {}
            // A sliced argument (the micro-batch), or a captured value.
            None => return None,
        }
    }
    Some(needed)
}

/// `body` taking the values `moved` as more loop invariants (after its `num_invariants`), in
/// place of the code computing them.
fn body_reading(
    body: &ClosedJaxpr,
    num_invariants: usize,
    moved: &[Var],
) -> Result<ClosedJaxpr, DriverError> {
    let jaxpr = &body.jaxpr;
    let mut avals = jaxpr.in_avals();
    let sliced = avals.split_off(num_invariants.min(avals.len()));
    avals.extend(moved.iter().map(|&v| jaxpr.aval(v).clone()));
    avals.extend(sliced);
    let n = num_invariants + moved.len();
    let program = trace(&avals, |args| {
        let Some(anchor) = args.first().cloned() else {
            return Vec::new();
        };
        let given = args[..num_invariants].iter().chain(&args[n..]).cloned();
        let mut env: HashMap<Var, Tensor> = jaxpr.invars.iter().copied().zip(given).collect();
        let values: Vec<(Var, Tensor)> = moved
            .iter()
            .copied()
            .zip(args[num_invariants..n].iter().cloned())
            .collect();
        env.extend(values.iter().cloned());
        for e in &jaxpr.eqns {
            // The moved values' own code is dead here; the loop invariants stand in for it.
            if e.outputs.iter().all(|o| moved.contains(o)) {
                continue;
            }
            replay_into(&mut env, jaxpr, e, &anchor);
            env.extend(values.iter().cloned());
        }
        jaxpr
            .outvars
            .iter()
            .map(|a| replay_atom(&env, &anchor, a))
            .collect()
    })
    .map_err(|e| config(format!("the loop body reading its moved invariants: {e}")))?;
    Ok(tessera_ir::passes::eliminate_dead_code(&program))
}
