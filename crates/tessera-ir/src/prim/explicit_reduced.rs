//! The reduced (`R:`) and unreduced (`U:`) axes of the results of ordinary (non-collective)
//! primitives, by JAX's rules (`lax.py`'s `*_ur_rule`s, `lax_utils.call_unreduced_rule`) where
//! they are known here:
//!
//! - unary elementwise operations (`neg` included: JAX's `standard_unop` has no unreduced rule)
//!   refuse an unreduced operand and keep the reduced axes (`unop_ur_rule`);
//! - `mul` refuses two unreduced operands (it is bilinear); one unreduced over some axes needs
//!   the other reduced over exactly those axes, and the product is unreduced over them;
//!   otherwise the operands' reduced axes must agree (where given) and the product keeps them
//!   (`_mul_ur_rule`, `default_nary_reduced_rule`);
//! - `dot_general` refuses unreduced operands (`_dot_general_unreduced_rule`);
//! - `reshape`, `slice` and `reduce_sum` keep the operand's reduced and unreduced axes
//!   (`_reshape_ur_rule`, `_slice_ur_rule`, `_reduce_sum_ur_rule`);
//! - `concatenate` needs its unreduced operands unreduced alike and keeps those axes
//!   (`_concatenate_unreduced_rule`);
//! - `add`/`add_any` of operands reduced or unreduced alike keep those axes (the cotangents of
//!   a reduced value's uses accumulate with `add_any` as unreduced values).
//!
//! Other primitives drop both (where JAX keeps or refuses them); the collectives and casts
//! (`collective.rs`, `reduced.rs`) and `shard_map` derive their own.

use std::collections::BTreeSet;

use super::explicit::refuse;
use super::{ElementwiseOp, Family, Prim};
use crate::aval::ShapedArray;
use crate::error::Result;

/// Refuses what JAX refuses of `prim`'s operands' reduced and unreduced axes.
pub(super) fn check(prim: Prim, inputs: &[ShapedArray]) -> Result<()> {
    let unreduced = |a: &ShapedArray| -> Vec<String> { a.unreduced().into_iter().collect() };
    if let Family::Elementwise(ElementwiseOp::Unary(_)) = prim.family()
        && let Some(a) = inputs.iter().find(|a| !a.unreduced().is_empty())
    {
        let axes = unreduced(a);
        return Err(refuse(
            prim,
            format!(
                "its operand {a} is unreduced over {axes:?} (partial sums), which {} cannot \
                 take (JAX's unary operations have no unreduced rule and refuse it too); sum \
                 it first (`psum`/`unreduced_psum` over {axes:?}, or reshard it)",
                prim.name()
            ),
        ));
    }
    if prim == Prim::Mul
        && let [x, y] = inputs
    {
        mul_axes(prim, x, y)?;
    }
    if prim == Prim::DotGeneral
        && let Some(a) = inputs.iter().find(|a| !a.unreduced().is_empty())
    {
        return Err(refuse(
            prim,
            format!(
                "its operand {a} is unreduced over {:?}; dot_general cannot take unreduced \
                 operands (nor in JAX); sum it first (`psum`/`unreduced_psum`)",
                unreduced(a)
            ),
        ));
    }
    if prim == Prim::Concatenate {
        common(prim, inputs, ShapedArray::unreduced, "unreduced")?;
    }
    Ok(())
}

/// The operands' common nonempty axes of one kind (`get` reads them), refusing two
/// different nonempty sets.
fn common(
    prim: Prim,
    inputs: &[ShapedArray],
    get: fn(&ShapedArray) -> BTreeSet<String>,
    what: &str,
) -> Result<BTreeSet<String>> {
    let sets: BTreeSet<BTreeSet<String>> =
        inputs.iter().map(get).filter(|s| !s.is_empty()).collect();
    if sets.len() > 1 {
        return Err(refuse(
            prim,
            format!(
                "its operands are {what} over different mesh axes ({sets:?}); all operands \
                 should be {what} over the same axes, as JAX requires"
            ),
        ));
    }
    Ok(sets.into_iter().next().unwrap_or_default())
}

/// `mul`'s result's reduced and unreduced axes (JAX's `_mul_ur_rule`).
fn mul_axes(
    prim: Prim,
    x: &ShapedArray,
    y: &ShapedArray,
) -> Result<(BTreeSet<String>, BTreeSet<String>)> {
    let (xu, yu) = (x.unreduced(), y.unreduced());
    let need = |u: &BTreeSet<String>, other: &ShapedArray| {
        if other.reduced() == *u {
            Ok((BTreeSet::new(), u.clone()))
        } else {
            Err(refuse(
                prim,
                format!(
                    "one operand is unreduced over {u:?}, so the other ({other}) should be \
                     reduced over exactly those axes (as JAX requires: mul is bilinear); \
                     `preduced` it, or sum the unreduced operand first"
                ),
            ))
        }
    };
    match (xu.is_empty(), yu.is_empty()) {
        (false, false) => Err(refuse(
            prim,
            format!(
                "both operands are unreduced ({x} and {y}); mul is bilinear, so at most one \
                 may be (as in JAX); sum one of them first"
            ),
        )),
        (false, true) => need(&xu, y),
        (true, false) => need(&yu, x),
        (true, true) => Ok((
            common(
                prim,
                &[x.clone(), y.clone()],
                ShapedArray::reduced,
                "reduced",
            )?,
            BTreeSet::new(),
        )),
    }
}

/// Sets the results' reduced and unreduced axes where a rule above derives them.
pub(super) fn carry(prim: Prim, inputs: &[ShapedArray], outs: &mut [ShapedArray]) -> Result<()> {
    let derived = if matches!(prim, Prim::Add | Prim::AddAny) {
        match inputs {
            [a, b] if a.reduced() == b.reduced() && a.unreduced() == b.unreduced() => {
                Some((a.reduced(), a.unreduced()))
            }
            [..] => None,
        }
    } else if prim == Prim::Mul
        && let [x, y] = inputs
    {
        Some(mul_axes(prim, x, y)?)
    } else if matches!(prim, Prim::Reshape | Prim::Slice | Prim::ReduceSum) {
        inputs.first().map(|a| (a.reduced(), a.unreduced()))
    } else if prim == Prim::Concatenate {
        let unreduced = common(prim, inputs, ShapedArray::unreduced, "unreduced")?;
        Some((BTreeSet::new(), unreduced))
    } else {
        None
    };
    if let Some((reduced, unreduced)) = derived {
        for out in outs {
            out.set_reduced_unreduced(reduced.clone(), unreduced.clone());
        }
    }
    Ok(())
}
