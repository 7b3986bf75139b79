//! Evaluation rules of the `treduce` family (moved from the core crate's `prim/treduce.rs`).

use ndarray::Axis;
use tessera_ir_core::array::Array;
use tessera_ir_core::error::Result;
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::treduce::{TreduceParams, combine_micro_batches};

/// The sequential loop: the body on each micro-batch, results combined in order.
pub(crate) fn eval(params: &Params, inputs: &[Array]) -> Result<Vec<Array>> {
    let p = TreduceParams::read(params)?;
    let mut state: Vec<Vec<Array>> = vec![Vec::new(); p.ops.len()];
    // The looped operands, decoded once; each step takes its slice along the axis.
    let looped: Vec<_> = inputs[p.num_invariants..]
        .iter()
        .map(Array::elems)
        .collect();
    for i in 0..p.length as usize {
        let mut args: Vec<Array> = inputs[..p.num_invariants].to_vec();
        for (x, elems) in inputs[p.num_invariants..].iter().zip(&looped) {
            args.push(x.with_elems(elems.index_axis(Axis(p.axis), i).to_owned()));
        }
        for (k, value) in crate::interp::eval_closed(p.body, &args)?
            .into_iter()
            .enumerate()
        {
            state[k].push(value);
        }
    }
    state
        .into_iter()
        .zip(&p.ops)
        .map(|(values, &op)| combine_micro_batches(values, op))
        .collect()
}
