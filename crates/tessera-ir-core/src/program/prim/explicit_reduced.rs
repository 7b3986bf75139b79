//! The reduced (`R:`) and unreduced (`U:`) axes of the results of ordinary (non-collective)
//! primitives, by JAX's rules (`lax.py`'s `*_ur_rule`s, `lax_utils.call_unreduced_rule`). Every
//! primitive has one [`UnreducedRule`], chosen by one exhaustive `match` ([`unreduced_rule`]),
//! so a new primitive must say what it does with partial sums:
//!
//! - the primitives without an unreduced rule (JAX raises `unreduced rule for ... is not
//!   implemented` for them: `neg`, `exp`, `sub`, `div`, comparisons, `pad`, gathers, ...)
//!   refuse an unreduced operand: dropping its axes would type a partial sum as a value;
//! - unary elementwise operations keep the reduced axes (`unop_ur_rule`);
//! - `mul` refuses two unreduced operands (it is bilinear); one unreduced over some axes needs
//!   the other reduced over exactly those axes, and the product is unreduced over them;
//!   otherwise the operands' reduced axes must agree (where given) and the product keeps them
//!   (`_mul_ur_rule`, `default_nary_reduced_rule`);
//! - `dot_general` refuses unreduced operands (`_dot_general_unreduced_rule`);
//! - `reshape`, `slice`, `reduce_sum`, `transpose`, `broadcast_in_dim`, `squeeze`,
//!   `expand_dims` and `convert_element_type` keep the operand's reduced and unreduced axes
//!   (JAX's rules for the first five and `convert_element_type` checked with JAX 0.10.2; the
//!   rest are reshapes);
//! - `concatenate` needs its unreduced operands unreduced alike and keeps those axes
//!   (`_concatenate_unreduced_rule`);
//! - `add`/`add_any` of operands reduced or unreduced alike keep those axes (the cotangents of
//!   a reduced value's uses accumulate with `add_any` as unreduced values); operands unreduced
//!   over different axes, or one unreduced and one not, are refused (JAX: "lhs is unreduced
//!   while rhs is not").
//!
//! The collectives and casts (`collective.rs`, `reduced.rs`), `shard_map`, the loops and the
//! calls (whose results are their bodies' types) derive their own.

use std::collections::BTreeSet;

use super::explicit::refuse;
use super::{BinaryOp, ElementwiseOp, Family, Prim, ReduceKind, ReductionOp, StructuralOp};
use crate::aval::ShapedArray;
use crate::error::Result;

/// What a primitive does with its operands' unreduced (and reduced) axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnreducedRule {
    /// An unreduced operand is refused (JAX has no rule: it raises); unary operations keep the
    /// reduced axes.
    Refuse,
    /// The result keeps the (first) operand's reduced and unreduced axes: a linear map of
    /// each device's partial sum is the partial sum of the map.
    KeepOperands,
    /// `add`/`add_any`: operands unreduced alike (or neither), axes kept where they agree.
    Add,
    /// `mul`: bilinear (`_mul_ur_rule`).
    Mul,
    /// `dot_general`: refuses unreduced operands (`_dot_general_unreduced_rule`).
    DotGeneral,
    /// `concatenate`: operands unreduced alike (`_concatenate_unreduced_rule`).
    Concatenate,
    /// Derived by the primitive's own type rule (collectives, casts, `shard_map`, loops,
    /// calls).
    Own,
}

/// The rule of `prim`: one exhaustive match, so a new primitive must choose.
pub fn unreduced_rule(prim: Prim) -> UnreducedRule {
    use UnreducedRule as R;
    match prim.family() {
        Family::Elementwise(op) => match op {
            ElementwiseOp::Binary(BinaryOp::Add | BinaryOp::AddAny) => R::Add,
            ElementwiseOp::Binary(BinaryOp::Mul) => R::Mul,
            ElementwiseOp::Convert => R::KeepOperands,
            ElementwiseOp::Unary(_)
            | ElementwiseOp::Binary(_)
            | ElementwiseOp::Compare(_)
            | ElementwiseOp::SelectN
            | ElementwiseOp::Clamp => R::Refuse,
        },
        Family::Structural(op) => match op {
            StructuralOp::BroadcastInDim
            | StructuralOp::Reshape
            | StructuralOp::Squeeze
            | StructuralOp::ExpandDims
            | StructuralOp::Transpose
            | StructuralOp::Slice => R::KeepOperands,
            StructuralOp::Concatenate => R::Concatenate,
            StructuralOp::Iota
            | StructuralOp::DynamicSlice
            | StructuralOp::DynamicUpdateSlice
            | StructuralOp::Pad => R::Refuse,
        },
        Family::Reduce(ReductionOp::Reduce(ReduceKind::Sum)) => R::KeepOperands,
        Family::Reduce(_) => R::Refuse,
        Family::Linalg => R::DotGeneral,
        Family::Indexing(_)
        | Family::Numeric(_)
        | Family::Random(_)
        | Family::Sort(_)
        | Family::Window(_)
        | Family::Callback(_)
        | Family::Attention(_) => R::Refuse,
        Family::Control(_)
        | Family::Collective(_)
        | Family::ShardMap
        | Family::Treduce
        | Family::Flow(_) => R::Own,
    }
}

/// Refuses what JAX refuses of `prim`'s operands' reduced and unreduced axes.
pub(super) fn check(prim: Prim, inputs: &[ShapedArray]) -> Result<()> {
    let unreduced = |a: &ShapedArray| -> Vec<String> { a.unreduced().into_iter().collect() };
    let rule = unreduced_rule(prim);
    if rule == UnreducedRule::Refuse
        && let Some(a) = inputs.iter().find(|a| !a.unreduced().is_empty())
    {
        let axes = unreduced(a);
        return Err(refuse(
            prim,
            format!(
                "its operand {a} is unreduced over {axes:?} (partial sums), which {} cannot \
                 take (JAX has no unreduced rule for it and refuses it too); sum it first \
                 (`psum`/`unreduced_psum` over {axes:?}, or reshard it)",
                prim.name()
            ),
        ));
    }
    if rule == UnreducedRule::Add {
        common(prim, inputs, ShapedArray::unreduced, "unreduced")?;
        if let Some(a) = inputs.iter().find(|a| !a.unreduced().is_empty())
            && let Some(b) = inputs.iter().find(|b| b.unreduced().is_empty())
        {
            return Err(refuse(
                prim,
                format!(
                    "one operand ({a}) is unreduced and the other ({b}) is not: the sum would \
                     add the plain value once per device (JAX refuses it too: reduce the \
                     unreduced operand first, with `psum`/`unreduced_psum` or a reshard)"
                ),
            ));
        }
    }
    if rule == UnreducedRule::Mul
        && let [x, y] = inputs
    {
        mul_axes(prim, x, y)?;
    }
    if rule == UnreducedRule::DotGeneral
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
    if rule == UnreducedRule::Concatenate {
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
    let derived = match unreduced_rule(prim) {
        UnreducedRule::Add => match inputs {
            [a, b] if a.reduced() == b.reduced() && a.unreduced() == b.unreduced() => {
                Some((a.reduced(), a.unreduced()))
            }
            [..] => None,
        },
        UnreducedRule::Mul => match inputs {
            [x, y] => Some(mul_axes(prim, x, y)?),
            [..] => None,
        },
        UnreducedRule::KeepOperands => inputs.first().map(|a| (a.reduced(), a.unreduced())),
        UnreducedRule::Concatenate => {
            let unreduced = common(prim, inputs, ShapedArray::unreduced, "unreduced")?;
            Some((BTreeSet::new(), unreduced))
        }
        UnreducedRule::Refuse | UnreducedRule::DotGeneral | UnreducedRule::Own => None,
    };
    if let Some((reduced, unreduced)) = derived {
        for out in outs {
            out.set_reduced_unreduced(reduced.clone(), unreduced.clone());
        }
    }
    Ok(())
}
