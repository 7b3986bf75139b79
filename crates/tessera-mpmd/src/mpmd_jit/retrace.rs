//! What the step rewrites before pipelining (`hoist.rs`, `stacked_grads.rs`, `twice.rs`,
//! `whole_body.rs`) share: a rewritten loop keeps the parameters of the loop it replaces that
//! `treduce_params` does not set, and a step is traced again around its rewritten loop.

use std::collections::HashMap;

use tessera_ir::trace::{Tensor, replay, replay_atom, replay_into, trace};
use tessera_ir::{ClosedJaxpr, Eqn, Params, Var};

/// `params` with every parameter of `old` it lacks (`old`'s other attributes of the loop).
pub(super) fn keep_other_params(mut params: Params, old: &Eqn) -> Params {
    for (name, value) in old.params.entries() {
        if params.get(name).is_none() {
            params = params.with(name, value.clone());
        }
    }
    params
}

/// `step` traced again with its equation at `index` replaced by `looped`: the code before it
/// replayed, `inputs` giving `looped`'s operands from the old equation's operands (and a tensor
/// of the trace to anchor new values on), `outputs` turning `looped`'s results into the old
/// equation's, the code after it replayed.
pub(super) fn retrace_loop(
    step: &ClosedJaxpr,
    index: usize,
    looped: &Eqn,
    inputs: impl FnOnce(&[Tensor], &Tensor) -> Vec<Tensor>,
    outputs: impl FnOnce(Vec<Tensor>) -> Vec<Tensor>,
) -> tessera_ir::Result<ClosedJaxpr> {
    let jaxpr = &step.jaxpr;
    let eqn = &jaxpr.eqns[index];
    trace(&jaxpr.in_avals(), |args| {
        let Some(anchor) = args.first().cloned() else {
            return Vec::new();
        };
        let mut env: HashMap<Var, Tensor> = jaxpr
            .invars
            .iter()
            .copied()
            .zip(args.iter().cloned())
            .collect();
        for e in &jaxpr.eqns[..index] {
            replay_into(&mut env, jaxpr, e, &anchor);
        }
        let operands: Vec<Tensor> = eqn
            .inputs
            .iter()
            .map(|a| replay_atom(&env, &anchor, a))
            .collect();
        let given = inputs(&operands, &anchor);
        let outs = outputs(replay(looped, jaxpr, &given, &anchor));
        env.extend(eqn.outputs.iter().copied().zip(outs));
        for e in &jaxpr.eqns[index + 1..] {
            replay_into(&mut env, jaxpr, e, &anchor);
        }
        jaxpr
            .outvars
            .iter()
            .map(|a| replay_atom(&env, &anchor, a))
            .collect()
    })
}
