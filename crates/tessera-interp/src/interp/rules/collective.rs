//! Evaluation rules of the `collective` family (moved from the core crate's `prim/collective.rs`).

use tessera_ir_core::array::Array;
use tessera_ir_core::error::{IrError, Result};
use tessera_ir_core::prim::Prim;

/// Evaluation on one device is impossible: collectives need every device's operand.
pub(crate) fn eval(prim: Prim) -> Result<Vec<Array>> {
    Err(IrError::Eval(format!(
        "{} is a collective: it runs only inside shard_map, whose interpreter evaluates all \
         devices together",
        prim.name()
    )))
}
