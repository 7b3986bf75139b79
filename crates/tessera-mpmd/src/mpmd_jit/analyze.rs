//! Reading a step for `mpmd_jit`: its one `treduce` and the step code computing its operands
//! (run before the loop on a group's devices, `before.rs`, e.g. `treduce_i`'s micro-batch
//! indices), the loop body
//! (code preparing the arguments of one `value_and_grad_call`, which may return auxiliary
//! results), the loss program the pipeline runs, and the code after the loop as a program of
//! its own.

use std::collections::HashMap;

use tessera_ir::prim::{ReduceOp, TreduceParams};
use tessera_ir::trace::{Tensor, call_closed, replay_atom, replay_into, trace};
use tessera_ir::{Atom, ClosedJaxpr, Eqn, Jaxpr, ParamValue, Prim, Var};

use super::config;
use crate::driver::DriverError;

/// Where an operand of the loop comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Operand {
    /// Step argument `i`.
    Arg(usize),
    /// Result `i` of the code before the loop ([`StepLoop::before`], run by `before.rs`).
    Computed(usize),
}

/// Where a loss argument's value comes from in the step.
#[derive(Debug, Clone, Copy)]
pub(super) enum LossInput {
    /// A parameter: step argument `i`, the same for every micro-batch.
    Param(usize),
    /// A differentiated loop invariant the step computes before the loop (`w.astype(bf16)`,
    /// `w * mask`): result `c` of that code, placed on the groups of the stages reading it like
    /// a parameter; its gradient (with respect to the computed value, as JAX's
    /// `value_and_grad` of its argument) accumulates over the micro-batches like a
    /// parameter's.
    ComputedParam(usize),
    /// Loop-invariant data, the same for every micro-batch.
    Invariant(Operand),
    /// Sliced data: micro-batch `mb` of the operand.
    Sliced(Operand),
}

/// The step's loop, read.
pub(super) struct StepLoop {
    /// The loop equation's index.
    pub index: usize,
    /// Where each of its operands comes from.
    pub operands: Vec<Operand>,
    /// The code computing the operands that are not step arguments: step arguments to those
    /// operands (`None` when every operand is an argument).
    pub before: Option<ClosedJaxpr>,
}

/// The loop equation and the source of each of its operands.
pub(super) fn find_loop(step: &ClosedJaxpr) -> Result<StepLoop, DriverError> {
    let jaxpr = &step.jaxpr;
    let index = super::step_loops::the_loop(step)?;
    let inputs = &jaxpr.eqns[index].inputs;
    let mut computed = Vec::new();
    let operands = inputs
        .iter()
        .map(|a| match a {
            Atom::Var(v) if jaxpr.invars.contains(v) => {
                Operand::Arg(jaxpr.invars.iter().position(|i| i == v).unwrap_or(0))
            }
            other => {
                computed.push(other.clone());
                Operand::Computed(computed.len() - 1)
            }
        })
        .collect();
    let before = match computed.is_empty() {
        true => None,
        false => Some(code_before(jaxpr, index, &computed)?),
    };
    Ok(StepLoop {
        index,
        operands,
        before,
    })
}

/// The step's code before equation `index`, from the step's arguments to `results`.
fn code_before(jaxpr: &Jaxpr, index: usize, results: &[Atom]) -> Result<ClosedJaxpr, DriverError> {
    let program = tessera_ir::trace::trace(&jaxpr.in_avals(), |args| {
        let Some(anchor) = args.first().cloned() else {
            return Vec::new();
        };
        let bound = jaxpr.invars.iter().copied().zip(args.iter().cloned());
        let env = replay_where(jaxpr, bound, &anchor, |i| i < index);
        results
            .iter()
            .map(|a| replay_atom(&env, &anchor, a))
            .collect()
    })
    .map_err(|e| config(format!("the code computing the treduce's operands: {e}")))?;
    if program.jaxpr.outvars.len() != results.len() {
        return Err(config(
            "the treduce's operands are computed from no argument of the step; pass the micro-batches as arguments",
        ));
    }
    Ok(tessera_ir::passes::eliminate_dead_code(&program))
}

/// What the pipeline runs of the loop body.
pub(super) struct LoopBody {
    /// The loss: the body's arguments (invariants, then slices) to the loss and its auxiliary
    /// results, the body's code before its `value_and_grad_call` included.
    pub loss: ClosedJaxpr,
    /// The body arguments differentiated, in the call's gradient order (none for a
    /// forward-only body).
    pub argnums: Vec<usize>,
    /// The body arguments that are parameters (placed on the groups of the stages reading
    /// them): the differentiated ones, or for a forward-only body its floating-point loop
    /// invariants that are step arguments.
    pub params: Vec<usize>,
    /// Whether the body is the loss itself, with no `value_and_grad_call`: the pipeline runs
    /// its forwards only.
    pub forward_only: bool,
    /// Where each body argument comes from.
    pub inputs: Vec<LossInput>,
    /// How many auxiliary results the loss has after the loss itself.
    pub aux: usize,
}

/// Reads the body of the loop: one `value_and_grad_call` whose results are the body's results,
/// after code preparing its non-differentiated arguments; or, with no `value_and_grad_call`,
/// a forward-only body ([`forward_body`]).
pub(super) fn read_body(
    p: &TreduceParams<'_>,
    operands: &[Operand],
) -> Result<LoopBody, DriverError> {
    let body = &p.body.jaxpr;
    let calls: Vec<usize> = (0..body.eqns.len())
        .filter(|&i| is_value_and_grad(&body.eqns[i]))
        .collect();
    if calls.is_empty() {
        return forward_body(p, operands);
    }
    let [at] = calls[..] else {
        return Err(config(format!(
            "the treduce body must hold one value_and_grad_call (found {}) whose results are the \
             body's results",
            calls.len()
        )));
    };
    let call = &body.eqns[at];
    if body.outvars.len() != call.outputs.len()
        || body
            .outvars
            .iter()
            .zip(&call.outputs)
            .any(|(a, v)| *a != Atom::Var(*v))
    {
        // `whole_body` has put the body's metrics into the call's loss program already.
        return Err(config(
            "the treduce body's results must be its value_and_grad_call's results, in order",
        ));
    }
    let (primal, call_argnums) = read_call(call)?;
    let argnums = differentiated_args(body, at, &call_argnums, p.num_invariants)?;
    let inputs = (0..body.invars.len())
        .map(|b| loss_input(b, &argnums, p.num_invariants, operands[b]))
        .collect::<Result<_, _>>()?;
    let loss = body_loss(body, at, &primal, &call_argnums)?;
    Ok(LoopBody {
        aux: primal.jaxpr.outvars.len().saturating_sub(1),
        loss,
        params: argnums.clone(),
        argnums,
        inputs,
        forward_only: false,
    })
}

/// A body with no `value_and_grad_call` is the loss itself (its results the loss, then any
/// metrics), run forward only: an eval loss or inference, as JAXPP pipelines inference. Its
/// parameters are its floating-point loop invariants that are step arguments; they stay on the
/// groups of the stages reading them.
fn forward_body(p: &TreduceParams<'_>, operands: &[Operand]) -> Result<LoopBody, DriverError> {
    let body = &p.body.jaxpr;
    if body.outvars.is_empty() {
        return Err(config(
            "the treduce body returns nothing; return the loss (a forward-only body) or a \
             value_and_grad_call's results",
        ));
    }
    let avals = body.in_avals();
    let params: Vec<usize> = (0..p.num_invariants.min(body.invars.len()))
        .filter(|&b| matches!(operands.get(b), Some(Operand::Arg(_))) && avals[b].dtype.is_float())
        .collect();
    let inputs = (0..body.invars.len())
        .map(|b| loss_input(b, &params, p.num_invariants, operands[b]))
        .collect::<Result<_, _>>()?;
    Ok(LoopBody {
        aux: body.outvars.len() - 1,
        loss: p.body.clone(),
        argnums: Vec::new(),
        params,
        inputs,
        forward_only: true,
    })
}

/// The index of `body`'s one `value_and_grad_call`; `None` when it holds none or several
/// (`read_body` reads or refuses those).
pub(super) fn the_call(body: &Jaxpr) -> Option<usize> {
    let mut calls = (0..body.eqns.len()).filter(|&i| is_value_and_grad(&body.eqns[i]));
    match (calls.next(), calls.next()) {
        (Some(at), None) => Some(at),
        (None, _) | (Some(_), Some(_)) => None,
    }
}

pub(super) fn is_value_and_grad(eqn: &Eqn) -> bool {
    eqn.prim == Prim::Jit
        && matches!(eqn.params.get("name"), Some(ParamValue::Name(n)) if n == "value_and_grad")
}

/// The body argument behind each differentiated argument of the call at `at`: a loop
/// invariant (a step argument, or a value the step computes before the loop), differentiated
/// once. Other code of the body may read it too (a regularizer, a metric): it reads its value,
/// not its gradient ([`body_loss`]).
fn differentiated_args(
    body: &Jaxpr,
    at: usize,
    call_argnums: &[usize],
    num_invariants: usize,
) -> Result<Vec<usize>, DriverError> {
    let call = &body.eqns[at];
    let mut seen: Vec<usize> = Vec::new();
    for &a in call_argnums {
        let b = match call.inputs.get(a) {
            Some(Atom::Var(v)) => body.invars.iter().position(|i| i == v),
            _ => None,
        }
        .ok_or_else(|| {
            config(format!(
                "argument {a} of the loss is differentiated but is computed in the loop \
                 body (once per micro-batch) of a step holding constants, whose per-micro-batch \
                 gradients mpmd_jit does not rewrite: pass the constants as arguments, compute \
                 the value before the loop, or pass the parameter itself as a loop invariant"
            ))
        })?;
        if b >= num_invariants {
            return Err(config(format!(
                "argument {a} of the loss is differentiated but sliced per micro-batch in a \
                 step holding constants, whose per-micro-batch gradients mpmd_jit does not \
                 rewrite: pass the constants as arguments, or parameters as loop invariants"
            )));
        }
        if seen.contains(&b) {
            return Err(config(format!(
                "loop invariant {b} is differentiated twice (argument {a} of the loss and an \
                 earlier one); differentiate each parameter once"
            )));
        }
        seen.push(b);
    }
    Ok(seen)
}

fn loss_input(
    b: usize,
    params: &[usize],
    num_invariants: usize,
    operand: Operand,
) -> Result<LossInput, DriverError> {
    match (params.contains(&b), b < num_invariants, operand) {
        (true, _, Operand::Arg(i)) => Ok(LossInput::Param(i)),
        (true, _, Operand::Computed(c)) => Ok(LossInput::ComputedParam(c)),
        (false, true, o) => Ok(LossInput::Invariant(o)),
        (false, false, o) => Ok(LossInput::Sliced(o)),
    }
}

/// The body as one loss program: its code before the call, then the call's primal program.
/// A differentiated argument the body also reads elsewhere (its code before the call, or a
/// non-differentiated argument of the call) is read there through `stop_gradient`: the call's
/// gradient is with respect to its differentiated arguments alone, as JAX's `value_and_grad`,
/// so the loss program's gradient with respect to that parameter must not flow through its
/// other reads.
fn body_loss(
    body: &Jaxpr,
    at: usize,
    primal: &ClosedJaxpr,
    call_argnums: &[usize],
) -> Result<ClosedJaxpr, DriverError> {
    let call = &body.eqns[at];
    let read_by_others = body.eqns.iter().enumerate().any(|(i, e)| {
        i != at
            && e.inputs
                .iter()
                .any(|x| matches!(x, Atom::Var(v) if call.outputs.contains(v)))
    });
    if read_by_others {
        return Err(config(
            "the loop body reads the value_and_grad_call's results; return them as they are",
        ));
    }
    // The body arguments differentiated (`read_body` checked each is one).
    let differentiated: Vec<usize> = call_argnums
        .iter()
        .filter_map(|&a| match call.inputs.get(a) {
            Some(Atom::Var(v)) => body.invars.iter().position(|i| i == v),
            _ => None,
        })
        .collect();
    let reads = |b: usize| {
        let var = Atom::Var(body.invars[b]);
        let in_call = call.inputs.iter().filter(|x| **x == var).count();
        let elsewhere = body
            .eqns
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != at)
            .flat_map(|(_, e)| &e.inputs)
            .any(|x| *x == var);
        elsewhere || in_call > 1
    };
    let cut: Vec<usize> = differentiated.into_iter().filter(|&b| reads(b)).collect();
    trace(&body.in_avals(), |args| {
        let Some(anchor) = args.first().cloned() else {
            return Vec::new();
        };
        let bound = body.invars.iter().enumerate().map(|(b, &v)| {
            let value = match cut.contains(&b) {
                true => args[b].stop_gradient(),
                false => args[b].clone(),
            };
            (v, value)
        });
        let env = replay_where(body, bound, &anchor, |i| i != at);
        let operands: Vec<Tensor> = call
            .inputs
            .iter()
            .enumerate()
            .map(|(j, a)| {
                let raw = match a {
                    Atom::Var(v) if call_argnums.contains(&j) => body
                        .invars
                        .iter()
                        .position(|i| i == v)
                        .map(|b| args[b].clone()),
                    _ => None,
                };
                raw.unwrap_or_else(|| replay_atom(&env, &anchor, a))
            })
            .collect();
        call_closed(primal, &operands.iter().collect::<Vec<_>>())
    })
    .map_err(|e| config(format!("the loop body: {e}")))
}

/// Checks how the loop combines its results: the loss by `Concat(0)`, `Add` or `Max`, each
/// auxiliary result by `Concat(a)`, `Add` or `Max`, the gradients by `Add` or `Max` (by then:
/// `stacked_grads.rs` has rewritten those combined by `Concat` to stacked ones summed).
pub(super) fn check_ops(ops: &[ReduceOp], aux: usize) -> Result<(), DriverError> {
    if !matches!(
        ops.first(),
        Some(ReduceOp::Concat(0) | ReduceOp::Add | ReduceOp::Max)
    ) {
        return Err(config(format!(
            "the loop combines the loss by {:?}; mpmd_jit pipelines Concat(0) (a loss per \
             micro-batch), Add or Max",
            ops.first()
        )));
    }
    if let Some((k, op)) = ops
        .iter()
        .enumerate()
        .skip(1 + aux)
        .find(|(_, o)| !matches!(o, ReduceOp::Add | ReduceOp::Max))
    {
        // A gradient kept per micro-batch is accumulated stacked (`stacked_grads.rs` rewrote
        // it to Add) unless the step holds constants, which that rewrite does not replay.
        return Err(config(format!(
            "the loop combines gradient {} by {op:?}, which mpmd_jit keeps per micro-batch only \
             in a step without constants: pass the constants as arguments, or combine it by \
             Add or Max",
            k - 1 - aux
        )));
    }
    Ok(())
}

/// The loss arguments (among `argnums`, in gradient order) whose gradients the loop combines by
/// `Max` (`ops`: the loss's, `aux` auxiliary results', then the gradients').
pub(super) fn max_grads(ops: &[ReduceOp], aux: usize, argnums: &[usize]) -> Vec<usize> {
    ops.iter()
        .skip(1 + aux)
        .zip(argnums)
        .filter(|(op, _)| **op == ReduceOp::Max)
        .map(|(_, &a)| a)
        .collect()
}

/// The step without its loop: arguments `(step args..., loop results...)`, the step's results.
pub(super) fn update_program(step: &ClosedJaxpr, index: usize) -> Result<ClosedJaxpr, DriverError> {
    let jaxpr = &step.jaxpr;
    let looped = &jaxpr.eqns[index];
    let mut avals = jaxpr.in_avals();
    avals.extend(looped.outputs.iter().map(|&v| jaxpr.aval(v).clone()));
    tessera_ir::trace::trace(&avals, |args| {
        let Some(anchor) = args.first().cloned() else {
            return Vec::new();
        };
        let bound = jaxpr
            .invars
            .iter()
            .chain(&looped.outputs)
            .copied()
            .zip(args.iter().cloned());
        let env = replay_where(jaxpr, bound, &anchor, |i| i != index);
        jaxpr
            .outvars
            .iter()
            .map(|a| replay_atom(&env, &anchor, a))
            .collect()
    })
    .map_err(|e| config(format!("the code after the treduce: {e}")))
}

/// Replays the equations `i` of `jaxpr` for which `keep(i)`, from the `bound` variables (in
/// `anchor`'s trace); the values of its variables.
fn replay_where(
    jaxpr: &Jaxpr,
    bound: impl Iterator<Item = (Var, Tensor)>,
    anchor: &Tensor,
    keep: impl Fn(usize) -> bool,
) -> HashMap<Var, Tensor> {
    let mut env: HashMap<Var, Tensor> = bound.collect();
    for (i, eqn) in jaxpr.eqns.iter().enumerate() {
        if keep(i) {
            replay_into(&mut env, jaxpr, eqn, anchor);
        }
    }
    env
}

/// A `value_and_grad_call` equation's loss program and differentiated argument positions.
pub(super) fn read_call(call: &Eqn) -> Result<(ClosedJaxpr, Vec<usize>), DriverError> {
    let primal = match call.params.get("primal") {
        Some(ParamValue::Jaxpr(j)) => (**j).clone(),
        _ => return Err(config("the value_and_grad_call has no `primal` program")),
    };
    let argnums = call
        .params
        .get("argnums")
        .and_then(ParamValue::as_ints)
        .ok_or_else(|| config("the value_and_grad_call has no `argnums`"))?
        .into_iter()
        .map(|a| a as usize)
        .collect();
    Ok((primal, argnums))
}
