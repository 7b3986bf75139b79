//! Reverse-mode differentiation: [`vjp`] turns a program into one that also takes cotangents for
//! its results and returns the cotangents of its arguments. It replays the forward equations,
//! then walks them backwards applying each primitive's rule (in the private module `rules`), accumulating
//! cotangents with `add_any`. Nested calls are inlined first. Integer and boolean values carry
//! no cotangent (their gradients are zeros, JAX's float0).
//!
//! Forward mode lives in [`jvp()`] (module `jvp`, rules in `jvp_rules`); [`linearize()`] splits
//! the JVP program into a primal and a linear tangent program.

mod attention;
mod branch;
mod conv;
mod custom;
mod jvp;
mod jvp_rules;
mod linearize;
mod loops;
mod numeric;
mod parallel;
mod remat;
mod rules;
mod scan;
mod scatter;
mod sort;
mod transpose;
mod window;
mod windowed;

pub use crate::remat_policy::{
    RematPolicy, UnknownRematPolicy, defining_equations, needed, recompute_program,
};
pub use jvp::jvp;
pub use linearize::{Linearized, linearize};
pub use transpose::{VjpSplit, transpose, vjp_split};

use std::collections::HashMap;

use crate::aval::ShapedArray;
use crate::error::Result;
use crate::jaxpr::{Atom, ClosedJaxpr, Var};
use crate::passes::{eliminate_dead_code, inline_calls};
use crate::prim::ReduceOp;
use crate::trace::{Tensor, trace};

/// The VJP program of `program`: arguments `(x..., ct...)` with one cotangent per result,
/// results the cotangent of each argument (zeros for integer and boolean arguments).
pub fn vjp(program: &ClosedJaxpr) -> Result<ClosedJaxpr> {
    vjp_program(program, false)
}

/// `value_and_grad`: for a program with one scalar float result, a program from the same
/// arguments to `(value, grad_0, ..., grad_k)` for the arguments in `argnums`.
pub fn value_and_grad(program: &ClosedJaxpr, argnums: &[usize]) -> Result<ClosedJaxpr> {
    let outs = program.jaxpr.out_avals();
    if outs.len() != 1 || outs[0].rank() != 0 || !outs[0].dtype.is_float() {
        return Err(loss_error(program, "one scalar float result"));
    }
    value_and_grad_with_aux(program, argnums)
}

/// `value_and_grad(has_aux=True)`: for a program whose first result is a scalar float loss and
/// whose other results are auxiliary values (not differentiated), a program from the same
/// arguments to `(loss, aux..., grad_0, ..., grad_k)` for the arguments in `argnums`.
pub fn value_and_grad_with_aux(program: &ClosedJaxpr, argnums: &[usize]) -> Result<ClosedJaxpr> {
    let outs = program.jaxpr.out_avals();
    let n = program.jaxpr.invars.len();
    if outs.is_empty() || outs[0].rank() != 0 || !outs[0].dtype.is_float() {
        return Err(loss_error(program, "a scalar float first result"));
    }
    if let Some(&bad) = argnums.iter().find(|&&a| a >= n) {
        return Err(crate::error::IrError::Type {
            prim: "value_and_grad".into(),
            message: format!("argnum {bad} is out of range for {n} arguments"),
        });
    }
    let both = vjp_program(program, true)?;
    let seeded = trace(&program.jaxpr.in_avals(), |args| {
        let one = args[0].literal_strong(1.0, outs[0].dtype);
        let zeros: Vec<Tensor> = outs[1..]
            .iter()
            .map(|a| {
                let zero = args[0].literal_strong(0.0, a.dtype);
                if a.rank() == 0 {
                    zero
                } else {
                    zero.broadcast_in_dim(&a.shape, &[])
                }
            })
            .collect();
        let mut operands: Vec<&Tensor> = args.iter().collect();
        operands.push(&one);
        operands.extend(zeros.iter());
        let results = crate::trace::call_closed(&both, &operands);
        let k = outs.len();
        let mut picked = results[..k].to_vec();
        picked.extend(argnums.iter().map(|&a| results[k + a].clone()));
        picked
    })?;
    Ok(eliminate_dead_code(&inline_calls(&seeded)))
}

fn loss_error(program: &ClosedJaxpr, needs: &str) -> crate::error::IrError {
    crate::error::IrError::Type {
        prim: "value_and_grad".into(),
        message: format!(
            "needs a program with {needs}, got ({})",
            program
                .jaxpr
                .out_avals()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn vjp_program(program: &ClosedJaxpr, with_values: bool) -> Result<ClosedJaxpr> {
    if !program.consts.is_empty() {
        // Constants are differentiated as leading arguments whose cotangents are dropped.
        let k = program.consts.len();
        let open = vjp_program(&program.consts_as_args(), with_values)?;
        let mut closed = open.close_leading_args(&program.consts);
        let values = if with_values {
            program.jaxpr.outvars.len()
        } else {
            0
        };
        closed.jaxpr.outvars.drain(values..values + k);
        return Ok(eliminate_dead_code(&closed));
    }
    // Loops stay loops (their VJP is a loop), except those combining by `Max`.
    let flat = inline_calls(&crate::passes::unroll_treduce_if(program, |p| {
        p.ops.contains(&ReduceOp::Max)
    })?);
    let jaxpr = &flat.jaxpr;
    let mut avals: Vec<ShapedArray> = jaxpr.in_avals();
    avals.extend(jaxpr.out_avals());
    let n = jaxpr.invars.len();
    let out = trace(&avals, |args| {
        let (primals, cts) = args.split_at(n);
        let mut env: HashMap<Var, Tensor> = HashMap::new();
        for (&v, t) in jaxpr.invars.iter().zip(primals.iter().cloned()) {
            env.insert(v, t);
        }
        let anchor = primals.first().or(cts.first()).cloned();
        let Some(anchor) = anchor else {
            return Vec::new();
        };
        let read = |env: &HashMap<Var, Tensor>, a: &Atom| match a {
            Atom::Var(v) => env[v].clone(),
            Atom::Lit(l) => anchor.literal_exact(l),
        };
        for eqn in &jaxpr.eqns {
            let inputs: Vec<Tensor> = eqn.inputs.iter().map(|a| read(&env, a)).collect();
            let refs: Vec<&Tensor> = inputs.iter().collect();
            let out_aval = eqn.outputs.first().map(|&v| jaxpr.aval(v).clone());
            let outs = if refs.is_empty() {
                vec![Tensor::bind_nullary(eqn.prim, eqn.params.clone(), &anchor)]
            } else {
                Tensor::bind_typed(eqn.prim, eqn.params.clone(), &refs, out_aval)
            };
            for (&v, t) in eqn.outputs.iter().zip(outs) {
                env.insert(v, t);
            }
        }
        let active = active_vars(jaxpr);
        let mut ct_env: HashMap<Var, Tensor> = HashMap::new();
        for (atom, ct) in jaxpr.outvars.iter().zip(cts) {
            if let Atom::Var(v) = atom {
                accumulate(&mut ct_env, *v, ct.clone());
            }
        }
        for eqn in jaxpr.eqns.iter().rev() {
            let gs: Vec<Option<Tensor>> = eqn.outputs.iter().map(|v| ct_env.remove(v)).collect();
            // An equation none of whose operands depends on the arguments (constants, or what
            // `stop_gradient` cut off) passes no cotangent, as in JAX, whose linearization
            // never reaches it: a `pmax` of a stopped value is not differentiated.
            let reaches = eqn
                .inputs
                .iter()
                .any(|a| matches!(a, Atom::Var(v) if active.contains(v)));
            if gs.iter().all(Option::is_none) || !reaches {
                continue;
            }
            let inputs: Vec<Tensor> = eqn.inputs.iter().map(|a| read(&env, a)).collect();
            let outputs: Vec<Tensor> = eqn.outputs.iter().map(|v| env[v].clone()).collect();
            let grads = rules::vjp_rule(eqn.prim, &eqn.params, &inputs, &outputs, &gs);
            for (atom, g) in eqn.inputs.iter().zip(grads) {
                if let (Atom::Var(v), Some(g)) = (atom, g)
                    && jaxpr.aval(*v).dtype.is_float()
                {
                    let g = checked_cotangent(eqn.prim, g, jaxpr.aval(*v));
                    accumulate(&mut ct_env, *v, g);
                }
            }
        }
        let values: Vec<Tensor> = if with_values {
            jaxpr.outvars.iter().map(|a| read(&env, a)).collect()
        } else {
            Vec::new()
        };
        let grads = jaxpr
            .invars
            .iter()
            .zip(primals)
            .map(|(v, x)| ct_env.remove(v).unwrap_or_else(|| rules::zeros_like(x)));
        values.into_iter().chain(grads).collect()
    })?;
    Ok(eliminate_dead_code(&out))
}

/// The variables of `jaxpr` that depend on its arguments through operations other than
/// `stop_gradient`.
fn active_vars(jaxpr: &crate::jaxpr::Jaxpr) -> std::collections::HashSet<Var> {
    let mut active: std::collections::HashSet<Var> = jaxpr.invars.iter().copied().collect();
    for eqn in &jaxpr.eqns {
        let depends = eqn
            .inputs
            .iter()
            .any(|a| matches!(a, Atom::Var(v) if active.contains(v)));
        if depends && eqn.prim != crate::prim::Prim::StopGradient {
            active.extend(eqn.outputs.iter().copied());
        }
    }
    active
}

/// `g`, when it has the type of the operand it is the cotangent of; otherwise the trace fails
/// naming the rule (a wrong rule must not become a silently wrong gradient).
fn checked_cotangent(prim: crate::prim::Prim, g: Tensor, operand: &ShapedArray) -> Tensor {
    if g.shape() == operand.shape.as_slice() && g.dtype() == operand.dtype {
        return g;
    }
    let got = ShapedArray::new(g.dtype(), g.shape());
    g.fail(
        prim.name(),
        format!("its VJP rule gave a cotangent of type {got} for an operand of type {operand}"),
    )
}

fn accumulate(ct_env: &mut HashMap<Var, Tensor>, v: Var, g: Tensor) {
    let next = match ct_env.remove(&v) {
        Some(prev) => rules::add_any(&prev, &g),
        None => g,
    };
    ct_env.insert(v, next);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::prim::Prim;

    #[test]
    fn a_cotangent_of_another_type_fails_the_trace_naming_the_rule() {
        let operand = ShapedArray::new(DType::F32, &[2, 3]);
        let ok = trace(std::slice::from_ref(&operand), |x| {
            vec![checked_cotangent(Prim::Neg, x[0].clone(), &operand)]
        });
        assert!(ok.is_ok());
        let err = trace(std::slice::from_ref(&operand), |x| {
            vec![checked_cotangent(Prim::Neg, x[0].reshape(&[6]), &operand)]
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("neg") && err.contains("f32[6]"), "{err}");
    }
}
