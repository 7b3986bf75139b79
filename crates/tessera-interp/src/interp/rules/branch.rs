//! Evaluation rules of the `branch` family (moved from the core crate's `prim/branch.rs`).

use tessera_ir_core::array::Array;
use tessera_ir_core::error::Result;
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::branch::{WhileParams, branch_index, cond_branches};

pub(crate) fn cond_eval(params: &Params, inputs: &[Array]) -> Result<Vec<Array>> {
    let branches = cond_branches(params)?;
    let index = inputs[0].to_vec().first().copied().unwrap_or(0.0);
    let k = branch_index(index, branches.len());
    crate::interp::eval_closed(branches[k], &inputs[1..])
}

pub(crate) fn while_eval(params: &Params, inputs: &[Array]) -> Result<Vec<Array>> {
    let p = WhileParams::read(params)?;
    let (cond_consts, rest) = inputs.split_at(p.cond_nconsts);
    let (body_consts, init) = rest.split_at(p.body_nconsts);
    let mut carry = init.to_vec();
    loop {
        let args: Vec<Array> = cond_consts.iter().chain(&carry).cloned().collect();
        let go = crate::interp::eval_closed(p.cond, &args)?;
        if go[0].to_vec().first().copied().unwrap_or(0.0) == 0.0 {
            return Ok(carry);
        }
        let args: Vec<Array> = body_consts.iter().chain(&carry).cloned().collect();
        carry = crate::interp::eval_closed(p.body, &args)?;
    }
}
