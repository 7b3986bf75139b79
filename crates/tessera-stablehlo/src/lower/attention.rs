//! `dot_product_attention` and its backward, lowered as their decomposition
//! (`tessera_ir::prim::attention_program`): the attention the model library computed before
//! the operation existed, on every plugin. (cuDNN's fused kernels, which XLA's GPU compiler
//! runs for JAX's `implementation='cudnn'`, are not emitted yet.)

use melior::ir::Value;
use tessera_ir::params::Params;
use tessera_ir::prim::AttentionOp;

use super::{Ctx, LowerError};

pub(super) fn lower<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    op: AttentionOp,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let program = tessera_ir::prim::attention_program(op, params, ctx.in_avals)
        .map_err(|e| LowerError::Build(e.to_string()))?;
    super::lower_flat(ctx.body, &program, inputs)
}
