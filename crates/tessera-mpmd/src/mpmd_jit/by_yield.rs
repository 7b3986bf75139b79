//! `mpmd_jit_by_yield(step)`: JAXPP's entry point for a step with no micro-batch loop. The step
//! computes its gradient with one `value_and_grad_call` of a loss whose stages are separated by
//! `pipeline_yield` (or any stage marker); the whole batch is one micro-batch. Stage `i` of the
//! loss, forward and backward (its backward is the transpose of its forward, derived as
//! `mpmd_jit` derives it), runs on MPMD group `i`, so the loss must have exactly as many stages
//! as the mesh has groups. The update after the gradient runs on the groups holding the
//! parameters, as under [`super::mpmd_jit`].
//!
//! It reuses `mpmd_jit` whole: the step is traced again with its `value_and_grad_call` inside a
//! one-iteration `treduce` (the call's non-differentiated operands gain a leading axis of
//! length 1, the loss and metrics lose it after the loop), then compiled by [`MpmdJit::new`].

use std::collections::HashMap;

use tessera_ir::trace::{
    Tensor, replay_atom, replay_into, trace, treduce, value_and_grad_call,
    value_and_grad_with_aux_call,
};
use tessera_ir::{ClosedJaxpr, Eqn, Jaxpr, ParamValue, Prim};

use super::{MpmdJit, MpmdJitOptions, config};
use crate::driver::DriverError;
use crate::mesh::MpmdMesh;
use tessera_pjrt::Client;

/// Compiles `step` (see the module docs) for `mesh`, stage `i` of its loss on group `i`.
pub fn mpmd_jit_by_yield(
    client: &Client,
    mesh: &MpmdMesh,
    step: &ClosedJaxpr,
    options: &MpmdJitOptions,
) -> Result<MpmdJit, DriverError> {
    let looped = as_one_micro_batch(step, mesh.mpmd_dim())?;
    MpmdJit::new(client, mesh, &looped, options)
}

/// What `mpmd_jit_by_yield` reads of a step: its one gradient call.
struct Call<'a> {
    index: usize,
    eqn: &'a Eqn,
    loss: ClosedJaxpr,
    argnums: Vec<usize>,
}

fn is_value_and_grad(eqn: &Eqn) -> bool {
    eqn.prim == Prim::Jit
        && matches!(eqn.params.get("name"), Some(ParamValue::Name(n)) if n == "value_and_grad")
}

fn find_call(jaxpr: &Jaxpr) -> Result<Call<'_>, DriverError> {
    if jaxpr.eqns.iter().any(|e| e.prim == Prim::Treduce) {
        return Err(config(
            "mpmd_jit_by_yield takes a step without a treduce (the whole batch is one \
             micro-batch); compile a step with a micro-batch loop with mpmd_jit",
        ));
    }
    let calls: Vec<usize> = (0..jaxpr.eqns.len())
        .filter(|&i| is_value_and_grad(&jaxpr.eqns[i]))
        .collect();
    let [index] = calls[..] else {
        return Err(config(format!(
            "mpmd_jit_by_yield needs one value_and_grad_call at the step's top level (found \
             {}): compute the loss and its gradients with a single call",
            calls.len()
        )));
    };
    let eqn = &jaxpr.eqns[index];
    let (loss, argnums) = super::analyze::read_call(eqn)?;
    Ok(Call {
        index,
        eqn,
        loss,
        argnums,
    })
}

/// The number of stages of `loss`: one more than its highest stage marker.
fn stage_count(loss: &ClosedJaxpr) -> usize {
    let last = loss
        .jaxpr
        .eqns
        .iter()
        .filter(|e| e.prim == Prim::PipelineEnterStage)
        .filter_map(|e| match e.params.get("stage") {
            Some(ParamValue::Int(s)) => Some(*s),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    last.max(0) as usize + 1
}

/// `step` with its gradient call inside a one-iteration `treduce`, after checking that its
/// loss has one stage per group of `groups`.
fn as_one_micro_batch(step: &ClosedJaxpr, groups: usize) -> Result<ClosedJaxpr, DriverError> {
    tessera_ir::verify(step).map_err(|e| config(e.to_string()))?;
    if !step.consts.is_empty() {
        return Err(config(
            "mpmd_jit_by_yield takes a step without captured constants: pass them as arguments",
        ));
    }
    let jaxpr = &step.jaxpr;
    let call = find_call(jaxpr)?;
    let stages = stage_count(&call.loss);
    if stages != groups {
        return Err(config(format!(
            "mpmd_jit_by_yield runs stage i of the loss on MPMD group i, but the loss has {stages} \
             stage(s) ({} pipeline_yield boundaries) and the mesh {groups} group(s): separate \
             the loss into {groups} stages with {} pipeline_yield boundaries, or build the mesh \
             with {stages} groups along its MPMD axis",
            stages - 1,
            groups.saturating_sub(1),
        )));
    }
    if jaxpr.invars.is_empty() {
        return Err(config("mpmd_jit_by_yield needs a step with arguments"));
    }
    let values = call.eqn.outputs.len() - call.argnums.len();
    trace(&jaxpr.in_avals(), |a| {
        let anchor = a[0].clone();
        let mut env: HashMap<_, Tensor> = jaxpr
            .invars
            .iter()
            .copied()
            .zip(a.iter().cloned())
            .collect();
        for (i, eqn) in jaxpr.eqns.iter().enumerate() {
            if i != call.index {
                replay_into(&mut env, jaxpr, eqn, &anchor);
                continue;
            }
            let operands: Vec<Tensor> = eqn
                .inputs
                .iter()
                .map(|atom| replay_atom(&env, &anchor, atom))
                .collect();
            let outs = looped_call(&call, &operands, values);
            env.extend(eqn.outputs.iter().copied().zip(outs));
        }
        jaxpr
            .outvars
            .iter()
            .map(|atom| replay_atom(&env, &anchor, atom))
            .collect()
    })
    .map_err(|e| config(format!("mpmd_jit_by_yield: rewriting the step: {e}")))
}

/// The gradient call on `operands` as a one-iteration `treduce`: the differentiated operands are
/// the loop's invariants, the others its micro-batched operands (a leading axis of length 1).
fn looped_call(call: &Call<'_>, operands: &[Tensor], values: usize) -> Vec<Tensor> {
    let invariants: Vec<&Tensor> = call.argnums.iter().map(|&a| &operands[a]).collect();
    let others: Vec<usize> = (0..operands.len())
        .filter(|k| !call.argnums.contains(k))
        .collect();
    let batched: Vec<Tensor> = others
        .iter()
        .map(|&k| {
            let mut shape = vec![1];
            shape.extend_from_slice(operands[k].shape());
            operands[k].reshape(&shape)
        })
        .collect();
    let xs: Vec<&Tensor> = batched.iter().collect();
    let (loss, argnums) = (&call.loss, &call.argnums);
    let outs = treduce(&invariants, &xs, 0, "gpipe", &[], |w, mb| {
        let mut args: Vec<&Tensor> = Vec::with_capacity(operands.len());
        let mut mi = 0;
        for k in 0..operands.len() {
            if let Some(wi) = argnums.iter().position(|&a| a == k) {
                args.push(&w[wi]);
            } else {
                args.push(&mb[mi]);
                mi += 1;
            }
        }
        if values > 1 {
            value_and_grad_with_aux_call(loss, argnums, &args)
        } else {
            value_and_grad_call(loss, argnums, &args)
        }
    });
    // The loss (concatenated over the one micro-batch) loses its leading axis; metrics and
    // gradients are sums over one micro-batch, already of their own shape.
    outs.into_iter()
        .enumerate()
        .map(|(k, t)| {
            if k == 0 {
                let shape = t.shape()[1..].to_vec();
                t.reshape(&shape)
            } else {
                t
            }
        })
        .collect()
}
