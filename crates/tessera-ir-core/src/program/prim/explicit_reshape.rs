//! The sharding rule of `reshape` on explicit types (JAX's `_reshape_sharding_rule`): an
//! unsplit operand gives an unsplit result; otherwise the cases JAX allows are
//! - size-1 dimensions added or removed (the others keep their axes);
//! - one dimension split into several (its axes go to the new dimensions, major first, each
//!   taking axes while their sizes divide it);
//! - several dimensions merged into one (their axes, major to minor, must leave no unsplit
//!   dimension before a split one).
//!
//! Anything else, or axes that do not divide the sizes, is refused, naming the fix: reshard the
//! operand first (or give the result's sharding). Splitting or merging a split dimension needs
//! the mesh's axis sizes (`trace::use_mesh`); without them the rule defers to the result type
//! written for it, if any.

use super::Prim;
use super::explicit::{Dims, axis_size, refuse};
use crate::aval::ShapedArray;
use crate::error::{IrError, Result};

/// How one dimension (of the side with more of them, sizes other than 1) maps to the other.
#[derive(Debug)]
enum Group {
    /// The same size on both sides.
    Same,
    /// These several sizes make up one dimension of the other side.
    Several(Vec<i64>),
}

/// Why a rule could not derive the result's axes.
enum Fail {
    /// JAX refuses this reshape.
    Refused,
    /// The mesh's axis sizes are needed and unknown.
    NoMesh,
}

/// The result's axes, or `None` where the mesh's sizes are needed but not known and `prim`
/// should take the written result type.
pub(super) fn reshape_dims(prim: Prim, x: &ShapedArray, new_sizes: &[i64]) -> Result<Option<Dims>> {
    let dims = x.explicit_dims();
    if dims.iter().all(Vec::is_empty) {
        return Ok(Some(vec![Vec::new(); new_sizes.len()]));
    }
    let refused = || -> IrError {
        refuse(
            prim,
            format!(
                "reshaping {x} to {new_sizes:?} moves split dimensions in a way the sharding \
                 rule cannot follow; reshard the operand (e.g. so that the dimensions involved \
                 are not split) before the reshape, or reshard its result"
            ),
        )
    };
    let op_non1: Vec<i64> = x.shape.iter().copied().filter(|&s| s != 1).collect();
    let new_non1: Vec<i64> = new_sizes.iter().copied().filter(|&s| s != 1).collect();
    let result = if op_non1 == new_non1 {
        Ok(singleton(x, &dims, new_sizes))
    } else {
        match split_on_one_axis(&op_non1, &new_non1) {
            Err(()) => Err(Fail::Refused),
            Ok(Some(groups)) => split_an_axis(x, &dims, &groups, new_sizes),
            Ok(None) => match split_on_one_axis(&new_non1, &op_non1) {
                Err(()) | Ok(None) => Err(Fail::Refused),
                Ok(Some(groups)) => merge_axes(x, &dims, &groups, new_sizes),
            },
        }
    };
    match result {
        Ok(d) => Ok(Some(d)),
        Err(Fail::NoMesh) => Ok(None),
        Err(Fail::Refused) => Err(refused()),
    }
}

/// Only size-1 dimensions come or go.
fn singleton(x: &ShapedArray, dims: &Dims, new_sizes: &[i64]) -> Dims {
    let mut kept = x
        .shape
        .iter()
        .zip(dims)
        .filter(|(s, _)| **s != 1)
        .map(|(_, a)| a.clone());
    new_sizes
        .iter()
        .map(|&n| {
            if n == 1 {
                Vec::new()
            } else {
                kept.next().unwrap_or_default()
            }
        })
        .collect()
}

/// JAX's `_split_on_one_axis`: where `new` has more dimensions than `op`, and one dimension of
/// `op` is several of `new`, the groups of `new` per dimension of `op`. `Err` where more than
/// one dimension splits (JAX refuses), `None` where this is not such a split.
fn split_on_one_axis(op: &[i64], new: &[i64]) -> std::result::Result<Option<Vec<Group>>, ()> {
    if new.len() <= op.len() {
        return Ok(None);
    }
    let (mut i, mut j, mut count) = (0, 0, 0);
    let mut out = Vec::new();
    while j < new.len() {
        let Some(&o) = op.get(i) else {
            return Ok(None);
        };
        if o == new[j] {
            out.push(Group::Same);
        } else {
            count += 1;
            if count > 1 {
                return Err(());
            }
            let mut temp = vec![new[j]];
            while temp.iter().product::<i64>() != o {
                if temp.iter().product::<i64>() > o {
                    return Ok(None);
                }
                j += 1;
                let Some(&n) = new.get(j) else {
                    return Ok(None);
                };
                temp.push(n);
            }
            out.push(Group::Several(temp));
        }
        i += 1;
        j += 1;
    }
    Ok((out.len() == op.len()).then_some(out))
}

/// JAX's `split_partitions`: hands `axes` (major first) to dimensions of `sizes`, each taking
/// axes while it is larger than 1 and their sizes divide it.
fn split_partitions(axes: &[String], sizes: &[i64]) -> std::result::Result<Dims, Fail> {
    let mut rest = axes.iter();
    let mut out = Vec::new();
    for &size in sizes {
        let mut o = size;
        let mut taken = Vec::new();
        while o > 1 {
            let Some(axis) = rest.next() else { break };
            let n = axis_size(axis).ok_or(Fail::NoMesh)?;
            if n <= 0 || o % n != 0 {
                return Err(Fail::Refused);
            }
            o /= n;
            taken.push(axis.clone());
        }
        out.push(taken);
    }
    if rest.next().is_some() {
        return Err(Fail::Refused);
    }
    Ok(out)
}

/// Places the derived axes of the dimensions other than 1 among `new_sizes`; a size-1
/// dimension keeps the axes of a size-1 operand dimension at its position.
fn place(x: &ShapedArray, dims: &Dims, non1: Dims, new_sizes: &[i64]) -> Dims {
    let mut it = non1.into_iter();
    new_sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            if n == 1 {
                if x.shape.get(i) == Some(&1) {
                    dims[i].clone()
                } else {
                    Vec::new()
                }
            } else {
                it.next().unwrap_or_default()
            }
        })
        .collect()
}

/// JAX's `_split_an_axis_sharding_rule`.
fn split_an_axis(
    x: &ShapedArray,
    dims: &Dims,
    groups: &[Group],
    new_sizes: &[i64],
) -> std::result::Result<Dims, Fail> {
    let op_axes: Vec<&Vec<String>> = x
        .shape
        .iter()
        .zip(dims)
        .filter(|(s, _)| **s != 1)
        .map(|(_, a)| a)
        .collect();
    let mut non1 = Vec::new();
    for (g, axes) in groups.iter().zip(op_axes) {
        match g {
            Group::Same => non1.push(axes.clone()),
            Group::Several(sizes) if axes.is_empty() => {
                non1.extend(std::iter::repeat_n(Vec::new(), sizes.len()));
            }
            Group::Several(sizes) => non1.extend(split_partitions(axes, sizes)?),
        }
    }
    Ok(place(x, dims, non1, new_sizes))
}

/// JAX's `_merge_an_axis_sharding_rule`: `groups` are, per result dimension other than 1, the
/// operand dimensions merged into it.
fn merge_axes(
    x: &ShapedArray,
    dims: &Dims,
    groups: &[Group],
    new_sizes: &[i64],
) -> std::result::Result<Dims, Fail> {
    let mut op_axes = x
        .shape
        .iter()
        .zip(dims)
        .filter(|(s, _)| **s != 1)
        .map(|(_, a)| a);
    let new_non1: Vec<i64> = new_sizes.iter().copied().filter(|&s| s != 1).collect();
    let mut non1 = Vec::new();
    for (&size, g) in new_non1.iter().zip(groups) {
        match g {
            Group::Same => non1.push(op_axes.next().cloned().unwrap_or_default()),
            Group::Several(parts) => {
                let merged: Vec<&Vec<String>> = op_axes.by_ref().take(parts.len()).collect();
                if merged.iter().all(|a| a.is_empty()) {
                    non1.push(Vec::new());
                    continue;
                }
                // Unsplit dimensions may follow the split ones, never precede them.
                let last_split = merged.iter().rposition(|a| !a.is_empty()).unwrap_or(0);
                if merged[..last_split].iter().any(|a| a.is_empty()) {
                    return Err(Fail::Refused);
                }
                let flat: Vec<String> = merged.iter().flat_map(|a| a.iter().cloned()).collect();
                non1.extend(split_partitions(&flat, &[size])?);
            }
        }
    }
    Ok(place(x, dims, non1, new_sizes))
}
