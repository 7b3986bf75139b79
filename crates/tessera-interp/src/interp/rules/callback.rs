//! Evaluation rules of the `callback` family (moved from the core crate's `prim/callback.rs`).

use tessera_ir_core::array::Array;
use tessera_ir_core::error::Result;
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::Prim;
use tessera_ir_core::prim::callback::{CallbackOp, CallbackParams, call_host_callback};

/// The interpreter: calls the closure and checks its results against the declared types.
pub(crate) fn eval(
    prim: Prim,
    op: CallbackOp,
    params: &Params,
    inputs: &[Array],
) -> Result<Vec<Array>> {
    let p = CallbackParams::read(prim, op, params)?;
    call_host_callback(prim.name(), p.id, inputs, &p.result_avals)
}
