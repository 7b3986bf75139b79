//! Evaluation rules of the `scan` family (moved from the core crate's `prim/scan.rs`).

use tessera_ir_core::array::Array;
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::error::Result;
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::scan::{ScanParams, stack_ys};

pub(crate) fn eval(
    params: &Params,
    inputs: &[Array],
    outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    let p = ScanParams::read(params)?;
    let fixed = p.num_consts + p.num_carry;
    let mut carry: Vec<Array> = inputs[p.num_consts..fixed].to_vec();
    let n_ys = outputs.len() - p.num_carry;
    let mut ys: Vec<Vec<Option<Array>>> = vec![vec![None; p.length as usize]; n_ys];
    for i in 0..p.length {
        let k = p.index(i) as usize;
        let mut args = inputs[..p.num_consts].to_vec();
        args.append(&mut carry);
        for x in &inputs[fixed..] {
            args.push(x.row(k)?);
        }
        let mut outs = crate::interp::eval_closed(p.body, &args)?;
        let y = outs.split_off(p.num_carry);
        carry = outs;
        for (slot, value) in ys.iter_mut().zip(y) {
            slot[k] = Some(value);
        }
    }
    let stacked_ys = stack_ys(ys, &outputs[p.num_carry..]);
    carry.into_iter().map(Ok).chain(stacked_ys).collect()
}
