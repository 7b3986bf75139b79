//! The type rules of the collectives that change a value's reduced (`R:`) or unreduced (`U:`)
//! axes together with its varying ones, as JAX's abstract evaluation checks them:
//!
//! - `reduced_vary_cast_p` (Reduced -> Varying, the identity on values): the operand must be
//!   reduced over some of the axes and (with `check_vma`) vary over none of them; the result
//!   is no longer reduced over them and varies over them.
//! - `all_gather_reduced` (Varying -> Reduced): an `all_gather` whose operand (with
//!   `check_vma`) varies over some of the axes and is reduced over none of them; the result is
//!   invariant and reduced over them.
//! - `unreduced_reduce_scatter` (`unreduced_psum_scatter`, Unreduced -> Varying): a
//!   `psum_scatter` whose operand is unreduced over some of the axes and (with `check_vma`)
//!   varies over none of them; the result is no longer unreduced over them and varies over
//!   them.
//!
//! The values are those of `pvary`, `all_gather` and `psum_scatter` (the SPMD interpreter and
//! the lowering share their code); only the types differ.

use std::collections::BTreeSet;

use super::collective::{check_axis_size, scatter_shape};
use super::{CollectiveKind, CollectiveParams, Prim};
use crate::aval::ShapedArray;
use crate::axis_env;
use crate::error::{Result, type_error};

fn axes_text(axes: &BTreeSet<String>) -> String {
    let names: Vec<&str> = axes.iter().map(String::as_str).collect();
    format!("{{{}}}", names.join(","))
}

/// `reduced_vary_cast_p`'s result type for operand `x` (`out` is `x` without weak type and
/// sharding).
pub(super) fn reduced_vary_cast(
    prim: Prim,
    x: &ShapedArray,
    mut out: ShapedArray,
    axes: &BTreeSet<String>,
) -> Result<ShapedArray> {
    let reduced = x.reduced();
    if reduced.is_empty() {
        return Err(type_error(
            prim.name(),
            format!(
                "takes only reduced values (`R:` in the type), got {x}; cast an invariant value \
                 with preduced first, or use pvary"
            ),
        ));
    }
    if reduced.is_disjoint(axes) {
        return Err(type_error(
            prim.name(),
            format!(
                "is a Reduced -> Varying cast: its axes {} must be among the operand's reduced \
                 axes {}",
                axes_text(axes),
                axes_text(&reduced)
            ),
        ));
    }
    if axis_env::check_vma() && !x.vma.is_disjoint(axes) {
        return Err(type_error(
            prim.name(),
            format!(
                "the operand cannot vary over the axes it casts over; got {x} and axes {}",
                axes_text(axes)
            ),
        ));
    }
    out.vma = &x.vma | axes;
    out.set_reduced_unreduced(&reduced - axes, x.unreduced());
    Ok(out)
}

/// The result type of `all_gather_reduced` or `unreduced_reduce_scatter` (or their starts) on
/// `x`, over groups of `n` devices (the former reads as an `AllGather`, the latter as a
/// `ReduceScatter`).
pub(super) fn out_type(
    prim: Prim,
    p: &CollectiveParams,
    x: &ShapedArray,
    mut out: ShapedArray,
    n: i64,
) -> Result<Vec<ShapedArray>> {
    let axes: BTreeSet<String> = p.axes.iter().cloned().collect();
    let checked = axis_env::check_vma();
    let (reduced, unreduced) = (x.reduced(), x.unreduced());
    match p.kind {
        CollectiveKind::AllGather {
            dimension,
            tiled,
            axis_size,
        } => {
            if checked && x.vma.is_disjoint(&axes) {
                return Err(type_error(
                    prim.name(),
                    format!(
                        "is a Varying -> Reduced collective: the operand must vary over its axes \
                         {}, but {x} does not (apply pvary first)",
                        axes_text(&axes)
                    ),
                ));
            }
            if !reduced.is_disjoint(&axes) {
                return Err(type_error(
                    prim.name(),
                    format!(
                        "the operand cannot be reduced over the axes it gathers; got {x} and \
                         axes {}",
                        axes_text(&axes)
                    ),
                ));
            }
            check_axis_size(prim, axis_size, n)?;
            if tiled {
                out.shape[dimension] *= n;
            } else {
                out.shape.insert(dimension, n);
            }
            out.vma = &x.vma - &axes;
            out.set_reduced_unreduced(&reduced | &axes, unreduced);
        }
        CollectiveKind::ReduceScatter {
            dimension,
            tiled,
            axis_size,
        } => {
            if unreduced.is_empty() {
                return Err(type_error(
                    prim.name(),
                    format!(
                        "takes only unreduced values (`U:` in the type), got {x}; cast a varying \
                         value with vary_unreduced_cast first, or use psum_scatter"
                    ),
                ));
            }
            if unreduced.is_disjoint(&axes) {
                return Err(type_error(
                    prim.name(),
                    format!(
                        "is an Unreduced -> Varying collective: its axes {} must be among the \
                         operand's unreduced axes {}",
                        axes_text(&axes),
                        axes_text(&unreduced)
                    ),
                ));
            }
            if checked && !x.vma.is_disjoint(&axes) {
                return Err(type_error(
                    prim.name(),
                    format!(
                        "the operand cannot vary over the axes it scatters over; got {x} and \
                         axes {}",
                        axes_text(&axes)
                    ),
                ));
            }
            check_axis_size(prim, axis_size, n)?;
            out.shape = scatter_shape(&x.shape, dimension, n, tiled)?;
            out.vma = &x.vma | &axes;
            out.set_reduced_unreduced(reduced, &unreduced - &axes);
        }
        CollectiveKind::Psum
        | CollectiveKind::Pmax
        | CollectiveKind::Pmin
        | CollectiveKind::Pvary
        | CollectiveKind::AxisIndex
        | CollectiveKind::Ppermute { .. }
        | CollectiveKind::AllToAll { .. }
        | CollectiveKind::Preduced
        | CollectiveKind::VaryUnreducedCast
        | CollectiveKind::UnreducedPsum
        | CollectiveKind::ReducedVaryCast
        | CollectiveKind::RaggedAllToAll
        | CollectiveKind::Psend { .. }
        | CollectiveKind::Precv { .. }
        | CollectiveKind::Pbroadcast { .. } => {
            return Err(type_error(
                prim.name(),
                format!(
                    "has no reduced/unreduced gather or scatter rule for {:?}",
                    p.kind
                ),
            ));
        }
    }
    Ok(vec![out])
}
