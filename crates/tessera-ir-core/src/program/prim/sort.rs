//! Sorting and selection: `sort` (several operands of one shape sorted together
//! along `dimension` by the first `num_keys` of them, lexicographically; floats ascending in
//! JAX's order: `-0.0` equal to `0.0`, NaN last) and `top_k` (the `k` largest along `axis`,
//! ties to the lower index, with their `int32` indices). Both interpretations are stable (a
//! stable order is one of the orders `is_stable=False` allows).

use std::cmp::Ordering;

use super::Prim;
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{Result, type_error};
use crate::program::params::Params;

/// The primitives of this family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each is the primitive of the same name
pub enum SortOp {
    Sort,
    TopK,
}

/// `sort`'s parameters, read and checked once for every rule (shape, interpretation,
/// derivatives, batching, lowering). JAX always prints all three (`lax.sort`'s `is_stable`
/// defaults to `True` in Python, not in the equation), so a missing one is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortParams {
    /// The sorted dimension, normalised to `0..rank`.
    pub dimension: usize,
    /// How many leading operands are keys (compared lexicographically).
    pub num_keys: usize,
    /// Whether equal keys keep their order.
    pub is_stable: bool,
}

impl SortParams {
    /// Reads a `sort` equation's parameters for operands of rank `rank` (once: the value is
    /// kept with the parameters).
    pub fn read(params: &Params, rank: usize) -> Result<SortParams> {
        params.typed([0, rank], |params| Self::read_printed(params, rank))
    }

    fn read_printed(params: &Params, rank: usize) -> Result<SortParams> {
        let dim = params.int("sort", "dimension")?;
        Ok(SortParams {
            dimension: super::axis(Prim::Sort, dim, rank)?,
            num_keys: params.int("sort", "num_keys")?.max(0) as usize,
            is_stable: params.bool("sort", "is_stable")?,
        })
    }
}

/// `top_k`'s parameters: `k` and the axis (normalised; the last when not printed, as
/// `lax.top_k` reduces the last axis), read once and kept with the parameters.
pub fn top_k_params(params: &Params, rank: usize) -> Result<(i64, usize)> {
    params.typed([Prim::TopK as usize, rank], |params| {
        read_top_k(params, rank)
    })
}

/// `top_k`'s `k` and the axis it selects along, checked against the operand rank.
pub fn read_top_k(params: &Params, rank: usize) -> Result<(i64, usize)> {
    let k = params.int("top_k", "k")?;
    let axis = match params.get("axis") {
        Some(_) => params.int("top_k", "axis")?,
        None => -1,
    };
    Ok((k, super::axis(Prim::TopK, axis, rank)?))
}

pub(super) fn abstract_eval(
    prim: Prim,
    op: SortOp,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    let name = prim.name();
    let Some(first) = inputs.first() else {
        return Err(type_error(name, "needs at least one operand"));
    };
    match op {
        SortOp::Sort => {
            let keys = SortParams::read(params, first.rank())?.num_keys;
            if keys == 0 || keys > inputs.len() {
                return Err(type_error(
                    name,
                    format!("num_keys must be in 1..={}, got {keys}", inputs.len()),
                ));
            }
            if let Some(other) = inputs.iter().find(|a| a.shape != first.shape) {
                return Err(type_error(
                    name,
                    format!("operands must share one shape, got {first} and {other}"),
                ));
            }
            Ok(inputs
                .iter()
                .map(|a| ShapedArray::new(a.dtype, &a.shape))
                .collect())
        }
        SortOp::TopK => {
            super::arity(prim, inputs.len(), 1)?;
            let (k, axis) = top_k_params(params, first.rank())?;
            let n = first.shape[axis];
            if !(0..=n).contains(&k) {
                return Err(type_error(
                    name,
                    format!("k must be in 0..={n} (the size of axis {axis}), got {k}"),
                ));
            }
            let mut shape = first.shape.clone();
            shape[axis] = k;
            Ok(vec![
                ShapedArray::new(first.dtype, &shape),
                ShapedArray::new(DType::I32, &shape),
            ])
        }
    }
}

/// JAX's sort order of two values: NaN after everything, `-0.0 == 0.0`.
pub fn sort_order(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}
