//! Evaluation rules of the `shard_map` family (moved from the core crate's `prim/shard_map.rs`).

use tessera_ir_core::array::Array;
use tessera_ir_core::error::Result;
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::shard_map::ShardMapParams;

pub(crate) fn eval(params: &Params, inputs: &[Array]) -> Result<Vec<Array>> {
    crate::interp::spmd::eval_shard_map(&ShardMapParams::read(params)?, inputs)
}
