//! Whole `treduce` bodies. JAXPP's `treduce` runs its body once per micro-batch and combines
//! every body result over the micro-batches by its reduction; a training step's body returns
//! the loss and gradients of its `value_and_grad_call` and, beside them, metrics computed from
//! the micro-batch, the parameters and the call's loss and auxiliary results (a token count, a
//! squared loss, an accuracy), in any order.
//!
//! [`whole_body`] rewrites such a step into the form the pipeline runs: the metric code moves
//! into the call's loss program, whose auxiliary results it becomes (forward only, never
//! differentiated), and the body returns the call's results `(loss, aux..., metrics...,
//! grads...)`, the loop's results and reductions permuted alike. The loss program then places
//! each metric on a stage holding its inputs (one reading the loss on the last stage, one of
//! parameters on their stage: the metric code reads each parameter through a marker into the
//! stage reading it, so no stage holds a copy; one of the micro-batch alone on the last), computes
//! it per micro-batch in that stage's forward task, and the loop combines it over the
//! micro-batches by its own reduction, pipelined or fused into one program alike. Values the
//! metrics read that the call does not take (e.g. the micro-batch's targets sliced in the body)
//! become extra, non-differentiated arguments of the call.
//!
//! Refused, with a [`LoopBodyError`]: a metric reading a gradient (gradients exist only summed
//! over the micro-batches), a metric recomputing the staged loss (an intermediate value of the
//! loss function, behind a `pipeline_enter_stage` marker). A call result the body drops (the
//! gradients alone, or the loss alone) is still computed by the pipeline's stages: it becomes a
//! hidden result of the loop, combined by `Add`, that the step never reads.

use std::collections::{HashMap, HashSet};

use tessera_ir::prim::{ReduceOp, TreduceParams, treduce_params};
use tessera_ir::trace::{
    Tensor, call_closed, replay_atom, replay_into, trace, value_and_grad_with_aux_call,
};
use tessera_ir::{Atom, ClosedJaxpr, Eqn, Jaxpr, ParamValue, Prim, Var};

use super::analyze::{read_call, the_call};
use super::config;
use super::retrace::keep_other_params;
use crate::driver::DriverError;

/// Why `mpmd_jit` cannot run a `treduce` body's results beside its `value_and_grad_call`.
#[derive(Debug, thiserror::Error)]
pub enum LoopBodyError {
    /// A body result reads a gradient of the call.
    #[error(
        "result {result} of the treduce body reads gradient {gradient} of its value_and_grad_call; \
         the body runs once per micro-batch and the gradients exist only summed over the \
         micro-batches: compute it after the loop, from the loop's summed gradient"
    )]
    ReadsGradient {
        /// The body result's position.
        result: usize,
        /// The gradient's position among the call's gradients.
        gradient: usize,
    },
    /// A body result reads an intermediate value of the staged loss function.
    #[error(
        "result {result} of the treduce body reads `{value}` ({aval}), an intermediate value of \
         the staged loss function (its code enters pipeline stage {stage}) that is not a result \
         of the value_and_grad_call; return it from the loss as an auxiliary result \
         (value_and_grad_with_aux_call) or compute the metric from the call's results"
    )]
    LossIntermediate {
        /// The body result's position.
        result: usize,
        /// The value, as the body names it.
        value: String,
        /// Its type.
        aval: String,
        /// The stage its marker enters.
        stage: i64,
    },
}

/// The step with its loop body rewritten so that the body's results are exactly its
/// `value_and_grad_call`'s, `(loss, aux..., metrics..., grads...)` (see the module docs);
/// `None` when they already are, or when the body holds no single call (`read_body` reads or
/// refuses those).
pub(super) fn whole_body(
    step: &ClosedJaxpr,
    index: usize,
) -> Result<Option<ClosedJaxpr>, DriverError> {
    let eqn = &step.jaxpr.eqns[index];
    let p = TreduceParams::read(&eqn.params).map_err(|e| config(e.to_string()))?;
    let body = &p.body.jaxpr;
    let Some(at) = the_call(body) else {
        return Ok(None);
    };
    let call = &body.eqns[at];
    let (primal, argnums) = read_call(call)?;
    let values = primal.jaxpr.outvars.len();
    if call.outputs.len() < values || body.outvars.len() != p.ops.len() {
        return Ok(None); // malformed: `read_body` and `check_ops` name it
    }
    // Each call result's first position among the body's results; the rest are metrics.
    let mut claimed: Vec<Option<usize>> = vec![None; call.outputs.len()];
    let mut metrics = Vec::new();
    for (i, a) in body.outvars.iter().enumerate() {
        let k = match a {
            Atom::Var(v) => call.outputs.iter().position(|o| o == v),
            Atom::Lit(_) => None,
        };
        match k {
            Some(k) if claimed[k].is_none() => claimed[k] = Some(i),
            _ => metrics.push(i),
        }
    }
    let in_order = claimed.iter().enumerate().all(|(k, c)| *c == Some(k));
    // Code reading the call's results that no body result needs is dropped by the rewrite.
    let read_by_others = body.eqns.iter().enumerate().any(|(i, e)| {
        i != at
            && e.inputs
                .iter()
                .any(|x| matches!(x, Atom::Var(v) if call.outputs.contains(v)))
    });
    if metrics.is_empty() && in_order && !read_by_others {
        return Ok(None);
    }
    // A call result the body drops still comes out of the pipeline (its stages compute it):
    // it becomes a hidden result of the loop, combined by `Add` and read by nothing after.
    let dropped: Vec<usize> = (0..claimed.len())
        .filter(|&k| claimed[k].is_none())
        .collect();
    let mut all_ops = p.ops.clone();
    let mut rewritten = step.clone();
    let mut outputs = eqn.outputs.clone();
    for &k in &dropped {
        claimed[k] = Some(all_ops.len());
        all_ops.push(ReduceOp::Add);
        let aval = body.aval(call.outputs[k]).clone();
        outputs.push(rewritten.jaxpr.new_var(aval));
    }
    let claimed: Vec<usize> = claimed.into_iter().flatten().collect();
    let after = after_call(body, at, values, &metrics)?;
    let extras = extra_inputs(body, call, &after, &metrics);
    let metric_atoms: Vec<Atom> = metrics.iter().map(|&i| body.outvars[i].clone()).collect();
    let metric_code = MetricCode {
        after: &after,
        extras: &extras,
        metrics: &metric_atoms,
        argnums: &argnums,
    };
    let loss = metric_loss(body, call, &primal, &metric_code)?;
    // The body keeps the code computing the call's arguments, old and new.
    let extra_atoms: Vec<Atom> = extras.iter().map(|&v| Atom::Var(v)).collect();
    let keep = needed_by(body, call.inputs.iter().chain(&extra_atoms));
    let new_body = trace(&body.in_avals(), |args| {
        let Some(anchor) = args.first().cloned() else {
            return Vec::new();
        };
        let mut env: HashMap<Var, Tensor> =
            body.invars.iter().copied().zip(args.to_vec()).collect();
        for (i, e) in body.eqns.iter().enumerate() {
            if keep.contains(&i) {
                replay_into(&mut env, body, e, &anchor);
            }
        }
        let mut inputs: Vec<Tensor> = call
            .inputs
            .iter()
            .map(|a| replay_atom(&env, &anchor, a))
            .collect();
        inputs.extend(
            extras
                .iter()
                .map(|v| replay_atom(&env, &anchor, &Atom::Var(*v))),
        );
        value_and_grad_with_aux_call(&loss, &argnums, &inputs.iter().collect::<Vec<_>>())
    })
    .map_err(|e| {
        config(format!(
            "the treduce body with its metrics in the loss: {e}"
        ))
    })?;
    let new_body = tessera_ir::passes::eliminate_dead_code(&new_body);
    // The body's result positions in the new order.
    let order: Vec<usize> = claimed[..values]
        .iter()
        .chain(&metrics)
        .chain(&claimed[values..])
        .copied()
        .collect();
    let ops: Vec<ReduceOp> = order.iter().map(|&i| all_ops[i]).collect();
    let params = keep_other_params(
        treduce_params(
            new_body,
            p.axis,
            p.length,
            p.num_invariants,
            &ops,
            &p.schedule,
        ),
        eqn,
    );
    if outputs.len() != order.len() {
        return Err(config(format!(
            "the treduce has {} results for its body's {}",
            outputs.len(),
            order.len()
        )));
    }
    rewritten.jaxpr.eqns[index] = Eqn {
        prim: Prim::Treduce,
        params,
        inputs: eqn.inputs.clone(),
        outputs: order.iter().map(|&i| outputs[i]).collect(),
    };
    tessera_ir::verify(&rewritten).map_err(|e| config(e.to_string()))?;
    Ok(Some(rewritten))
}

/// The body's equations computing the metrics and not the call's arguments (in body order),
/// checked: no metric reads a gradient or enters a pipeline stage.
fn after_call(
    body: &Jaxpr,
    at: usize,
    values: usize,
    metrics: &[usize],
) -> Result<Vec<usize>, DriverError> {
    let call = &body.eqns[at];
    // For each value computed from the call's results, the first gradient it reads, if any.
    let mut from_call: HashMap<Var, Option<usize>> = call
        .outputs
        .iter()
        .enumerate()
        .map(|(k, &v)| (v, k.checked_sub(values)))
        .collect();
    for e in body.eqns.iter().skip(at + 1) {
        let read: Vec<Option<usize>> = e
            .inputs
            .iter()
            .filter_map(|a| match a {
                Atom::Var(v) => from_call.get(v).copied(),
                Atom::Lit(_) => None,
            })
            .collect();
        if !read.is_empty() {
            let gradient = read.into_iter().flatten().min();
            from_call.extend(e.outputs.iter().map(|&v| (v, gradient)));
        }
    }
    // The metric code: what the metrics read that the call does not (the rest is dead or the
    // loss's own code, staged with it).
    let loss_code = needed_by(body, call.inputs.iter());
    let needed = needed_by(body, metrics.iter().map(|&r| &body.outvars[r]));
    let after: Vec<usize> = (0..body.eqns.len())
        .filter(|i| *i != at && needed.contains(i) && !loss_code.contains(i))
        .collect();
    for &result in metrics {
        let Atom::Var(v) = &body.outvars[result] else {
            continue;
        };
        if let Some(Some(gradient)) = from_call.get(v) {
            return Err(LoopBodyError::ReadsGradient {
                result,
                gradient: *gradient,
            }
            .into());
        }
        let reads = needed_by(body, std::iter::once(&body.outvars[result]));
        let mut reads: Vec<usize> = reads
            .into_iter()
            .filter(|i| *i != at && !loss_code.contains(i))
            .collect();
        reads.sort_unstable();
        if let Some((value, stage)) = reads.iter().find_map(|&i| marker(&body.eqns[i])) {
            let aval = body.aval(value).to_string();
            return Err(LoopBodyError::LossIntermediate {
                result,
                value: format!("%{}", value.0),
                aval,
                stage,
            }
            .into());
        }
    }
    Ok(after)
}

/// The indices of the body's equations that `atoms` read, transitively.
fn needed_by<'a>(body: &Jaxpr, atoms: impl Iterator<Item = &'a Atom>) -> HashSet<usize> {
    let producer: HashMap<Var, usize> = body
        .eqns
        .iter()
        .enumerate()
        .flat_map(|(i, e)| e.outputs.iter().map(move |&v| (v, i)))
        .collect();
    let mut stack: Vec<Var> = atoms
        .filter_map(|a| match a {
            Atom::Var(v) => Some(*v),
            Atom::Lit(_) => None,
        })
        .collect();
    let mut needed = HashSet::new();
    while let Some(v) = stack.pop() {
        if let Some(&i) = producer.get(&v)
            && needed.insert(i)
        {
            stack.extend(body.eqns[i].inputs.iter().filter_map(|a| match a {
                Atom::Var(v) => Some(*v),
                Atom::Lit(_) => None,
            }));
        }
    }
    needed
}

/// The value a stage marker in `e` (or in a program it calls) produces, and its stage.
fn marker(e: &Eqn) -> Option<(Var, i64)> {
    fn holds(params: &tessera_ir::Params) -> Option<i64> {
        params.jaxprs().iter().find_map(|j| {
            j.jaxpr.eqns.iter().find_map(|e| match e.prim {
                Prim::PipelineEnterStage => Some(stage_of(&e.params)),
                _ => holds(&e.params),
            })
        })
    }
    let stage = match e.prim {
        Prim::PipelineEnterStage => Some(stage_of(&e.params)),
        _ => holds(&e.params),
    }?;
    e.outputs.first().map(|&v| (v, stage))
}

fn stage_of(params: &tessera_ir::Params) -> i64 {
    params
        .get("stage")
        .and_then(ParamValue::as_int)
        .unwrap_or_default()
}

/// The body values the metric code reads that neither it nor the call computes and the call
/// does not take: extra arguments of the call, in first-read order.
fn extra_inputs(body: &Jaxpr, call: &Eqn, after: &[usize], metrics: &[usize]) -> Vec<Var> {
    let computed: HashSet<Var> = after
        .iter()
        .flat_map(|&i| body.eqns[i].outputs.iter().copied())
        .chain(call.outputs.iter().copied())
        .collect();
    let taken = |v: &Var| call.inputs.contains(&Atom::Var(*v));
    let reads = after
        .iter()
        .flat_map(|&i| body.eqns[i].inputs.iter())
        .chain(metrics.iter().map(|&r| &body.outvars[r]));
    let mut extras = Vec::new();
    for a in reads {
        if let Atom::Var(v) = a
            && !computed.contains(v)
            && !taken(v)
            && !extras.contains(v)
        {
            extras.push(*v);
        }
    }
    extras
}

/// The metric code of a body: what [`metric_loss`] adds to the call's loss program.
struct MetricCode<'a> {
    /// The body's equations computing the metrics, in body order.
    after: &'a [usize],
    /// The body values they read that the call does not take.
    extras: &'a [Var],
    /// The metrics.
    metrics: &'a [Atom],
    /// The call's differentiated arguments.
    argnums: &'a [usize],
}

/// The call's loss program with the metrics as more auxiliary results: arguments the call's,
/// then `extras`; results the loss, its auxiliary results, then `metrics`. The metric code
/// reads each parameter through a marker into the (first) stage reading it in the loss, so a
/// metric of parameters runs where they live (by default code reading only arguments would
/// run on the last stage, which would then hold a copy of the parameter, tied).
fn metric_loss(
    body: &Jaxpr,
    call: &Eqn,
    primal: &ClosedJaxpr,
    code: &MetricCode<'_>,
) -> Result<ClosedJaxpr, DriverError> {
    let mut avals = primal.jaxpr.in_avals();
    avals.extend(code.extras.iter().map(|&v| body.aval(v).clone()));
    let n = primal.jaxpr.invars.len();
    let stages = param_stages(primal, code.argnums);
    let read: HashSet<Var> = code
        .after
        .iter()
        .flat_map(|&i| body.eqns[i].inputs.iter())
        .chain(code.metrics)
        .filter_map(|a| match a {
            Atom::Var(v) => Some(*v),
            Atom::Lit(_) => None,
        })
        .collect();
    trace(&avals, |args| {
        let Some(anchor) = args.first().cloned() else {
            return Vec::new();
        };
        let mut outs = call_closed(primal, &args[..n].iter().collect::<Vec<_>>());
        let mut env: HashMap<Var, Tensor> = HashMap::new();
        for (j, (a, arg)) in call.inputs.iter().zip(args).enumerate() {
            if let Atom::Var(v) = a
                && read.contains(v)
                && !env.contains_key(v)
            {
                let value = match stages.get(&j) {
                    Some(&s) => arg.enter_stage(s as i64),
                    None => arg.clone(),
                };
                env.insert(*v, value);
            }
        }
        env.extend(code.extras.iter().copied().zip(args[n..].iter().cloned()));
        env.extend(call.outputs.iter().copied().zip(outs.iter().cloned()));
        for &i in code.after {
            replay_into(&mut env, body, &body.eqns[i], &anchor);
        }
        outs.extend(code.metrics.iter().map(|a| replay_atom(&env, &anchor, a)));
        outs
    })
    .map_err(|e| config(format!("the loss with the treduce body's metrics: {e}")))
}

/// For each differentiated argument of a loss split into several stages, the first stage
/// reading it (none when the loss does not split: the partitioner then names the problem).
fn param_stages(primal: &ClosedJaxpr, argnums: &[usize]) -> HashMap<usize, usize> {
    let flat = tessera_ir::passes::inline_calls(primal);
    let Ok(split) = tessera_ir::passes::split_stages(&flat) else {
        return HashMap::new();
    };
    if split.stages.len() < 2 {
        return HashMap::new();
    }
    let mut stages = HashMap::new();
    for (s, stage) in split.stages.iter().enumerate() {
        for input in &stage.inputs {
            if let tessera_ir::passes::StageInput::Arg(k) = input
                && argnums.contains(k)
            {
                stages.entry(*k).or_insert(s);
            }
        }
    }
    stages
}
