//! The tracing API of control flow and custom derivatives (issue 20): [`custom_jvp`] and
//! [`custom_vjp`] call a function whose derivative is the user's rule.

use std::cell::Cell;

use super::{Tensor, trace_counted};
use crate::aval::ShapedArray;
use crate::jaxpr::ClosedJaxpr;
use crate::params::{ParamValue, Params};
use crate::prim::Prim;

fn avals_of(args: &[&Tensor]) -> Vec<ShapedArray> {
    args.iter().map(|t| t.aval().clone()).collect()
}

/// Records `prim` with `params` on `args` after checking its rules' types; a failure is
/// recorded in the trace with `outs` placeholders.
fn bind_checked(prim: Prim, params: Params, args: &[&Tensor], outs: &[ShapedArray]) -> Vec<Tensor> {
    let anchor = args[0];
    match prim.abstract_eval(&params, &avals_of(args), None) {
        Ok(_) => Tensor::bind(prim, params, args),
        Err(e) => anchor.fail_with(prim.name(), e.to_string(), outs),
    }
}

/// JAX's `jax.custom_jvp`: `primal(args)`, whose derivative is `jvp`: given the primals and
/// their tangents (each of its primal's type; those of integer operands are zeros), the results
/// and their tangents. Reverse mode transposes the rule, as JAX does. A rule whose results have
/// the wrong types is an error naming the rule (`name`).
pub fn custom_jvp(
    name: &str,
    args: &[&Tensor],
    primal: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
    jvp: impl FnOnce(&[Tensor], &[Tensor]) -> (Vec<Tensor>, Vec<Tensor>),
) -> Vec<Tensor> {
    let Some(anchor) = args.first() else {
        return Vec::new();
    };
    let avals = avals_of(args);
    let n = avals.len();
    let (body, outs) = trace_counted(&avals, primal);
    let doubled: Vec<ShapedArray> = avals.iter().chain(&avals).cloned().collect();
    let (rule, _) = trace_counted(&doubled, |a| {
        let (ys, ts) = jvp(&a[..n], &a[n..]);
        ys.into_iter().chain(ts).collect()
    });
    let (body, rule) = match (body, rule) {
        (Ok(b), Ok(r)) => (b, r),
        (Err(e), _) => return anchor.fail_with("custom_jvp", format!("in `{name}`: {e}"), &outs),
        (_, Err(e)) => {
            let msg = format!("in the JVP rule of `{name}`: {e}");
            return anchor.fail_with("custom_jvp", msg, &outs);
        }
    };
    let params = Params::new()
        .with("name", ParamValue::Name(name.to_owned()))
        .with("call_jaxpr", ParamValue::Jaxpr(Box::new(body)))
        .with("jvp_jaxpr", ParamValue::Jaxpr(Box::new(rule)))
        .with("symbolic_zeros", ParamValue::Bool(false));
    bind_checked(Prim::CustomJvpCall, params, args, &outs)
}

/// JAX's `jax.custom_vjp`: `fwd(args)` gives `(results, residuals)`; the call computes the
/// results, and its derivative is `bwd(residuals, cotangents)`, the cotangents of the operands
/// (each of its operand's type; zeros for integer operands). Forward mode is refused, as in JAX.
/// A rule whose results have the wrong types is an error naming the rule (`name`).
pub fn custom_vjp(
    name: &str,
    args: &[&Tensor],
    fwd: impl FnOnce(&[Tensor]) -> (Vec<Tensor>, Vec<Tensor>),
    bwd: impl FnOnce(&[Tensor], &[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    let Some(anchor) = args.first() else {
        return Vec::new();
    };
    let avals = avals_of(args);
    let n_out = Cell::new(0);
    let (fwd, fwd_outs) = trace_counted(&avals, |a| {
        let (ys, res) = fwd(a);
        n_out.set(ys.len());
        ys.into_iter().chain(res).collect()
    });
    let (outs, residuals) = fwd_outs.split_at(n_out.get().min(fwd_outs.len()));
    let fwd = match fwd {
        Ok(f) => f,
        Err(e) => {
            let msg = format!("in the forward rule of `{name}`: {e}");
            return anchor.fail_with("custom_vjp", msg, outs);
        }
    };
    let bwd_in: Vec<ShapedArray> = residuals.iter().chain(outs).cloned().collect();
    let k = residuals.len();
    let (bwd, _) = trace_counted(&bwd_in, |a| bwd(&a[..k], &a[k..]));
    let bwd = match bwd {
        Ok(b) => b,
        Err(e) => {
            let msg = format!("in the backward rule of `{name}`: {e}");
            return anchor.fail_with("custom_vjp", msg, outs);
        }
    };
    let params = Params::new()
        .with("name", ParamValue::Name(name.to_owned()))
        .with(
            "call_jaxpr",
            ParamValue::Jaxpr(Box::new(primal_part(&fwd, outs.len()))),
        )
        .with("fwd_jaxpr", ParamValue::Jaxpr(Box::new(fwd)))
        .with("bwd_jaxpr", ParamValue::Jaxpr(Box::new(bwd)))
        .with("symbolic_zeros", ParamValue::Bool(false));
    bind_checked(Prim::CustomVjpCall, params, args, outs)
}

/// The forward rule without its residuals: the primal computation.
fn primal_part(fwd: &ClosedJaxpr, n_out: usize) -> ClosedJaxpr {
    let mut body = fwd.clone();
    body.jaxpr.outvars.truncate(n_out);
    crate::passes::eliminate_dead_code(&body)
}
