//! Control flow and custom derivatives: `custom_jvp_call` and `custom_vjp_call` (a
//! call of `call_jaxpr` whose derivative is the user's rule when one is attached).
//!
//! A custom call from jaxpr text carries no rule (JAX prints the rule as a Python function, e.g.
//! `jvp=jvp` or `jvp_jaxpr_fun=<function ...>`): it is differentiated through its body. One made
//! by the tracing API carries the rule as jaxprs: `jvp_jaxpr` for `custom_jvp_call`, taking
//! `(x..., t...)` to `(y..., ty...)`; `fwd_jaxpr`, taking `x...` to `(y..., residuals...)`, and
//! `bwd_jaxpr`, taking `(residuals..., ct_y...)` to `ct_x...`, for `custom_vjp_call`.

use super::{FlowOp, Prim};
use crate::aval::ShapedArray;
use crate::error::{Result, type_error};
use crate::program::jaxpr::ClosedJaxpr;
use crate::program::params::{ParamValue, Params};

/// The rule attached to a custom call, read from its parameters.
pub enum CustomRule<'p> {
    /// No rule: differentiate the body.
    Body,
    /// `custom_jvp_call`'s JVP rule.
    Jvp(&'p ClosedJaxpr),
    /// `custom_vjp_call`'s forward and backward rules.
    Vjp {
        /// `x... -> (y..., residuals...)`.
        fwd: &'p ClosedJaxpr,
        /// `(residuals..., ct_y...) -> ct_x...`.
        bwd: &'p ClosedJaxpr,
    },
}

/// The rule of a custom call (`prim` is `custom_jvp_call` or `custom_vjp_call`).
pub fn custom_rule(prim: Prim, params: &Params) -> Result<CustomRule<'_>> {
    let opt = |name: &str| {
        if let Some(ParamValue::Jaxpr(j)) = params.get(name) {
            Some(&**j)
        } else {
            None
        }
    };
    if prim == Prim::CustomJvpCall {
        return Ok(opt("jvp_jaxpr").map_or(CustomRule::Body, CustomRule::Jvp));
    }
    match (opt("fwd_jaxpr"), opt("bwd_jaxpr")) {
        (Some(fwd), Some(bwd)) => Ok(CustomRule::Vjp { fwd, bwd }),
        (None, None) => Ok(CustomRule::Body),
        (Some(_), None) | (None, Some(_)) => Err(type_error(
            prim.name(),
            "a custom VJP rule needs both `fwd_jaxpr` and `bwd_jaxpr`",
        )),
    }
}

/// The name a custom call was given (`name=...`), for messages.
pub fn call_name(params: &Params) -> String {
    if let Some(ParamValue::Name(n)) = params.get("name") {
        n.clone()
    } else {
        "custom".to_owned()
    }
}

fn shown(avals: &[ShapedArray]) -> String {
    avals
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn same_types(a: &[ShapedArray], b: &[ShapedArray]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_type(y))
}

/// Checks that `what` (a jaxpr of `prim`) takes `ins` and returns `outs`.
pub(crate) fn check_signature(
    prim: Prim,
    what: &str,
    jaxpr: &ClosedJaxpr,
    ins: &[ShapedArray],
    outs: &[ShapedArray],
) -> Result<()> {
    let (got_in, got_out) = (jaxpr.jaxpr.in_avals(), jaxpr.jaxpr.out_avals());
    if !same_types(&got_in, ins) {
        return Err(type_error(
            prim.name(),
            format!(
                "{what} takes ({}) but must take ({})",
                shown(&got_in),
                shown(ins)
            ),
        ));
    }
    if !same_types(&got_out, outs) {
        return Err(type_error(
            prim.name(),
            format!(
                "{what} returns ({}) but must return ({})",
                shown(&got_out),
                shown(outs)
            ),
        ));
    }
    Ok(())
}

/// Tangent and cotangent types: those of the values (Tessera's tangents keep their primal's
/// type; integer ones are ignored).
fn doubled(a: &[ShapedArray], b: &[ShapedArray]) -> Vec<ShapedArray> {
    a.iter().chain(b).cloned().collect()
}

fn custom_abstract_eval(
    prim: Prim,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    let body = params.jaxpr(prim.name(), "call_jaxpr")?;
    let outs = body.jaxpr.out_avals();
    check_signature(prim, "the body `call_jaxpr`", body, inputs, &outs)?;
    let name = call_name(params);
    match custom_rule(prim, params)? {
        CustomRule::Body => {}
        CustomRule::Jvp(jvp) => check_signature(
            prim,
            &format!("the JVP rule of `{name}`"),
            jvp,
            &doubled(inputs, inputs),
            &doubled(&outs, &outs),
        )?,
        CustomRule::Vjp { fwd, bwd } => {
            let fwd_outs = fwd.jaxpr.out_avals();
            let residuals = fwd_outs.get(outs.len()..).unwrap_or_default().to_vec();
            let mut want = outs.clone();
            want.extend(residuals.iter().cloned());
            check_signature(
                prim,
                &format!("the forward rule of `{name}`"),
                fwd,
                inputs,
                &want,
            )?;
            check_signature(
                prim,
                &format!("the backward rule of `{name}`"),
                bwd,
                &doubled(&residuals, &outs),
                inputs,
            )?;
        }
    }
    Ok(outs)
}

pub(super) fn abstract_eval(
    prim: Prim,
    op: FlowOp,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    match op {
        FlowOp::CustomJvp | FlowOp::CustomVjp => custom_abstract_eval(prim, params, inputs),
        FlowOp::Scan => super::scan::abstract_eval(params, inputs),
        FlowOp::Cond => super::branch::cond_abstract_eval(params, inputs),
        FlowOp::While => super::branch::while_abstract_eval(params, inputs),
    }
}
