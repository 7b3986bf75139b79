//! Control flow and custom derivatives (issue 20). A custom call (`custom_jvp_call`,
//! `custom_vjp_call`) computes its body: the body is lowered in place (its rule matters only to
//! differentiation, which happened before lowering).

use melior::ir::Value;
use tessera_ir::Params;

use super::control::constant_array;
use super::{Ctx, Functions, ir, lower_body};
use crate::context::LowerError;

/// Lowers a custom call to its body's operations.
pub(super) fn custom_call<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: tessera_ir::Prim,
    params: &Params,
    inputs: &[Value<'c, 'b>],
    functions: &mut Functions<'_, 'c>,
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let body = params.jaxpr(prim.name(), "call_jaxpr").map_err(ir)?;
    let consts = body
        .consts
        .iter()
        .map(|c| constant_array(ctx.body, c))
        .collect::<Result<Vec<_>, _>>()?;
    lower_body(ctx.body, &body.jaxpr, &consts, inputs, functions)
}
