//! `dot_general`: contractions with batch dimensions, results ordered batch, lhs free, rhs free.

use ndarray::{ArrayD, IxDyn};

use super::{Prim, arity};
use crate::aval::ShapedArray;
use crate::error::{IrError, Result, type_error};
use crate::program::params::{ParamValue, Params};

/// `dot_general`'s `dimension_numbers`: `((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))`.
/// The one reader of that parameter; the shape rule, interpreter, autodiff and lowering use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DotDims {
    /// Contracted dimensions of the left operand.
    pub lhs_contract: Vec<usize>,
    /// Contracted dimensions of the right operand, pairwise with `lhs_contract`.
    pub rhs_contract: Vec<usize>,
    /// Batch dimensions of the left operand.
    pub lhs_batch: Vec<usize>,
    /// Batch dimensions of the right operand, pairwise with `lhs_batch`.
    pub rhs_batch: Vec<usize>,
}

impl DotDims {
    /// The left operand's dimensions that are neither contracted nor batch, in order.
    pub fn lhs_free(&self, rank: usize) -> Vec<usize> {
        free_dims(rank, &self.lhs_contract, &self.lhs_batch)
    }

    /// The right operand's dimensions that are neither contracted nor batch, in order.
    pub fn rhs_free(&self, rank: usize) -> Vec<usize> {
        free_dims(rank, &self.rhs_contract, &self.rhs_batch)
    }
}

/// The dimensions of `0..rank` in neither `contract` nor `batch`, in order.
pub fn free_dims(rank: usize, contract: &[usize], batch: &[usize]) -> Vec<usize> {
    (0..rank)
        .filter(|d| !contract.contains(d) && !batch.contains(d))
        .collect()
}

/// Reads `dot_general`'s `dimension_numbers` (once: the value is kept with the parameters).
pub fn dot_dims(params: &Params) -> Result<DotDims> {
    params.typed([Prim::DotGeneral as usize, 0], read_dot_dims)
}

/// The dimension numbers of `dot_general`, read from its parameters.
pub fn read_dot_dims(params: &Params) -> Result<DotDims> {
    let bad = || {
        type_error(
            "dot_general",
            "dimension_numbers must be ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))",
        )
    };
    let seq = params
        .get("dimension_numbers")
        .and_then(ParamValue::as_seq)
        .ok_or_else(bad)?;
    let pair = |v: &ParamValue| -> Result<(Vec<usize>, Vec<usize>)> {
        let Some([a, b]) = v.as_seq() else {
            return Err(bad());
        };
        let conv = |x: &ParamValue| {
            x.as_ints()
                .map(|v| v.iter().map(|&i| i as usize).collect::<Vec<_>>())
                .ok_or_else(bad)
        };
        Ok((conv(a)?, conv(b)?))
    };
    let [c, b] = seq else {
        return Err(bad());
    };
    let (lhs_contract, rhs_contract) = pair(c)?;
    let (lhs_batch, rhs_batch) = pair(b)?;
    Ok(DotDims {
        lhs_contract,
        rhs_contract,
        lhs_batch,
        rhs_batch,
    })
}

pub(super) fn abstract_eval(
    prim: Prim,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    arity(prim, inputs.len(), 2)?;
    let (l, r) = (&inputs[0], &inputs[1]);
    let dd = dot_dims(params)?;
    let in_range = |dims: &[usize], rank: usize| dims.iter().all(|&d| d < rank);
    if !in_range(&dd.lhs_contract, l.rank())
        || !in_range(&dd.lhs_batch, l.rank())
        || !in_range(&dd.rhs_contract, r.rank())
        || !in_range(&dd.rhs_batch, r.rank())
    {
        return Err(type_error(
            prim.name(),
            format!("dimension numbers out of range for {l} and {r}"),
        ));
    }
    let sizes =
        |a: &ShapedArray, dims: &[usize]| dims.iter().map(|&d| a.shape[d]).collect::<Vec<_>>();
    if sizes(l, &dd.lhs_contract) != sizes(r, &dd.rhs_contract)
        || sizes(l, &dd.lhs_batch) != sizes(r, &dd.rhs_batch)
    {
        return Err(type_error(
            prim.name(),
            format!("contracting or batch dimensions of {l} and {r} differ in size"),
        ));
    }
    let mut shape = sizes(l, &dd.lhs_batch);
    shape.extend(sizes(l, &dd.lhs_free(l.rank())));
    shape.extend(sizes(r, &dd.rhs_free(r.rank())));
    let dtype = params
        .opt_dtype(prim.name(), "preferred_element_type")?
        .unwrap_or(l.dtype);
    Ok(vec![ShapedArray {
        dtype,
        shape,
        weak_type: false,
        vma: Default::default(),
        sharding: None,
        explicit: None,
    }])
}

/// Permutes `a` to `first ++ second ++ third` and reshapes it to a 3-D array.
pub fn to_3d<T: Clone>(
    a: &ArrayD<T>,
    first: &[usize],
    second: &[usize],
    third: &[usize],
) -> Result<ndarray::Array3<T>> {
    let perm: Vec<usize> = first.iter().chain(second).chain(third).copied().collect();
    let size = |dims: &[usize]| dims.iter().map(|&d| a.shape()[d]).product::<usize>();
    let (x, y, z) = (size(first), size(second), size(third));
    let permuted = a
        .view()
        .permuted_axes(IxDyn(&perm))
        .as_standard_layout()
        .to_owned();
    permuted
        .into_shape_with_order((x, y, z))
        .map_err(|e| IrError::Eval(e.to_string()))
}

/// The batched contraction of `l` and `r` as a `[batch, m, n]` array, each entry folded with
/// `step(acc, l, r)` from `zero`.
pub fn contract<T: Copy>(
    dd: &DotDims,
    l: &ArrayD<T>,
    r: &ArrayD<T>,
    zero: T,
    step: impl Fn(T, T, T) -> T,
) -> Result<ArrayD<T>> {
    let lhs = to_3d(l, &dd.lhs_batch, &dd.lhs_free(l.ndim()), &dd.lhs_contract)?;
    let rhs = to_3d(r, &dd.rhs_batch, &dd.rhs_contract, &dd.rhs_free(r.ndim()))?;
    let (b, m, k) = lhs.dim();
    let n = rhs.dim().2;
    let out = ndarray::Array3::from_shape_fn((b, m, n), |(bi, i, j)| {
        (0..k).fold(zero, |acc, t| step(acc, lhs[[bi, i, t]], rhs[[bi, t, j]]))
    });
    Ok(out.into_dyn())
}
