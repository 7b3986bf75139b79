//! Gradients kept per micro-batch: a `treduce` gradient result combined by `Concat(a)` (JAXPP
//! stacks each micro-batch's gradient along a new axis `a`), and a tied weight's gradient
//! combined by `Max` (the elementwise maximum over the micro-batches of each micro-batch's
//! gradient, itself the sum of the parts of the stages reading the weight).
//!
//! [`stack_gradients`] rewrites the step so that the pipeline's accumulators do the work: the
//! step computes, before the loop, the parameter stacked `n` times along `a` (`w_n`, `n` the
//! number of micro-batches), passed to the loop as one more loop invariant and differentiated
//! in the parameter's place, and the micro-batch index as one more sliced operand; the loss
//! reads `w_n[.., i, ..]` (a `take` at the index along `a`, written where the loss reads the
//! parameter, so it stays in the stages reading it). The gradient with respect to `w_n` of
//! micro-batch `i` is that micro-batch's gradient in slot `i` and zeros elsewhere, so summing it
//! over the micro-batches (`Add`, the accumulators' own combination, on the stage's group, in the
//! compiled backward programs) stacks the gradients exactly: `0 + g` is `g`. A tied weight's
//! parts add up per micro-batch in its slot as they do for `Add`; its `Max` is then the maximum
//! along the stacked axis, computed after the loop by the step's update on the group.
//!
//! A differentiated argument whose value differs per micro-batch (computed in the body from the
//! micro-batch, or a slice of a loop operand) has no parameter to stack: the loss reads it plus
//! a zero probe, computed before the loop and differentiated in its place (stacked for `Max` and
//! `Concat`, its slot read at the index; whole for `Add`), so the probe's gradient is the value's
//! (JAX's `value_and_grad` of that argument) and the accumulators combine it like a parameter's.
//!
//! Why this and not per-micro-batch gradient buffers: the pipeline's plan already places,
//! donates, sums (tied weights), predicts the memory of, and under every schedule (split
//! backwards included) and on one group as one program, runs a parameter and its accumulator;
//! a stacked parameter is one more such parameter, so every schedule, the one-program step and
//! the memory model count it with no new kind of pipeline value. The cost: the stacked copy
//! of the parameter (`n` times its size) beside the stacked gradient (`n` times, which any
//! `Concat` needs), on the groups of the stages reading it.

use std::collections::HashMap;

use tessera_ir::prim::{GatherScatterMode, ReduceOp, TreduceParams, treduce_params};
use tessera_ir::trace::{
    Tensor, call_closed, replay_atom, replay_into, trace, value_and_grad_call,
    value_and_grad_with_aux_call,
};
use tessera_ir::{Atom, ClosedJaxpr, DType, Eqn, Prim, ShapedArray, Var};

use super::analyze::{read_call, the_call};
use super::config;
use super::retrace::{keep_other_params, retrace_loop};
use crate::driver::DriverError;

/// What a rewritten gradient is taken with respect to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// A loop invariant (this body argument), stacked by the micro-batch.
    Param(usize),
    /// A value differing per micro-batch (computed in the body from the micro-batch, or a
    /// slice): the loss reads it plus a zero probe, whose gradient is the value's.
    Probe,
}

/// One gradient rewritten.
#[derive(Debug, Clone, Copy)]
struct Stacked {
    /// The call argument differentiated.
    arg: usize,
    /// What the gradient is taken with respect to.
    source: Source,
    /// The axis the micro-batches stack along (`None`: not stacked, a probe whose gradient the
    /// loop sums).
    axis: Option<usize>,
    /// The gradient's position among the loop's results.
    result: usize,
    /// Whether the loop combines it by `Max` (stacked along 0, then the maximum along 0).
    max: bool,
}

/// The step with the loop at `index` rewritten (see the module docs) so that each gradient it
/// combines by `Concat(a)`, each gradient of a body argument among `tied_max` (loop invariants
/// read by several stages) it combines by `Max`, and each gradient of a value differing per
/// micro-batch, is accumulated stacked by the micro-batch (or, a per-micro-batch value's
/// gradient combined by `Add`, summed through a zero probe); `None` when there is none.
pub(super) fn stack_gradients(
    step: &ClosedJaxpr,
    index: usize,
    tied_max: &[usize],
) -> Result<Option<ClosedJaxpr>, DriverError> {
    let jaxpr = &step.jaxpr;
    let Some(eqn) = jaxpr.eqns.get(index) else {
        return Ok(None);
    };
    let p = TreduceParams::read(&eqn.params).map_err(|e| config(e.to_string()))?;
    let body = &p.body.jaxpr;
    let Some(at) = the_call(body) else {
        return Ok(None);
    };
    let call = &body.eqns[at];
    let (primal, argnums) = read_call(call)?;
    let values = call.outputs.len().saturating_sub(argnums.len());
    // `read_body` refuses a body whose results are not the call's.
    if body.outvars.len() != call.outputs.len() || !jaxpr.constvars.is_empty() {
        return Ok(None);
    }
    let primal_avals = primal.jaxpr.in_avals();
    let mut stacked = Vec::new();
    for (j, &arg) in argnums.iter().enumerate() {
        let result = values + j;
        let body_arg = match call.inputs.get(arg) {
            Some(Atom::Var(v)) => body.invars.iter().position(|i| i == v),
            _ => None,
        };
        let source = match body_arg.filter(|&b| b < p.num_invariants) {
            Some(b) => Source::Param(b),
            None => Source::Probe,
        };
        let Some(aval) = primal_avals.get(arg) else {
            continue;
        };
        let rank = aval.rank();
        let (axis, max) = match (p.ops.get(result), source) {
            (Some(ReduceOp::Concat(a)), _) => {
                let axis = usize::try_from(*a)
                    .ok()
                    .filter(|&a| a <= rank)
                    .ok_or_else(|| {
                        config(format!(
                            "the loop combines gradient {j} by Concat({a}), out of range for a \
                         gradient of rank {rank}; stack it along an axis from 0 to {rank}"
                        ))
                    })?;
                (Some(axis), false)
            }
            (Some(ReduceOp::Max), Source::Param(b)) if tied_max.contains(&b) => (Some(0), true),
            (Some(ReduceOp::Max), Source::Probe) => (Some(0), true),
            (Some(ReduceOp::Add), Source::Probe) => (None, false),
            _ => continue,
        };
        stacked.push(Stacked {
            arg,
            source,
            axis,
            result,
            max,
        });
    }
    if stacked.is_empty() {
        return Ok(None);
    }
    let n = p.length;
    let avals = body.in_avals();
    // The type of what is differentiated in each one's place: the stacked parameter or probe.
    let big = |s: &Stacked| {
        let mut a = primal_avals[s.arg].clone();
        if let Some(axis) = s.axis {
            a.shape.insert(axis, n);
        }
        a
    };
    let index_shape: Vec<i64> = std::iter::repeat_n(1, p.axis)
        .chain(std::iter::once(n))
        .collect();
    // The new body: invariants, stacked parameters and probes, slices, the micro-batch index.
    let mut new_avals: Vec<ShapedArray> = avals[..p.num_invariants].to_vec();
    new_avals.extend(stacked.iter().map(big));
    new_avals.extend(avals[p.num_invariants..].iter().cloned());
    new_avals.push(ShapedArray::new(DType::I32, &index_shape[..p.axis]));
    let num_invariants = p.num_invariants + stacked.len();
    let stacked_primal = stacked_loss(&primal, &stacked, n)?;
    let new_body = trace(&new_avals, |args| {
        let Some(anchor) = args.first().cloned() else {
            return Vec::new();
        };
        let given = args[..p.num_invariants]
            .iter()
            .chain(&args[num_invariants..args.len() - 1])
            .cloned();
        let mut env: HashMap<Var, Tensor> = body.invars.iter().copied().zip(given).collect();
        let index = args[args.len() - 1].reshape(&[]);
        for (i, e) in body.eqns.iter().enumerate() {
            if i != at {
                replay_into(&mut env, body, e, &anchor);
                continue;
            }
            let mut operands: Vec<Tensor> = e
                .inputs
                .iter()
                .map(|a| replay_atom(&env, &anchor, a))
                .collect();
            // A per-micro-batch value is passed on beside its probe.
            let probed: Vec<Tensor> = stacked
                .iter()
                .filter(|s| s.source == Source::Probe)
                .map(|s| operands[s.arg].clone())
                .collect();
            for (k, s) in stacked.iter().enumerate() {
                operands[s.arg] = args[p.num_invariants + k].clone();
            }
            operands.extend(probed);
            operands.push(index.clone());
            let refs: Vec<&Tensor> = operands.iter().collect();
            let outs = match values > 1 {
                true => value_and_grad_with_aux_call(&stacked_primal, &argnums, &refs),
                false => value_and_grad_call(&stacked_primal, &argnums, &refs),
            };
            env.extend(e.outputs.iter().copied().zip(outs));
        }
        body.outvars
            .iter()
            .map(|a| replay_atom(&env, &anchor, a))
            .collect()
    })
    .map_err(|e| {
        config(format!(
            "the loop body keeping gradients per micro-batch: {e}"
        ))
    })?;
    let mut ops = p.ops.clone();
    for s in &stacked {
        ops[s.result] = ReduceOp::Add;
    }
    let params = keep_other_params(
        treduce_params(new_body, p.axis, n, num_invariants, &ops, &p.schedule),
        eqn,
    );
    let looped = Eqn {
        prim: Prim::Treduce,
        params,
        inputs: Vec::new(),
        outputs: Vec::new(),
    };
    let inputs = |operands: &[Tensor], anchor: &Tensor| {
        let mut inputs: Vec<Tensor> = operands[..p.num_invariants].to_vec();
        for s in &stacked {
            let shape = big(s).shape;
            let value = match (s.source, s.axis) {
                (Source::Param(b), Some(axis)) => {
                    let w = &operands[b];
                    let dims: Vec<i64> = (0..w.rank())
                        .map(|d| if d < axis { d as i64 } else { d as i64 + 1 })
                        .collect();
                    w.broadcast_in_dim(&shape, &dims)
                }
                (Source::Param(b), None) => operands[b].clone(),
                (Source::Probe, _) => anchor
                    .full_like_scalar(0.0)
                    .astype(primal_avals[s.arg].dtype)
                    .broadcast_in_dim(&shape, &[]),
            };
            inputs.push(value);
        }
        inputs.extend(operands[p.num_invariants..].iter().cloned());
        inputs.push(anchor.iota_along(&index_shape, p.axis as i64));
        inputs
    };
    let outputs = |mut outs: Vec<Tensor>| {
        for s in stacked.iter().filter(|s| s.max) {
            outs[s.result] = outs[s.result].max(&[0]);
        }
        outs
    };
    let rewritten = retrace_loop(step, index, &looped, inputs, outputs).map_err(|e| {
        config(format!(
            "the step keeping gradients per micro-batch (stacked parameters): {e}"
        ))
    })?;
    tessera_ir::verify(&rewritten).map_err(|e| config(e.to_string()))?;
    Ok(Some(rewritten))
}

/// The call's loss taking each stacked parameter or probe in place of its argument, then each
/// probed value, then the micro-batch index: every read of a stacked parameter reads its slot
/// (`take` at the index along the stacking axis), every read of a probed value reads the value
/// plus its probe (its slot, when stacked), written where it is read, so it stays in the stage
/// reading it (a tied weight's reads in each of its stages).
fn stacked_loss(
    primal: &ClosedJaxpr,
    stacked: &[Stacked],
    n: i64,
) -> Result<ClosedJaxpr, DriverError> {
    let flat = tessera_ir::passes::inline_calls(primal);
    let jaxpr = &flat.jaxpr;
    let given = jaxpr.in_avals();
    let mut avals = given.clone();
    for s in stacked {
        if let Some(axis) = s.axis {
            avals[s.arg].shape.insert(axis, n);
        }
    }
    let probes: Vec<usize> = stacked
        .iter()
        .filter(|s| s.source == Source::Probe)
        .map(|s| s.arg)
        .collect();
    avals.extend(probes.iter().map(|&a| given[a].clone()));
    avals.push(ShapedArray::new(DType::I32, &[]));
    let read = |args: &[Tensor], s: &Stacked| {
        let index = &args[args.len() - 1];
        let slot = match s.axis {
            Some(axis) => args[s.arg].take_with(index, axis as i64, GatherScatterMode::Clip),
            None => args[s.arg].clone(),
        };
        match probes.iter().position(|&a| a == s.arg) {
            Some(k) => &args[given.len() + k] + &slot,
            None => slot,
        }
    };
    let program = match flat.jaxpr.constvars.is_empty() {
        // Every read takes the slot where it is.
        true => trace(&avals, |args| {
            let Some(anchor) = args.first().cloned() else {
                return Vec::new();
            };
            let mut env: HashMap<Var, Tensor> = HashMap::new();
            for (v, a) in jaxpr.invars.iter().zip(args) {
                env.insert(*v, a.clone());
            }
            let fresh = |env: &mut HashMap<Var, Tensor>, atoms: &[Atom]| {
                for s in stacked {
                    let v = jaxpr.invars[s.arg];
                    if atoms.contains(&Atom::Var(v)) {
                        env.insert(v, read(args, s));
                    }
                }
            };
            for e in &jaxpr.eqns {
                fresh(&mut env, &e.inputs);
                replay_into(&mut env, jaxpr, e, &anchor);
            }
            fresh(&mut env, &jaxpr.outvars);
            jaxpr
                .outvars
                .iter()
                .map(|a| replay_atom(&env, &anchor, a))
                .collect()
        }),
        // A loss with constants is called whole, its arguments read first.
        false => trace(&avals, |args| {
            let mut operands: Vec<Tensor> = args[..given.len()].to_vec();
            for s in stacked {
                operands[s.arg] = read(args, s);
            }
            call_closed(primal, &operands.iter().collect::<Vec<_>>())
        }),
    };
    program.map_err(|e| config(format!("the loss reading stacked parameters: {e}")))
}
