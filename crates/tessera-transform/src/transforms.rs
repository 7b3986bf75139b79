//! Transformations inside a trace: each `*_call` transforms a program and calls the result on
//! traced operands, so transformed functions compose with everything else being traced (a
//! `vmap_call` inside a `value_and_grad` of a program is `grad(vmap(f))`).
//! [`value_and_grad_call`] also keeps the undifferentiated loss visible, so `mpmd_jit` can
//! partition it into pipeline stages.

use crate::autodiff::{jvp, value_and_grad, vjp};
use crate::aval::ShapedArray;
use crate::batching::vmap_named;
use crate::error::Result;
use crate::jaxpr::ClosedJaxpr;
use crate::params::{ParamValue, Params};
use crate::prim::Prim;
use crate::trace::{Tensor, call_closed};

/// Calls the transformed program on `args`; when the transformation failed, fails the trace
/// and stands in for the `expected` results.
fn call_transformed(
    what: &str,
    transformed: Result<ClosedJaxpr>,
    args: &[&Tensor],
    expected: &[ShapedArray],
) -> Vec<Tensor> {
    match (transformed, args.first()) {
        (Ok(program), Some(_)) => call_closed(&program, args),
        (Err(e), Some(first)) => first.fail_with(what, e.to_string(), expected),
        (Ok(_), None) => crate::trace::failure::fail_innermost(
            what,
            "the transformed program is called on no operands; give it at least one".into(),
            expected,
        ),
        (Err(e), None) => crate::trace::failure::fail_innermost(what, e.to_string(), expected),
    }
}

/// `jvp(program)` on `(primals..., tangents...)`: results `(outputs..., output tangents...)`.
pub fn jvp_call(program: &ClosedJaxpr, primals: &[&Tensor], tangents: &[&Tensor]) -> Vec<Tensor> {
    let args: Vec<&Tensor> = primals.iter().chain(tangents).copied().collect();
    let outs = program.jaxpr.out_avals();
    let expected: Vec<ShapedArray> = outs.iter().chain(&outs).cloned().collect();
    call_transformed("jvp", jvp(program), &args, &expected)
}

/// `vjp(program)` on `(primals..., cotangents...)`: the cotangent of every argument.
pub fn vjp_call(program: &ClosedJaxpr, primals: &[&Tensor], cotangents: &[&Tensor]) -> Vec<Tensor> {
    let args: Vec<&Tensor> = primals.iter().chain(cotangents).copied().collect();
    call_transformed("vjp", vjp(program), &args, &program.jaxpr.in_avals())
}

/// `vmap(program, in_axes, out_axes)` on `args` (the batch size read from the first batched
/// argument).
pub fn vmap_call(
    program: &ClosedJaxpr,
    in_axes: &[Option<usize>],
    out_axes: &[usize],
    args: &[&Tensor],
) -> Vec<Tensor> {
    vmap_spmd_call(program, in_axes, out_axes, &[], args)
}

/// [`vmap_call`] with JAX's `spmd_axis_name` (see [`crate::vmap_spmd`]): the batch dimension
/// is split over the mesh axes `spmd_axis_name` in the program's sharding constraints and
/// explicit-sharding types.
pub fn vmap_spmd_call(
    program: &ClosedJaxpr,
    in_axes: &[Option<usize>],
    out_axes: &[usize],
    spmd_axis_name: &[&str],
    args: &[&Tensor],
) -> Vec<Tensor> {
    let size = args
        .iter()
        .zip(in_axes)
        .find_map(|(t, ax)| ax.and_then(|a| t.shape().get(a).copied()));
    let expected: Vec<ShapedArray> = program
        .jaxpr
        .out_avals()
        .iter()
        .enumerate()
        .map(|(k, a)| {
            let mut out = a.clone();
            let at = out_axes.get(k).copied().unwrap_or(0).min(out.rank());
            out.shape.insert(at, size.unwrap_or(1));
            out
        })
        .collect();
    let Some(size) = size else {
        let none = "no argument is batched (every in_axes entry is None)".to_owned();
        return call_transformed(
            "vmap",
            Err(crate::error::type_error("vmap", none)),
            args,
            &expected,
        );
    };
    call_transformed(
        "vmap",
        crate::vmap_spmd(program, in_axes, out_axes, size, spmd_axis_name),
        args,
        &expected,
    )
}

/// JAX's `vmap(f, in_axes, out_axes, axis_name=...)` inside a trace: `f` is traced on one
/// element's slices with the axis `axis_name` bound (of as many elements as the batch), so its
/// collectives may name it (`psum` over the batch, `axis_index` the element's position, ...),
/// then batched ([`vmap_named`]) and called on `args`. An argument whose `in_axes` entry is
/// `None` is shared by every element; results are stacked at their `out_axes` positions.
pub fn vmap_named_call(
    axis_name: &str,
    in_axes: &[Option<usize>],
    out_axes: &[usize],
    args: &[&Tensor],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    let size = args
        .iter()
        .zip(in_axes)
        .find_map(|(t, ax)| ax.and_then(|a| t.shape().get(a).copied()));
    // One element's view: the mapped dimension removed, varying over the axis.
    let avals: Vec<ShapedArray> = args
        .iter()
        .zip(in_axes.iter().chain(std::iter::repeat(&None)))
        .map(|(t, ax)| {
            let mut aval = t.aval().clone();
            if let Some(a) = ax.filter(|&a| a < aval.shape.len()) {
                aval.shape.remove(a);
                aval.vma.insert(axis_name.to_owned());
            }
            aval
        })
        .collect();
    let (body, outs) = match size.map(|n| crate::batching::with_axis(axis_name, n)) {
        Some(Ok(mesh)) => {
            crate::axis_env::with_mesh(&mesh, || crate::trace::trace_counted(&avals, f))
        }
        Some(Err(e)) => (Err(e), crate::trace::trace_counted(&avals, f).1),
        None => {
            let none = "no argument is batched (every in_axes entry is None)".to_owned();
            let counted = crate::trace::trace_counted(&avals, f).1;
            (Err(crate::error::type_error("vmap", none)), counted)
        }
    };
    let size = size.unwrap_or(1);
    let expected: Vec<ShapedArray> = outs
        .iter()
        .enumerate()
        .map(|(k, a)| {
            let mut out = ShapedArray::new(a.dtype, &a.shape);
            let at = out_axes.get(k).copied().unwrap_or(0).min(out.rank());
            out.shape.insert(at, size);
            out
        })
        .collect();
    let batched = body.and_then(|b| vmap_named(&b, in_axes, out_axes, size, axis_name));
    call_transformed("vmap", batched, args, &expected)
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
    record_value_and_grad(loss, argnums, args, false)
}

/// Calls `value_and_grad(loss, argnums, has_aux=True)` on `args`: `loss` returns a scalar loss
/// then auxiliary results (metrics, not differentiated); results `(loss, aux..., grad_0, ...,
/// grad_k)`. In a `treduce` body under `mpmd_jit`, the auxiliary results are pipelined as
/// per-micro-batch metrics.
pub fn value_and_grad_with_aux_call(
    loss: &ClosedJaxpr,
    argnums: &[usize],
    args: &[&Tensor],
) -> Vec<Tensor> {
    record_value_and_grad(loss, argnums, args, true)
}

fn record_value_and_grad(
    loss: &ClosedJaxpr,
    argnums: &[usize],
    args: &[&Tensor],
    has_aux: bool,
) -> Vec<Tensor> {
    let values = if has_aux { usize::MAX } else { 1 };
    let mut expected: Vec<ShapedArray> = loss.jaxpr.out_avals().into_iter().take(values).collect();
    let inputs = loss.jaxpr.in_avals();
    expected.extend(argnums.iter().filter_map(|&a| inputs.get(a).cloned()));
    let Some(first) = args.first() else {
        let e = "the gradient is taken at no operands; give it at least one".to_owned();
        return crate::trace::failure::fail_innermost("value_and_grad", e, &expected);
    };
    let program = match has_aux {
        true => crate::autodiff::value_and_grad_with_aux(loss, argnums),
        false => value_and_grad(loss, argnums),
    };
    match program {
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
        Err(e) => first.fail_with("value_and_grad", e.to_string(), &expected),
    }
}
