//! Unrolling `treduce`: each temporal reduction becomes its body called once per micro-batch on
//! slices of its operands, and the results combined (`concatenate`, `add`, `max`). This is the
//! unpipelined meaning of the loop; transformations (`vjp`, `jvp`, `vmap`) and the single-program
//! lowering work on the unrolled form, while `mpmd_jit` keeps the loop to pipeline it.

use std::collections::HashMap;

use crate::error::Result;
use crate::jaxpr::{ClosedJaxpr, Var};
use crate::params::{ParamValue, Params};
use crate::prim::{Prim, ReduceOp, TreduceParams};
use crate::trace::{Tensor, call_closed, replay, replay_atom, trace};

use crate::rewrite::{eliminate_dead_code, inline_calls};

/// `closed` with every `treduce` unrolled (nested calls are inlined first).
pub fn unroll_treduce(closed: &ClosedJaxpr) -> Result<ClosedJaxpr> {
    unroll_treduce_if(closed, |_| true)
}

/// `closed` with the `treduce`s for which `which` holds unrolled (nested calls are inlined
/// first).
pub fn unroll_treduce_if(
    closed: &ClosedJaxpr,
    which: impl Fn(&TreduceParams<'_>) -> bool,
) -> Result<ClosedJaxpr> {
    let flat = inline_calls(closed);
    let chosen = |e: &crate::jaxpr::Eqn| {
        e.prim == Prim::Treduce && TreduceParams::read(&e.params).is_ok_and(|p| which(&p))
    };
    if !flat.jaxpr.eqns.iter().any(chosen) {
        return Ok(closed.clone());
    }
    if !flat.consts.is_empty() {
        return Err(crate::error::type_error(
            "treduce",
            "unrolling a program with closed-over constants is not supported; pass them as arguments",
        ));
    }
    let jaxpr = &flat.jaxpr;
    let out = trace(&jaxpr.in_avals(), |args| {
        let Some(anchor) = args.first().cloned() else {
            return Vec::new();
        };
        let mut env: HashMap<Var, Tensor> = jaxpr
            .invars
            .iter()
            .copied()
            .zip(args.iter().cloned())
            .collect();
        for eqn in &jaxpr.eqns {
            let inputs: Vec<Tensor> = eqn
                .inputs
                .iter()
                .map(|a| replay_atom(&env, &anchor, a))
                .collect();
            let outs = if chosen(eqn) {
                unrolled(&eqn.params, &inputs, &anchor)
            } else {
                replay(eqn, jaxpr, &inputs, &anchor)
            };
            for (&v, t) in eqn.outputs.iter().zip(outs) {
                env.insert(v, t);
            }
        }
        jaxpr
            .outvars
            .iter()
            .map(|a| replay_atom(&env, &anchor, a))
            .collect()
    })?;
    Ok(eliminate_dead_code(&inline_calls(&out)))
}

fn unrolled(params: &Params, inputs: &[Tensor], anchor: &Tensor) -> Vec<Tensor> {
    let p = match TreduceParams::read(params) {
        Ok(p) => p,
        Err(e) => return vec![anchor.fail("treduce", e.to_string())],
    };
    let mut per_step: Vec<Vec<Tensor>> = Vec::new();
    for i in 0..p.length {
        let args: Vec<Tensor> = inputs
            .iter()
            .enumerate()
            .map(|(k, x)| {
                if k < p.num_invariants {
                    return x.clone();
                }
                let mut shape = x.shape().to_vec();
                shape.remove(p.axis);
                Tensor::slice_axis(x, p.axis, i, i + 1).reshape(&shape)
            })
            .collect();
        let refs: Vec<&Tensor> = args.iter().collect();
        per_step.push(call_closed(p.body, &refs));
    }
    (0..p.ops.len())
        .map(|k| {
            let values: Vec<&Tensor> = per_step.iter().map(|outs| &outs[k]).collect();
            combine(&values, p.ops[k])
        })
        .collect()
}

fn combine(values: &[&Tensor], op: ReduceOp) -> Tensor {
    match op {
        ReduceOp::Concat(a) => {
            let lifted: Vec<Tensor> = values
                .iter()
                .map(|v| {
                    let mut shape = v.shape().to_vec();
                    shape.insert(a as usize, 1);
                    v.reshape(&shape)
                })
                .collect();
            let refs: Vec<&Tensor> = lifted.iter().collect();
            let params = Params::new().with("dimension", ParamValue::Int(a));
            Tensor::bind1(Prim::Concatenate, params, &refs)
        }
        ReduceOp::Add => values[1..]
            .iter()
            .fold(values[0].clone(), |acc, v| &acc + *v),
        ReduceOp::Max => values[1..]
            .iter()
            .fold(values[0].clone(), |acc, v| acc.maximum(v)),
    }
}
