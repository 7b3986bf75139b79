//! Derivatives of `sort` and `top_k` as JAX defines them: the primal is sorted together with an
//! `iota` along the sorted dimension, which gives the permutation; a tangent is gathered at the
//! permutation (a full-index `gather`), and a cotangent is scatter-added back through the same
//! indices (the gather's transpose). Integer operands and the indices carry nothing.

use super::rules::zeros_like;
use crate::params::{ParamValue, Params};
use crate::prim::{
    GatherDims, GatherParams, GatherScatterMode, Prim, ScatterDims, ScatterParams, SortOp,
    SortParams, top_k_params,
};
use crate::trace::Tensor;

/// The full coordinates (`int32[..., rank]`) of the elements `perm` picks along `dim`: `perm`
/// itself in dimension `dim`, each element's own index in the others.
fn coordinates(perm: &Tensor, dim: usize) -> Tensor {
    let shape = perm.shape().to_vec();
    let rank = shape.len();
    let mut column = shape.clone();
    column.push(1);
    let parts: Vec<Tensor> = (0..rank)
        .map(|d| {
            let coordinate = if d == dim {
                perm.clone()
            } else {
                perm.iota_along(&shape, d as i64)
            };
            coordinate.reshape(&column)
        })
        .collect();
    let refs: Vec<&Tensor> = parts.iter().collect();
    let params = Params::new().with("dimension", ParamValue::Int(rank as i64));
    Tensor::bind1(Prim::Concatenate, params, &refs)
}

fn full_index_dims(rank: usize) -> Vec<i64> {
    (0..rank as i64).collect()
}

/// `x[coordinates]`: one element per coordinate.
fn gather_at(x: &Tensor, coords: &Tensor) -> Tensor {
    let rank = x.rank();
    let params = GatherParams {
        dims: GatherDims {
            offset_dims: Vec::new(),
            collapsed_slice_dims: full_index_dims(rank),
            start_index_map: full_index_dims(rank),
            operand_batching_dims: Vec::new(),
            start_indices_batching_dims: Vec::new(),
        },
        slice_sizes: vec![1; rank],
        mode: GatherScatterMode::PromiseInBounds,
        fill_value: None,
        indices_are_sorted: false,
        unique_indices: true,
    };
    Tensor::bind1(Prim::Gather, params.to_params(), &[x, coords])
}

/// The transpose of [`gather_at`]: `g` added into zeros shaped like `x` at the coordinates.
fn scatter_at(x: &Tensor, coords: &Tensor, g: &Tensor) -> Tensor {
    let rank = x.rank();
    let params = ScatterParams {
        dims: ScatterDims {
            update_window_dims: Vec::new(),
            inserted_window_dims: full_index_dims(rank),
            scatter_dims_to_operand_dims: full_index_dims(rank),
            operand_batching_dims: Vec::new(),
            scatter_indices_batching_dims: Vec::new(),
        },
        mode: GatherScatterMode::PromiseInBounds,
        indices_are_sorted: false,
        unique_indices: true,
    };
    Tensor::bind1(
        Prim::ScatterAdd,
        params.to_params(),
        &[&zeros_like(x), coords, g],
    )
}

/// The coordinates each result element was taken from, recomputed from the primal operands.
fn source_coordinates(prim: Prim, params: &Params, x: &[Tensor]) -> Result<Tensor, String> {
    let op = prim
        .sort_op()
        .ok_or_else(|| format!("{} is not a sorting primitive", prim.name()))?;
    match op {
        SortOp::Sort => {
            let p = SortParams::read(params, x[0].rank()).map_err(|e| e.to_string())?;
            let (dim, keys) = (p.dimension, p.num_keys);
            let iota = x[0].iota_along(x[0].shape(), dim as i64);
            let mut operands: Vec<&Tensor> = x[..keys.min(x.len())].iter().collect();
            operands.push(&iota);
            let p = params
                .clone()
                .with("num_keys", ParamValue::Int(operands.len() as i64 - 1));
            let sorted = Tensor::bind(Prim::Sort, p, &operands);
            let perm = sorted.last().cloned().unwrap_or(iota);
            Ok(coordinates(&perm, dim))
        }
        SortOp::TopK => {
            let (_, axis) = top_k_params(params, x[0].rank()).map_err(|e| e.to_string())?;
            let outs = Tensor::bind(Prim::TopK, params.clone(), &[&x[0]]);
            Ok(coordinates(&outs[1], axis))
        }
    }
}

/// The tangents of `sort`'s or `top_k`'s results.
pub(super) fn jvp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    ts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    if ts.iter().all(Option::is_none) {
        return vec![None; y.len()];
    }
    let coords = match source_coordinates(prim, params, x) {
        Ok(c) => c,
        Err(e) => return vec![Some(y[0].fail(prim.name(), e)); y.len()],
    };
    match prim.sort_op() {
        Some(SortOp::TopK) => vec![ts[0].as_ref().map(|t| gather_at(t, &coords)), None],
        Some(SortOp::Sort) | None => ts
            .iter()
            .map(|t| t.as_ref().map(|t| gather_at(t, &coords)))
            .collect(),
    }
}

/// The cotangents of `sort`'s or `top_k`'s operands.
pub(super) fn vjp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let coords = match source_coordinates(prim, params, x) {
        Ok(c) => c,
        Err(e) => return vec![Some(x[0].fail(prim.name(), e)); x.len()],
    };
    x.iter()
        .zip(gs)
        .map(|(xi, g)| {
            let g = g.as_ref().filter(|_| xi.dtype().is_float())?;
            Some(scatter_at(xi, &coords, g))
        })
        .collect()
}
