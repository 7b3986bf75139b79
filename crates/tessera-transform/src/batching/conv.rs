//! Batching of `conv_general_dilated`, JAX's `_conv_general_dilated_batch_rule`: the batch
//! dimension is folded into the input's batch (or its feature groups when both operands are
//! batched) and into the kernel's output features, and split out of the result again.

use super::Batched;
use super::rules::{malformed, unsupported};
use crate::params::Params;
use crate::prim::{ConvParams, Prim};
use crate::programs::conv::{axis_into, axis_out_of, conv as bind_conv};

/// Batches a convolution with at least one batched operand.
pub(super) fn conv(params: &Params, args: &[Batched], _size: i64) -> Batched {
    let (lhs, lb) = &args[0];
    let (rhs, rb) = &args[1];
    let rank = lhs.rank() - usize::from(lb.is_some());
    let c = match ConvParams::read(params, rank) {
        Ok(c) => c,
        Err(e) => return (malformed(args, Prim::ConvGeneralDilated, &e), None),
    };
    let (ls, rs, os) = (&c.lhs_spec, &c.rhs_spec, &c.out_spec);
    let (fgc, bgc) = (c.feature_group_count, c.batch_group_count);
    match (*lb, *rb) {
        (Some(lb), Some(rb)) => {
            let b = lhs.shape()[lb];
            let mut t = c.clone();
            let new_lhs = if bgc > 1 {
                t.batch_group_count *= b;
                axis_into(lb, ls[0], lhs)
            } else {
                t.feature_group_count *= b;
                axis_into(lb, ls[1], lhs)
            };
            let new_rhs = axis_into(rb, rs[0], rhs);
            let out = bind_conv(params, &t, &new_lhs, &new_rhs);
            (axis_out_of(os[1], b, &out), Some(os[1]))
        }
        (Some(lb), None) => {
            let b = lhs.shape()[lb];
            let new_lhs = if bgc == 1 {
                axis_into(lb, ls[0], lhs)
            } else {
                let x = axis_out_of(ls[0] + usize::from(lb <= ls[0]), bgc, lhs);
                let x = axis_into(lb + usize::from(ls[0] < lb), ls[0] + 1, &x);
                axis_into(ls[0], ls[0], &x)
            };
            let out = bind_conv(params, &c, &new_lhs, rhs);
            (axis_out_of(os[0], b, &out), Some(os[0]))
        }
        (None, Some(rb)) => {
            let b = rhs.shape()[rb];
            if fgc == 1 && bgc == 1 {
                let out = bind_conv(params, &c, lhs, &axis_into(rb, rs[0], rhs));
                return (axis_out_of(os[1], b, &out), Some(os[1]));
            }
            let group = fgc.max(bgc);
            let k = axis_out_of(rs[0] + usize::from(rb <= rs[0]), group, rhs);
            let k = axis_into(rb + usize::from(rs[0] < rb), rs[0] + 1, &k);
            let k = axis_into(rs[0], rs[0], &k);
            let out = bind_conv(params, &c, lhs, &k);
            let out = axis_out_of(os[1], group, &out);
            let out = axis_out_of(os[1] + 1, b, &out);
            (axis_into(os[1], os[1] + 1, &out), Some(os[1]))
        }
        (None, None) => (
            unsupported(args, Prim::ConvGeneralDilated, "unbatched operands here"),
            None,
        ),
    }
}
