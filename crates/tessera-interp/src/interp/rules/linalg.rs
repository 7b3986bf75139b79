//! Evaluation rules of the `linalg` family (moved from the core crate's `prim/linalg.rs`).

use ndarray::IxDyn;
use tessera_ir_core::array::{Array, is_exact_int};
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::error::{IrError, Result};
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::Prim;
use tessera_ir_core::prim::linalg::{contract, dot_dims};

pub(crate) fn eval(
    _prim: Prim,
    params: &Params,
    inputs: &[Array],
    outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    let dd = dot_dims(params)?;
    let dims: Vec<usize> = outputs[0].shape.iter().map(|&d| d as usize).collect();
    let reshape = |e: ndarray::ShapeError| IrError::Eval(e.to_string());
    let out = &outputs[0];
    // Integer products accumulate exactly and wrap, as XLA's integer dot does.
    if is_exact_int(inputs[0].dtype()) && is_exact_int(inputs[1].dtype()) {
        let data = contract(&dd, &inputs[0].ints(), &inputs[1].ints(), 0, |acc, a, b| {
            acc.wrapping_add(a.wrapping_mul(b))
        })?;
        let data = data.into_shape_with_order(IxDyn(&dims)).map_err(reshape)?;
        return Ok(vec![Array::from_ints(out.dtype, data)]);
    }
    let data = contract(
        &dd,
        &inputs[0].values(),
        &inputs[1].values(),
        0.0,
        |acc, a, b| acc + a * b,
    )?;
    let data = data.into_shape_with_order(IxDyn(&dims)).map_err(reshape)?;
    Ok(vec![Array::from_values(out.dtype, data)])
}
