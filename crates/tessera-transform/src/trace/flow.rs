//! The tracing API of control flow and custom derivatives: [`custom_jvp`] and
//! [`custom_vjp`] call a function whose derivative is the user's rule; [`scan`],
//! [`fori_loop`], [`while_loop`] and [`fori_loop_dynamic`] record loops whose body is traced
//! once; [`cond`] and [`switch`] record index-selected branches.

use std::cell::Cell;

use super::{Tensor, trace_counted};
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::jaxpr::ClosedJaxpr;
use crate::params::{ParamValue, Params};
use crate::prim::{Prim, cond_params, scan_params, stacked, unstacked, while_params};

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
    crate::rewrite::eliminate_dead_code(&body)
}

/// JAX's `lax.scan`: `f(consts, carry, x_slices) -> (carry, y_slices)` applied `length` times
/// (the leading dimension of every `xs`; given as `length` when there are no `xs`), from the
/// last slice to the first when `reverse`. Returns the final carries and the `ys` stacked along
/// a new leading dimension. The body is traced once: module size and compile time do not grow
/// with `length`. Values the body uses from outside must come in as `consts`.
pub fn scan(
    consts: &[&Tensor],
    init: &[&Tensor],
    xs: &[&Tensor],
    length: Option<i64>,
    reverse: bool,
    f: impl FnOnce(&[Tensor], &[Tensor], &[Tensor]) -> (Vec<Tensor>, Vec<Tensor>),
) -> (Vec<Tensor>, Vec<Tensor>) {
    let length = length.or_else(|| xs.first().and_then(|x| x.shape().first().copied()));
    let (nc, nh) = (consts.len(), init.len());
    let mut avals: Vec<ShapedArray> = consts
        .iter()
        .chain(init)
        .map(|t| t.aval().clone())
        .collect();
    avals.extend(xs.iter().map(|x| unstacked(x.aval())));
    let n_carry = Cell::new(0);
    let (body, outs) = trace_counted(&avals, |a| {
        let (carry, ys) = f(&a[..nc], &a[nc..nc + nh], &a[nc + nh..]);
        n_carry.set(carry.len());
        carry.into_iter().chain(ys).collect()
    });
    let split = n_carry.get().min(outs.len());
    let mut expected: Vec<ShapedArray> = outs[..split].to_vec();
    expected.extend(
        outs[split..]
            .iter()
            .map(|y| stacked(y, length.unwrap_or(0))),
    );
    let operands: Vec<&Tensor> = consts.iter().chain(init).chain(xs).copied().collect();
    let problem = match (length, body) {
        (None, _) => Some("needs `length` when there are no `xs` to scan over".to_owned()),
        (_, Err(e)) => Some(format!("in the loop body: {e}")),
        (Some(_), Ok(_)) if split != nh => Some(format!(
            "the body returns {split} carries for {nh} initial carries"
        )),
        (Some(length), Ok(body)) => {
            let params = scan_params(body, length, reverse, nc, nh);
            let results = match operands.first() {
                Some(_) => bind_checked(Prim::Scan, params, &operands, &expected),
                None => return (Vec::new(), Vec::new()),
            };
            let mut carry = results;
            let ys = carry.split_off(nh.min(carry.len()));
            return (carry, ys);
        }
    };
    let message = problem.unwrap_or_default();
    let mut carry = match operands.first() {
        Some(anchor) => anchor.fail_with("scan", message, &expected),
        None => super::failure::fail_innermost("scan", message, &expected),
    };
    let ys = carry.split_off(split);
    (carry, ys)
}

/// JAX's `lax.fori_loop` with a static trip count: `carry = f(consts, i, carry)` for `i` in
/// `lower..upper` (an `i32` scalar), as a `scan` carrying the counter, as JAX does.
pub fn fori_loop(
    lower: i64,
    upper: i64,
    consts: &[&Tensor],
    init: &[&Tensor],
    f: impl FnOnce(&[Tensor], &Tensor, &[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    let Some(anchor) = consts.first().or(init.first()) else {
        return Vec::new();
    };
    let start = anchor.literal_strong(lower as f64, DType::I32);
    let carries: Vec<&Tensor> = std::iter::once(&start)
        .chain(init.iter().copied())
        .collect();
    let length = Some((upper - lower).max(0));
    let (mut out, _) = scan(consts, &carries, &[], length, false, |c, h, _| {
        let next = &h[0] + 1;
        let mut carry = vec![next];
        carry.extend(f(c, &h[0], &h[1..]));
        (carry, Vec::new())
    });
    if out.is_empty() {
        return out;
    }
    out.split_off(1)
}

/// A branch of [`switch`]: a function of the operands.
pub type Branch<'a> = Box<dyn FnOnce(&[Tensor]) -> Vec<Tensor> + 'a>;

/// JAX's `lax.switch`: `branches[index](operands)`, the index clamped into range (as JAX does).
/// Every branch takes the operands and returns the same types. Each branch is traced once.
pub fn switch(index: &Tensor, operands: &[&Tensor], branches: Vec<Branch<'_>>) -> Vec<Tensor> {
    branch_call(index, operands, branches, true)
}

/// Records a `cond` of `branches` on the index (converted to `i32`; clamped into range when
/// `clamp`).
fn branch_call(
    index: &Tensor,
    operands: &[&Tensor],
    branches: Vec<Branch<'_>>,
    clamp: bool,
) -> Vec<Tensor> {
    let avals = avals_of(operands);
    let mut traced = Vec::new();
    let mut outs = Vec::new();
    let mut failure = None;
    for (k, branch) in branches.into_iter().enumerate() {
        let (result, got) = trace_counted(&avals, branch);
        if outs.is_empty() {
            outs = got;
        }
        match result {
            Ok(b) => traced.push(b),
            Err(e) => {
                failure.get_or_insert(format!("in branch {k}: {e}"));
            }
        }
    }
    if traced.is_empty() && failure.is_none() {
        failure = Some("needs at least one branch".to_owned());
    }
    if let Some(message) = failure {
        return index.fail_with("cond", message, &outs);
    }
    if index.rank() != 0 || !(index.dtype().is_int() || index.dtype() == DType::Bool) {
        let message = format!("the index must be an integer scalar, got {}", index.aval());
        return index.fail_with("cond", message, &outs);
    }
    let last = (traced.len() - 1) as f64;
    let i = index.astype(DType::I32);
    let i = if clamp {
        i.maximum(&i.full_like_scalar(0.0))
            .minimum(&i.full_like_scalar(last))
    } else {
        i
    };
    let mut all: Vec<&Tensor> = vec![&i];
    all.extend(operands.iter().copied());
    bind_checked(Prim::Cond, cond_params(traced), &all, &outs)
}

/// JAX's `lax.cond`: `on_true(operands)` where the boolean scalar `pred` holds, else
/// `on_false(operands)` (a `cond` whose branch 0 is `on_false`, as JAX's).
pub fn cond<'a>(
    pred: &Tensor,
    operands: &[&Tensor],
    on_true: impl FnOnce(&[Tensor]) -> Vec<Tensor> + 'a,
    on_false: impl FnOnce(&[Tensor]) -> Vec<Tensor> + 'a,
) -> Vec<Tensor> {
    if pred.dtype() != DType::Bool || pred.rank() != 0 {
        let (_, outs) = trace_counted(&avals_of(operands), on_true);
        let message = format!("the predicate must be a bool scalar, got {}", pred.aval());
        return pred.fail_with("cond", message, &outs);
    }
    branch_call(
        pred,
        operands,
        vec![Box::new(on_false), Box::new(on_true)],
        false,
    )
}

/// JAX's `lax.while_loop`: `carry = body(consts, carry)` while `cond(consts, carry)` (a bool
/// scalar) holds. Forward-mode differentiable only, as in JAX (reverse mode needs `scan` or
/// [`fori_loop`] with a static trip count).
pub fn while_loop(
    consts: &[&Tensor],
    init: &[&Tensor],
    cond: impl FnOnce(&[Tensor], &[Tensor]) -> Tensor,
    body: impl FnOnce(&[Tensor], &[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    let outs = avals_of(init);
    let Some(anchor) = consts.first().or(init.first()) else {
        return Vec::new();
    };
    let nc = consts.len();
    let avals: Vec<ShapedArray> = consts
        .iter()
        .chain(init)
        .map(|t| t.aval().clone())
        .collect();
    let (cond_jaxpr, _) = trace_counted(&avals, |a| vec![cond(&a[..nc], &a[nc..])]);
    let (body_jaxpr, _) = trace_counted(&avals, |a| body(&a[..nc], &a[nc..]));
    let (cond_jaxpr, body_jaxpr) = match (cond_jaxpr, body_jaxpr) {
        (Ok(c), Ok(b)) => (c, b),
        (Err(e), _) => return anchor.fail_with("while", format!("in the condition: {e}"), &outs),
        (_, Err(e)) => return anchor.fail_with("while", format!("in the body: {e}"), &outs),
    };
    let operands: Vec<&Tensor> = consts.iter().chain(consts).chain(init).copied().collect();
    let params = while_params(body_jaxpr, nc, cond_jaxpr, nc);
    bind_checked(Prim::While, params, &operands, &outs)
}

/// JAX's `lax.fori_loop` with a trip count known only at run time (`lower` and `upper` are
/// `i32` scalars): a `while` loop carrying the counter, forward-mode differentiable only.
pub fn fori_loop_dynamic(
    lower: &Tensor,
    upper: &Tensor,
    consts: &[&Tensor],
    init: &[&Tensor],
    f: impl FnOnce(&[Tensor], &Tensor, &[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    let mut all_consts = vec![upper];
    all_consts.extend(consts.iter().copied());
    let carries: Vec<&Tensor> = std::iter::once(lower).chain(init.iter().copied()).collect();
    let out = while_loop(
        &all_consts,
        &carries,
        |c, h| h[0].lt(&c[0]),
        |c, h| {
            let mut next = vec![&h[0] + 1];
            next.extend(f(&c[1..], &h[0], &h[1..]));
            next
        },
    );
    out.into_iter().skip(1).collect()
}
