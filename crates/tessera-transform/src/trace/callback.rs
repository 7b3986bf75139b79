//! The tracing API of host callbacks (JAX's `jax.pure_callback`,
//! `jax.experimental.io_callback`, `jax.debug.callback`): each registers the closure
//! ([`crate::callback::register`]) and records the callback equation (`prim/callback.rs`).

use std::sync::Arc;

use super::Tensor;
use crate::array::Array;
use crate::aval::ShapedArray;
use crate::callback::register;
use crate::prim::{CallbackOp, CallbackParams, Prim, VmapMethod};

fn bind<F>(
    prim: Prim,
    op: CallbackOp,
    f: F,
    result_avals: &[ShapedArray],
    args: &[&Tensor],
    vmap_method: Option<VmapMethod>,
    ordered: bool,
) -> Vec<Tensor>
where
    F: Fn(&[Array]) -> Result<Vec<Array>, String> + Send + Sync + 'static,
{
    let id = register(Arc::new(f));
    let params = CallbackParams {
        id,
        result_avals: result_avals.to_vec(),
        vmap_method,
        ordered,
    }
    .to_params(op);
    Tensor::bind(prim, params, args)
}

/// `jax.pure_callback(f, result_avals, *args, vmap_method=...)`: calls `f` on the host with
/// `args`' values; it must return arrays of `result_avals`' types and have no side effects (it
/// may be dropped when its results are unused, or called more than once). `vmap_method` says how
/// `vmap` batches it (`None`: `vmap` refuses it). Not differentiable (as in JAX). A callback
/// without operands joins the innermost trace (called outside any trace, it returns placeholders
/// that fail the trace using them).
pub fn pure_callback<F>(
    f: F,
    result_avals: &[ShapedArray],
    args: &[&Tensor],
    vmap_method: Option<VmapMethod>,
) -> Vec<Tensor>
where
    F: Fn(&[Array]) -> Result<Vec<Array>, String> + Send + Sync + 'static,
{
    bind(
        Prim::PureCallback,
        CallbackOp::Pure,
        f,
        result_avals,
        args,
        vmap_method,
        false,
    )
}

/// `jax.experimental.io_callback(f, result_avals, *args, ordered=...)`: like
/// [`pure_callback`] but effectful: always run, even when its results are unused. With
/// `ordered`, calls happen in program order and a program holding one runs on one device only.
pub fn io_callback<F>(
    f: F,
    result_avals: &[ShapedArray],
    args: &[&Tensor],
    ordered: bool,
) -> Vec<Tensor>
where
    F: Fn(&[Array]) -> Result<Vec<Array>, String> + Send + Sync + 'static,
{
    bind(
        Prim::IoCallback,
        CallbackOp::Io,
        f,
        result_avals,
        args,
        None,
        ordered,
    )
}

/// `jax.debug.callback(f, *args)`: calls `f` on the host for its side effect (printing,
/// logging); it returns nothing and is always run.
pub fn debug_callback<F>(f: F, args: &[&Tensor])
where
    F: Fn(&[Array]) + Send + Sync + 'static,
{
    bind(
        Prim::DebugCallback,
        CallbackOp::Debug,
        move |a: &[Array]| {
            f(a);
            Ok(Vec::new())
        },
        &[],
        args,
        None,
        false,
    );
}
