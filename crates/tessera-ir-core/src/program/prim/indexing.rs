//! `gather` and `scatter-add` with XLA's dimension numbers, as JAX prints them
//! (`GatherDimensionNumbers(...)`, `ScatterDimensionNumbers(...)`); the index vector is the last
//! dimension of the indices. Out-of-bounds indices follow the `mode` parameter
//! ([`GatherScatterMode`](super::GatherScatterMode)): clamped starts (CLIP, and XLA's own gather),
//! the fill value for a slice that does not fit (FILL_OR_DROP gather), a window that does not fit
//! dropped whole (FILL_OR_DROP and PROMISE_IN_BOUNDS scatter, as XLA's scatter does).

use super::index_params::{GatherParams, ScatterParams};
use super::{IndexingOp, Prim, arity};
use crate::aval::ShapedArray;
use crate::error::{Result, type_error};
use crate::program::params::{ParamValue, Params};

/// Gather's dimension numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatherDims {
    /// Output dimensions that index into the slice.
    pub offset_dims: Vec<i64>,
    /// Operand dimensions of size 1 dropped from the slice.
    pub collapsed_slice_dims: Vec<i64>,
    /// Which operand dimension each index component addresses.
    pub start_index_map: Vec<i64>,
    /// Operand batching dimensions: each pairs with a dimension of the indices, and a slice
    /// is taken at that dimension's position (size 1, dropped from the slice).
    pub operand_batching_dims: Vec<i64>,
    /// The dimension of the indices each operand batching dimension pairs with.
    pub start_indices_batching_dims: Vec<i64>,
}

/// Scatter's dimension numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScatterDims {
    /// Update dimensions that index into the window.
    pub update_window_dims: Vec<i64>,
    /// Operand dimensions of size 1 the window omits.
    pub inserted_window_dims: Vec<i64>,
    /// Which operand dimension each index component addresses.
    pub scatter_dims_to_operand_dims: Vec<i64>,
    /// Operand batching dimensions: each pairs with a dimension of the indices, and a window
    /// is written at that dimension's position (omitted from the window).
    pub operand_batching_dims: Vec<i64>,
    /// The dimension of the indices each operand batching dimension pairs with.
    pub scatter_indices_batching_dims: Vec<i64>,
}

fn field(params: &Params, prim: &str, name: &str) -> Result<Vec<i64>> {
    params
        .get("dimension_numbers")
        .and_then(|d| d.field(name))
        .and_then(ParamValue::as_ints)
        .ok_or_else(|| type_error(prim, format!("dimension_numbers needs `{name}`")))
}

/// Reads gather's dimension numbers.
pub fn gather_dims(params: &Params) -> Result<GatherDims> {
    Ok(GatherDims {
        offset_dims: field(params, "gather", "offset_dims")?,
        collapsed_slice_dims: field(params, "gather", "collapsed_slice_dims")?,
        start_index_map: field(params, "gather", "start_index_map")?,
        operand_batching_dims: field(params, "gather", "operand_batching_dims")?,
        start_indices_batching_dims: field(params, "gather", "start_indices_batching_dims")?,
    })
}

/// Reads scatter's dimension numbers.
pub fn scatter_dims(params: &Params) -> Result<ScatterDims> {
    Ok(ScatterDims {
        update_window_dims: field(params, "scatter-add", "update_window_dims")?,
        inserted_window_dims: field(params, "scatter-add", "inserted_window_dims")?,
        scatter_dims_to_operand_dims: field(params, "scatter-add", "scatter_dims_to_operand_dims")?,
        operand_batching_dims: field(params, "scatter-add", "operand_batching_dims")?,
        scatter_indices_batching_dims: field(
            params,
            "scatter-add",
            "scatter_indices_batching_dims",
        )?,
    })
}

pub(super) fn abstract_eval(
    prim: Prim,
    op: IndexingOp,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    let name = prim.name();
    match op {
        IndexingOp::Gather => {
            arity(prim, inputs.len(), 2)?;
            let (operand, indices) = (&inputs[0], &inputs[1]);
            let typed = GatherParams::read(params)?;
            let (dn, sizes) = (&typed.dims, &typed.slice_sizes);
            let index_len = indices.shape.last().copied().unwrap_or(0);
            let ok = indices.dtype.is_int()
                && indices.rank() >= 1
                && batching_fits(
                    &dn.operand_batching_dims,
                    &dn.start_indices_batching_dims,
                    operand,
                    indices,
                    &[&dn.collapsed_slice_dims, &dn.start_index_map],
                )
                && dn
                    .operand_batching_dims
                    .iter()
                    .all(|&d| sizes.get(d as usize) == Some(&1))
                && sizes.len() == operand.rank()
                && dn.start_index_map.len() as i64 == index_len
                && dn
                    .start_index_map
                    .iter()
                    .all(|&d| (0..operand.rank() as i64).contains(&d))
                && dn
                    .collapsed_slice_dims
                    .iter()
                    .all(|&d| (0..operand.rank() as i64).contains(&d) && sizes[d as usize] == 1)
                && sizes
                    .iter()
                    .zip(&operand.shape)
                    .all(|(&s, &d)| 0 <= s && s <= d);
            if !ok {
                return Err(type_error(
                    name,
                    format!(
                        "dimension numbers {dn:?} and slice_sizes {sizes:?} do not fit operand {operand} and integer indices {indices}"
                    ),
                ));
            }
            let window: Vec<i64> = (0..operand.rank() as i64)
                .filter(|d| {
                    !dn.collapsed_slice_dims.contains(d) && !dn.operand_batching_dims.contains(d)
                })
                .map(|d| sizes[d as usize])
                .collect();
            let batch = &indices.shape[..indices.rank() - 1];
            let rank = batch.len() + window.len();
            if dn.offset_dims.len() != window.len() || !ascending_within(&dn.offset_dims, rank) {
                return Err(type_error(
                    name,
                    format!(
                        "offset_dims {:?} must place {} window dimensions in a rank-{rank} result",
                        dn.offset_dims,
                        window.len()
                    ),
                ));
            }
            let (mut b, mut w) = (batch.iter(), window.iter());
            let shape: Vec<i64> = (0..rank as i64)
                .map(|d| {
                    if dn.offset_dims.contains(&d) {
                        *w.next().unwrap_or(&0)
                    } else {
                        *b.next().unwrap_or(&0)
                    }
                })
                .collect();
            Ok(vec![ShapedArray::new(operand.dtype, &shape)])
        }
        IndexingOp::ScatterAdd | IndexingOp::Scatter(_) => {
            arity(prim, inputs.len(), 3)?;
            let (operand, indices, updates) = (&inputs[0], &inputs[1], &inputs[2]);
            let dn = ScatterParams::read(params)?.dims;
            let ok = indices.dtype.is_int()
                && indices.rank() >= 1
                && batching_fits(
                    &dn.operand_batching_dims,
                    &dn.scatter_indices_batching_dims,
                    operand,
                    indices,
                    &[&dn.inserted_window_dims, &dn.scatter_dims_to_operand_dims],
                )
                && updates.dtype == operand.dtype
                && dn.scatter_dims_to_operand_dims.len() as i64
                    == indices.shape.last().copied().unwrap_or(0)
                && dn.update_window_dims.len()
                    + dn.inserted_window_dims.len()
                    + dn.operand_batching_dims.len()
                    == operand.rank()
                && updates.rank() == indices.rank() - 1 + dn.update_window_dims.len()
                && ascending_within(&dn.update_window_dims, updates.rank())
                && ascending_within(&dn.inserted_window_dims, operand.rank())
                && distinct_within(&dn.scatter_dims_to_operand_dims, operand.rank())
                && scatter_windows_fit(&dn, operand, indices, updates);
            if !ok {
                return Err(type_error(
                    name,
                    format!(
                        "dimension numbers {dn:?} do not fit operand {operand}, indices {indices} and updates {updates}"
                    ),
                ));
            }
            Ok(vec![operand.clone()])
        }
    }
}

/// Whether `dims` are strictly increasing and each in `0..bound` (XLA's check of a gather's
/// `offset_dims` and a scatter's window dimensions).
fn ascending_within(dims: &[i64], bound: usize) -> bool {
    dims.windows(2).all(|w| w[0] < w[1]) && dims.iter().all(|&d| (0..bound as i64).contains(&d))
}

/// Whether `dims` are distinct and each in `0..bound`.
fn distinct_within(dims: &[i64], bound: usize) -> bool {
    let mut sorted = dims.to_vec();
    sorted.sort_unstable();
    sorted.windows(2).all(|w| w[0] < w[1]) && ascending_within(&sorted, bound)
}

/// XLA's scatter checks of the updates' shape: each window dimension no larger than the
/// operand dimension it lands in, and the other (scatter) dimensions those of the indices'
/// batch, in order.
fn scatter_windows_fit(
    dn: &ScatterDims,
    operand: &ShapedArray,
    indices: &ShapedArray,
    updates: &ShapedArray,
) -> bool {
    let landing: Vec<usize> = (0..operand.rank())
        .filter(|&d| {
            let d = d as i64;
            !dn.inserted_window_dims.contains(&d) && !dn.operand_batching_dims.contains(&d)
        })
        .collect();
    let windows_fit = landing.len() == dn.update_window_dims.len()
        && dn
            .update_window_dims
            .iter()
            .zip(&landing)
            .all(|(&u, &o)| updates.shape[u as usize] <= operand.shape[o]);
    let scatter: Vec<i64> = (0..updates.rank())
        .filter(|&d| !dn.update_window_dims.contains(&(d as i64)))
        .map(|d| updates.shape[d])
        .collect();
    windows_fit && scatter == indices.shape[..indices.rank().saturating_sub(1)]
}

/// XLA's checks of batching dimensions: as many operand as indices batching dimensions, each
/// in range and named once, operand ones not among `excluded` (the collapsed / inserted and
/// indexed dimensions), indices ones not the index vector's (the last), paired dimensions of
/// equal size.
fn batching_fits(
    operand_dims: &[i64],
    indices_dims: &[i64],
    operand: &ShapedArray,
    indices: &ShapedArray,
    excluded: &[&Vec<i64>],
) -> bool {
    let distinct = |ds: &[i64]| {
        let mut seen = ds.to_vec();
        seen.sort_unstable();
        seen.dedup();
        seen.len() == ds.len()
    };
    let batch_rank = indices.rank().saturating_sub(1) as i64;
    operand_dims.len() == indices_dims.len()
        && distinct(operand_dims)
        && distinct(indices_dims)
        && operand_dims.iter().zip(indices_dims).all(|(&o, &i)| {
            (0..operand.rank() as i64).contains(&o)
                && (0..batch_rank).contains(&i)
                && excluded.iter().all(|ex| !ex.contains(&o))
                && operand.shape[o as usize] == indices.shape[i as usize]
        })
}

/// An index as an `i64`, saturating (a `u64` index past `i64::MAX` is far out of bounds).
pub fn clamp_i64(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}
