//! Transformations inside a trace: each `*_call` transforms a program and calls the result on
//! traced operands, so transformed functions compose with everything else being traced (a
//! `vmap_call` inside a `value_and_grad` of a program is `grad(vmap(f))`).
//! [`value_and_grad_call`] also keeps the undifferentiated loss visible, so `mpmd_jit` can
//! partition it into pipeline stages.

use super::{Tensor, call_closed};
use crate::autodiff::{jvp, value_and_grad, vjp};
use crate::batching::vmap;
use crate::error::Result;
use crate::jaxpr::ClosedJaxpr;
use crate::params::{ParamValue, Params};
use crate::prim::Prim;

fn call_transformed(what: &str, transformed: Result<ClosedJaxpr>, args: &[&Tensor]) -> Vec<Tensor> {
    let Some(first) = args.first() else {
        return Vec::new();
    };
    match transformed {
        Ok(program) => call_closed(&program, args),
        Err(e) => vec![first.fail(what, e.to_string())],
    }
}

/// `jvp(program)` on `(primals..., tangents...)`: results `(outputs..., output tangents...)`.
pub fn jvp_call(program: &ClosedJaxpr, primals: &[&Tensor], tangents: &[&Tensor]) -> Vec<Tensor> {
    let args: Vec<&Tensor> = primals.iter().chain(tangents).copied().collect();
    call_transformed("jvp", jvp(program), &args)
}

/// `vjp(program)` on `(primals..., cotangents...)`: the cotangent of every argument.
pub fn vjp_call(program: &ClosedJaxpr, primals: &[&Tensor], cotangents: &[&Tensor]) -> Vec<Tensor> {
    let args: Vec<&Tensor> = primals.iter().chain(cotangents).copied().collect();
    call_transformed("vjp", vjp(program), &args)
}

/// `vmap(program, in_axes, out_axes)` on `args` (the batch size read from the first batched
/// argument).
pub fn vmap_call(
    program: &ClosedJaxpr,
    in_axes: &[Option<usize>],
    out_axes: &[usize],
    args: &[&Tensor],
) -> Vec<Tensor> {
    let size = args
        .iter()
        .zip(in_axes)
        .find_map(|(t, ax)| ax.and_then(|a| t.shape().get(a).copied()));
    let Some(size) = size else {
        return args
            .first()
            .map(|t| {
                vec![t.fail(
                    "vmap",
                    "no argument is batched (every in_axes entry is None)".into(),
                )]
            })
            .unwrap_or_default();
    };
    call_transformed("vmap", vmap(program, in_axes, out_axes, size), args)
}

/// The gradients of a scalar `loss` program with respect to `argnums`, at `args`.
pub fn grad_call(loss: &ClosedJaxpr, argnums: &[usize], args: &[&Tensor]) -> Vec<Tensor> {
    let mut outs = value_and_grad_call(loss, argnums, args);
    if outs.len() > 1 {
        outs.remove(0);
    }
    outs
}

/// Calls `value_and_grad(loss, argnums)` on `args`, recording the loss itself next to its
/// derivative: results `(loss, grad_0, ..., grad_k)`.
pub fn value_and_grad_call(loss: &ClosedJaxpr, argnums: &[usize], args: &[&Tensor]) -> Vec<Tensor> {
    let Some(first) = args.first() else {
        return Vec::new();
    };
    match value_and_grad(loss, argnums) {
        Ok(vag) => {
            let params = Params::new()
                .with("name", ParamValue::Name("value_and_grad".into()))
                .with("jaxpr", ParamValue::Jaxpr(Box::new(vag)))
                .with("primal", ParamValue::Jaxpr(Box::new(loss.clone())))
                .with(
                    "argnums",
                    ParamValue::ints(&argnums.iter().map(|&a| a as i64).collect::<Vec<_>>()),
                );
            Tensor::bind(Prim::Jit, params, args)
        }
        Err(e) => vec![first.fail("value_and_grad", e.to_string())],
    }
}
