//! Evaluation rules of the `cumulative` family (moved from the core crate's `prim/cumulative.rs`).

use ndarray::Axis;
use tessera_ir_core::array::{Array, Elem};
use tessera_ir_core::dtype::DType;
use tessera_ir_core::error::Result;
use tessera_ir_core::prim::ReductionParams;
use tessera_ir_core::prim::cumulative::{CumulativeOp, axis_and_reverse};

/// Folds each lane along the axis, rounding each partial result to the dtype.
pub(crate) fn eval(
    op: CumulativeOp,
    typed: &ReductionParams,
    x: &Array,
    out: DType,
) -> Result<Array> {
    let (ax, reverse) = axis_and_reverse(typed)?;
    let mut data = x.elems();
    for mut lane in data.lanes_mut(Axis(ax)) {
        let n = lane.len();
        let mut acc: Option<Elem> = None;
        for k in 0..n {
            let i = if reverse { n - 1 - k } else { k };
            let next = match acc {
                None => lane[i],
                Some(a) => op.combine_elems(a, lane[i], x.dtype()),
            };
            acc = Some(next);
            lane[i] = next;
        }
    }
    // The output dtype is the input's (so no conversion happens).
    Ok(x.with_elems(data).into_dtype(out))
}
