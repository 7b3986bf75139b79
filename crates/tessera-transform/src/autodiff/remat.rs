//! The VJP of a `checkpoint` region (JAX's `remat`): the forward pass keeps only what the
//! region's remat policy saves (its `policy` parameter: `None`, JAX's default, saves nothing);
//! the backward pass computes the other residuals again from the region's operands and the
//! saved ones, then applies the region's linear backward. With `prevent_cse` (the default) the
//! recomputation reads its operands through an `optimization_barrier` that also holds the
//! results' cotangents, so a compiler seeing the forward and backward in one program can
//! neither merge the recomputation with the forward's own computation nor run it before the
//! backward reaches the region. Memory traded for compute, inside one program as across
//! pipeline stages. A nested `jit` that inlining keeps (one with constants) is differentiated by
//! calling its VJP program (constants included) with the operands and cotangents.

use super::transpose::vjp_split;
use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::jaxpr::{Atom, Jaxpr, Var};
use crate::params::{ParamValue, Params};
use crate::passes::eliminate_dead_code;
use crate::prim::Prim;
use crate::remat_policy::{RematPolicy, needed, recompute_program};
use crate::trace::{Tensor, call_closed, optimization_barrier};

/// The cotangents of a `checkpoint`'s or nested `jit`'s operands, recomputing its forward.
pub(super) fn call_vjp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let Some(anchor) = y.first() else {
        return vec![None; x.len()];
    };
    let body_vjp = match params.jaxpr(prim.name(), "jaxpr").and_then(super::vjp) {
        Ok(b) => b,
        Err(e) => {
            let msg = format!("in the VJP of the nested {}: {e}", prim.name());
            return vec![Some(anchor.fail(prim.name(), msg)); x.len()];
        }
    };
    let cts = super::rules::cotangents_or_zeros(gs, y);
    let operands: Vec<&Tensor> = x.iter().chain(cts.iter()).collect();
    call_closed(&body_vjp, &operands)
        .into_iter()
        .zip(x)
        .map(|(ct, x)| x.dtype().is_float().then_some(ct))
        .collect()
}

/// The cotangents of a `checkpoint`'s operands under its remat policy (see the module doc).
pub(super) fn checkpoint_vjp(
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let Some(anchor) = y.first() else {
        return vec![None; x.len()];
    };
    let name = Prim::Checkpoint.name();
    let policy = match policy_of(params) {
        Ok(policy) => policy,
        Err(e) => {
            let msg = format!("in the VJP of a checkpoint region: {e}");
            return vec![Some(anchor.fail(name, msg)); x.len()];
        }
    };
    let cts = super::rules::cotangents_or_zeros(gs, y);
    match policy_backward(params, policy, x, &cts) {
        Ok(grads) => grads
            .into_iter()
            .zip(x)
            .map(|(ct, x)| x.dtype().is_float().then_some(ct))
            .collect(),
        // A region that does not split into a forward and a linear backward (a primitive
        // without a linearization) recomputes its whole forward inside its VJP program.
        Err(_) => call_vjp(Prim::Checkpoint, params, x, y, gs),
    }
}

/// The region's policy: `None` (or no parameter) saves nothing, as JAX's default.
pub(super) fn policy_of(params: &Params) -> Result<RematPolicy> {
    match params.get("policy") {
        None => Ok(RematPolicy::NothingSaveable),
        Some(ParamValue::Name(n)) if n == "None" => Ok(RematPolicy::NothingSaveable),
        Some(ParamValue::Name(n)) => {
            n.parse()
                .map_err(|e: crate::remat_policy::UnknownRematPolicy| IrError::Type {
                    prim: Prim::Checkpoint.name().into(),
                    message: e.to_string(),
                })
        }
        Some(other) => Err(IrError::Type {
            prim: Prim::Checkpoint.name().into(),
            message: format!("policy {other} is not a remat policy's name"),
        }),
    }
}

/// The values of the forward program `fwd` the backward reads saved under `policy`: the
/// residuals the policy saves, and the saveable values from which the others are recomputed
/// (`dots_saveable` keeps the product a `tanh` residual is computed from, say). Booleans are
/// never kept.
fn kept_values(fwd: &Jaxpr, policy: RematPolicy, residuals: &[Atom]) -> Vec<Var> {
    let candidates: Vec<Var> = fwd
        .eqns
        .iter()
        .flat_map(|e| e.outputs.iter().map(move |&v| (v, e)))
        .filter(|&(v, e)| fwd.aval(v).dtype != DType::Bool && policy.saves_result_of(Some(e)))
        .map(|(v, _)| v)
        .collect();
    let mut kept = needed(fwd, &candidates, residuals);
    kept.dedup();
    kept
}

/// One cotangent per operand: the region split into its forward (results and residuals) and
/// linear backward, the saved residuals taken from the forward, the others recomputed behind a
/// barrier.
fn policy_backward(
    params: &Params,
    policy: RematPolicy,
    x: &[Tensor],
    cts: &[Tensor],
) -> Result<Vec<Tensor>> {
    let name = Prim::Checkpoint.name();
    let body = params.jaxpr(name, "jaxpr")?;
    let prevent_cse = params.bool_or(name, "prevent_cse", true)?;
    let split = vjp_split(body)?;
    let fwd = &split.forward;
    let n_out = body.jaxpr.outvars.len();
    let residuals: Vec<Atom> = fwd.jaxpr.outvars[n_out..].to_vec();
    let kept = kept_values(&fwd.jaxpr, policy, &residuals);
    // The forward computes the kept values (a compiler merges this with the region's own
    // forward: nothing behind a barrier).
    let mut keeping = fwd.clone();
    keeping.jaxpr.outvars = kept.iter().map(|&v| Atom::Var(v)).collect();
    let keeping = eliminate_dead_code(&keeping);
    let x_refs: Vec<&Tensor> = x.iter().collect();
    let saved_values = match kept.is_empty() {
        true => Vec::new(),
        false => call_closed(&keeping, &x_refs),
    };
    let saved = kept;
    // The recomputation's operands, behind a barrier holding the cotangents too.
    let operands: Vec<Tensor> = x.iter().chain(&saved_values).cloned().collect();
    let operands = match prevent_cse {
        true => {
            let held: Vec<&Tensor> = operands.iter().chain(cts).collect();
            let mut out = optimization_barrier(&held);
            out.truncate(operands.len());
            out
        }
        false => operands,
    };
    let recompute = recompute_program(fwd, &saved, &residuals);
    let refs: Vec<&Tensor> = operands.iter().collect();
    let values = call_closed(&recompute, &refs);
    let backward_args: Vec<&Tensor> = values.iter().chain(cts).collect();
    Ok(call_closed(&split.backward, &backward_args))
}
