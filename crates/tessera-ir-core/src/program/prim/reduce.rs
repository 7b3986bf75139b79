//! Reductions over axes (`reduce_sum/max/min/prod/and/or`), `argmax`/`argmin`, `cumsum` and
//! the other cumulative reductions (module `cumulative`).

use super::{Prim, ReduceKind, ReductionOp, ReductionParams, arity};
use crate::aval::ShapedArray;
use crate::error::{Result, type_error};
use crate::program::params::Params;

pub(super) fn abstract_eval(
    prim: Prim,
    op: ReductionOp,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    arity(prim, inputs.len(), 1)?;
    let x = &inputs[0];
    let typed = ReductionParams::read(prim, params, x.rank())?;
    if let ReductionParams::Scan { .. } = typed {
        return Ok(vec![x.clone()]);
    }
    let axes = typed.axes();
    let shape: Vec<i64> = x
        .shape
        .iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, &d)| d)
        .collect();
    let logical = matches!(op, ReductionOp::Reduce(ReduceKind::And | ReduceKind::Or));
    if logical && x.dtype.is_float() {
        return Err(type_error(
            prim.name(),
            format!("needs boolean or integer operands, got {x}"),
        ));
    }
    let dtype = match typed {
        ReductionParams::Index { index_dtype, .. } => index_dtype,
        ReductionParams::Axes(_) | ReductionParams::Scan { .. } => x.dtype,
    };
    Ok(vec![ShapedArray {
        dtype,
        shape,
        weak_type: false,
        vma: Default::default(),
        sharding: None,
        explicit: None,
    }])
}
