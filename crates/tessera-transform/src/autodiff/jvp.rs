//! Forward-mode differentiation: [`jvp`] turns a program into one that also takes a tangent for
//! each argument and returns the tangent of each result (JAX's `jax.jvp`). It replays the
//! equations once, pushing tangents forward with each primitive's rule (in [`super::jvp_rules`]).
//! Tangents are symbolic zeros (`None`) until a value depends on a tangent input, so untouched
//! values cost nothing; integer and boolean values never carry a tangent, and `stop_gradient`
//! drops it. Nested calls are inlined first.

use std::collections::HashMap;

use super::jvp_rules::jvp_rule;
use super::rules::zeros_like;
use crate::aval::ShapedArray;
use crate::error::{IrError, Result};
use crate::jaxpr::{Atom, ClosedJaxpr, Jaxpr, Var};
use crate::passes::{eliminate_dead_code, inline_calls};
use crate::trace::{Tensor, trace};

/// The JVP program of `program`: arguments `(x..., t...)` with one tangent per argument (of the
/// argument's type; tangents of integer and boolean arguments are ignored), results
/// `(y..., dy...)` with one tangent per result (zeros for integer and boolean results).
pub fn jvp(program: &ClosedJaxpr) -> Result<ClosedJaxpr> {
    if program.jaxpr.invars.is_empty() {
        return Err(IrError::Type {
            prim: "jvp".into(),
            message: "the program takes no arguments; there is nothing to differentiate".into(),
        });
    }
    crate::verify(program)?;
    if program.consts.is_empty() {
        return jvp_open(program, 0);
    }
    // Constants are leading arguments without tangents.
    let open = jvp_open(&program.consts_as_args(), program.consts.len())?;
    Ok(open.close_leading_args(&program.consts))
}

/// The JVP program of a program whose first `fixed` arguments take no tangent (and have no
/// tangent argument).
fn jvp_open(program: &ClosedJaxpr, fixed: usize) -> Result<ClosedJaxpr> {
    let flat = inline_calls(&crate::passes::unroll_treduce(program)?);
    let jaxpr = &flat.jaxpr;
    let mut avals: Vec<ShapedArray> = jaxpr.in_avals();
    avals.extend(jaxpr.in_avals().into_iter().skip(fixed));
    let n = jaxpr.invars.len();
    let out = trace(&avals, |args| {
        let (primals, tangents) = args.split_at(n);
        let Some(anchor) = primals.first().cloned() else {
            return Vec::new();
        };
        let mut env: HashMap<Var, (Tensor, Option<Tensor>)> = HashMap::new();
        let tangents = std::iter::repeat_n(None, fixed).chain(tangents.iter().map(Some));
        for ((&v, x), t) in jaxpr.invars.iter().zip(primals).zip(tangents) {
            let t = t.filter(|_| x.dtype().is_float()).cloned();
            env.insert(v, (x.clone(), t));
        }
        replay(jaxpr, &anchor, &mut env);
        let read = |a: &Atom| read_atom(&env, &anchor, a);
        let values: Vec<(Tensor, Option<Tensor>)> = jaxpr.outvars.iter().map(read).collect();
        let tangents: Vec<Tensor> = values
            .iter()
            .map(|(y, t)| match t {
                Some(t) => fit(t, y),
                None => zeros_like(y),
            })
            .collect();
        values.into_iter().map(|(y, _)| y).chain(tangents).collect()
    })?;
    Ok(eliminate_dead_code(&out))
}

/// Reads an operand: literals are constants with no tangent.
fn read_atom(
    env: &HashMap<Var, (Tensor, Option<Tensor>)>,
    anchor: &Tensor,
    a: &Atom,
) -> (Tensor, Option<Tensor>) {
    match a {
        Atom::Var(v) => env.get(v).cloned().unwrap_or_else(|| {
            (
                anchor.fail("jvp", format!("variable {} is undefined", v.0)),
                None,
            )
        }),
        Atom::Lit(l) => (anchor.literal_exact(l), None),
    }
}

/// Replays `jaxpr`'s equations, computing each result and its tangent.
fn replay(jaxpr: &Jaxpr, anchor: &Tensor, env: &mut HashMap<Var, (Tensor, Option<Tensor>)>) {
    for eqn in &jaxpr.eqns {
        let (xs, ts): (Vec<Tensor>, Vec<Option<Tensor>>) =
            eqn.inputs.iter().map(|a| read_atom(env, anchor, a)).unzip();
        let refs: Vec<&Tensor> = xs.iter().collect();
        let out_aval = eqn.outputs.first().map(|&v| jaxpr.aval(v).clone());
        let ys = if refs.is_empty() {
            vec![Tensor::bind_nullary(eqn.prim, eqn.params.clone(), anchor)]
        } else {
            Tensor::bind_typed(eqn.prim, eqn.params.clone(), &refs, out_aval)
        };
        let dys = if ts.iter().all(Option::is_none) {
            vec![None; ys.len()]
        } else {
            jvp_rule(eqn.prim, &eqn.params, &xs, &ys, &ts)
        };
        for ((&v, y), dy) in eqn.outputs.iter().zip(ys).zip(dys) {
            let dy = dy.filter(|_| y.dtype().is_float()).map(|t| fit(&t, &y));
            env.insert(v, (y, dy));
        }
    }
}

/// Gives a tangent its primal's dtype and shape (elementwise rules may leave a scalar or a
/// size-1 dimension where the result broadcast).
fn fit(t: &Tensor, y: &Tensor) -> Tensor {
    let t = if t.dtype() == y.dtype() {
        t.clone()
    } else {
        t.astype(y.dtype())
    };
    if t.shape() == y.shape() {
        return t;
    }
    if t.rank() == 0 {
        return t.broadcast_in_dim(y.shape(), &[]);
    }
    let dims: Vec<i64> = (0..t.rank() as i64).collect();
    t.broadcast_in_dim(y.shape(), &dims)
}
