//! Batching of the windowed primitives: the batch dimension goes in front, where the window
//! has size 1, stride 1 and no padding or dilation. A batched init value of the generic
//! `reduce_window` is refused.

use super::rules::{malformed, unsupported};
use super::{Batched, to_front, with_param};
use crate::params::Params;
use crate::prim::{Prim, WindowOp, WindowParams};
use crate::trace::Tensor;

/// `params` with the window fields it prints replaced by those of `w`.
fn with_window(params: &Params, w: &WindowParams) -> Params {
    let new = w.to_params();
    let mut out = params.clone();
    for (key, value) in new.into_entries() {
        if params.get(&key).is_some() {
            out = with_param(&out, &key, value);
        }
    }
    out
}

/// Batches a windowed primitive.
pub(super) fn window(prim: Prim, params: &Params, args: &[Batched], size: i64) -> Batched {
    let Some(op) = prim.window() else {
        return (
            unsupported(args, prim, "a primitive outside the window family"),
            None,
        );
    };
    // The operand whose shape the window describes.
    let operand = match op {
        WindowOp::Conv => return super::conv::conv(params, args, size),
        WindowOp::SelectAndScatterAdd => &args[1],
        WindowOp::Sum | WindowOp::Max | WindowOp::Min | WindowOp::Generic => &args[0],
    };
    let rank = operand.0.rank() - usize::from(operand.1.is_some());
    let w = match WindowParams::read(prim.name(), params, rank) {
        Ok(w) => w,
        Err(e) => return (malformed(args, prim, &e), None),
    };
    let p = with_window(params, &w.with_leading());
    let out = match op {
        WindowOp::Sum | WindowOp::Max | WindowOp::Min => {
            Tensor::bind1(prim, p, &[&to_front(&args[0], size)])
        }
        WindowOp::Conv => unsupported(args, prim, "a convolution here"),
        WindowOp::Generic if args[1].1.is_some() => unsupported(args, prim, "a batched init value"),
        WindowOp::Generic => Tensor::bind1(prim, p, &[&to_front(&args[0], size), &args[1].0]),
        WindowOp::SelectAndScatterAdd => Tensor::bind1(
            prim,
            p,
            &[&to_front(&args[0], size), &to_front(&args[1], size)],
        ),
    };
    (out, Some(0))
}
