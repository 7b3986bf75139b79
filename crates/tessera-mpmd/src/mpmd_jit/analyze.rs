//! Reading a step for `mpmd_jit`: its one `treduce`, the `value_and_grad_call` in the loop body
//! (the loss, its parameters, and where each loss argument comes from), and the code after the
//! loop as a program of its own.

use std::collections::HashMap;

use tessera_ir::prim::TreduceParams;
use tessera_ir::{Atom, ClosedJaxpr, Eqn, Jaxpr, ParamValue, Prim};

use super::config;
use crate::driver::DriverError;

/// Where a loss argument's value comes from in the step.
#[derive(Debug, Clone, Copy)]
pub(super) enum LossInput {
    /// A parameter: step argument `i`, the same for every micro-batch.
    Param(usize),
    /// Loop-invariant data: step argument `i`, the same for every micro-batch.
    Invariant(usize),
    /// Sliced data: micro-batch `mb` of step argument `i`.
    Sliced(usize),
}

/// The loop equation and the step argument behind each of its operands.
pub(super) fn find_loop(jaxpr: &Jaxpr) -> Result<(usize, Vec<usize>), DriverError> {
    let loops: Vec<usize> = (0..jaxpr.eqns.len())
        .filter(|&i| jaxpr.eqns[i].prim == Prim::Treduce)
        .collect();
    let [index] = loops[..] else {
        return Err(config(format!(
            "mpmd_jit needs exactly one treduce in the step, found {}",
            loops.len()
        )));
    };
    let operands = jaxpr.eqns[index]
        .inputs
        .iter()
        .map(|a| match a {
            Atom::Var(v) => jaxpr.invars.iter().position(|i| i == v),
            Atom::Lit(_) => None,
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| config("every operand of the treduce must be an argument of the step; compute the micro-batches outside the step"))?;
    Ok((index, operands))
}

/// The loss, its parameter argnums, and the step argument of each loss argument.
pub(super) fn read_body(
    p: &TreduceParams<'_>,
    operands: &[usize],
) -> Result<(ClosedJaxpr, Vec<usize>, Vec<LossInput>), DriverError> {
    let body = &p.body.jaxpr;
    let shape_error = || {
        config(
            "the treduce body must be one value_and_grad_call(loss, argnums, args) whose results are the body's results",
        )
    };
    let [call] = &body.eqns[..] else {
        return Err(shape_error());
    };
    let is_vag = call.prim == Prim::Jit
        && matches!(call.params.get("name"), Some(ParamValue::Name(n)) if n == "value_and_grad");
    let same_outputs = body.outvars.len() == call.outputs.len()
        && body
            .outvars
            .iter()
            .zip(&call.outputs)
            .all(|(a, v)| *a == Atom::Var(*v));
    if !is_vag || !same_outputs {
        return Err(shape_error());
    }
    let loss = match call.params.get("primal") {
        Some(ParamValue::Jaxpr(j)) => (**j).clone(),
        _ => return Err(shape_error()),
    };
    let argnums: Vec<usize> = call
        .params
        .get("argnums")
        .and_then(ParamValue::as_ints)
        .ok_or_else(shape_error)?
        .into_iter()
        .map(|a| a as usize)
        .collect();
    let inputs = loss_inputs(call, body, p, operands, &argnums)?;
    Ok((loss, argnums, inputs))
}

fn loss_inputs(
    call: &Eqn,
    body: &Jaxpr,
    p: &TreduceParams<'_>,
    operands: &[usize],
    argnums: &[usize],
) -> Result<Vec<LossInput>, DriverError> {
    call.inputs
        .iter()
        .enumerate()
        .map(|(a, atom)| {
            let b = match atom {
                Atom::Var(v) => body.invars.iter().position(|i| i == v),
                Atom::Lit(_) => None,
            }
            .ok_or_else(|| config(format!("argument {a} of the loss must be a parameter of the loop body")))?;
            let arg = operands[b];
            let invariant = b < p.num_invariants;
            match (argnums.contains(&a), invariant) {
                (true, true) => Ok(LossInput::Param(arg)),
                (true, false) => Err(config(format!("loss argument {a} is differentiated but sliced per micro-batch; pass parameters as loop invariants"))),
                (false, true) => Ok(LossInput::Invariant(arg)),
                (false, false) => Ok(LossInput::Sliced(arg)),
            }
        })
        .collect()
}

/// The step without its loop: arguments `(step args..., loop results...)`, the step's results.
pub(super) fn update_program(step: &ClosedJaxpr, index: usize) -> Result<ClosedJaxpr, DriverError> {
    let jaxpr = &step.jaxpr;
    let looped = &jaxpr.eqns[index];
    let mut avals = jaxpr.in_avals();
    avals.extend(looped.outputs.iter().map(|&v| jaxpr.aval(v).clone()));
    tessera_ir::trace::trace(&avals, |args| {
        let mut env: HashMap<_, _> = jaxpr
            .invars
            .iter()
            .copied()
            .zip(args.iter().cloned())
            .collect();
        env.extend(
            looped
                .outputs
                .iter()
                .copied()
                .zip(args[jaxpr.invars.len()..].iter().cloned()),
        );
        let Some(anchor) = args.first().cloned() else {
            return Vec::new();
        };
        for (i, eqn) in jaxpr.eqns.iter().enumerate() {
            if i == index {
                continue;
            }
            tessera_ir::trace::replay_into(&mut env, jaxpr, eqn, &anchor);
        }
        jaxpr
            .outvars
            .iter()
            .map(|a| tessera_ir::trace::replay_atom(&env, &anchor, a))
            .collect()
    })
    .map_err(|e| config(format!("the code after the treduce: {e}")))
}
