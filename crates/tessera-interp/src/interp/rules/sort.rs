//! Evaluation rules of the `sort` family (moved from the core crate's `prim/sort.rs`).

use ndarray::{ArrayD, Axis, IxDyn};
use std::cmp::Ordering;
use tessera_ir_core::array::{Array, Elem, is_exact_int};
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::dtype::DType;
use tessera_ir_core::error::Result;
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::sort::{SortOp, SortParams, sort_order, top_k_params};

/// The sort order of two elements of `dtype`: integers exactly, floats by [`sort_order`].
fn elem_order(a: Elem, b: Elem, dtype: DType) -> Ordering {
    if is_exact_int(dtype) {
        a.to_int(dtype).cmp(&b.to_int(dtype))
    } else {
        sort_order(a.to_f64(dtype), b.to_f64(dtype))
    }
}

pub(crate) fn eval(
    op: SortOp,
    params: &Params,
    inputs: &[Array],
    outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    let rank = inputs[0].dims().len();
    match op {
        SortOp::Sort => {
            let SortParams {
                dimension: dim,
                num_keys: keys,
                is_stable: _,
            } = SortParams::read(params, rank)?;
            let perm = permutations(&inputs[..keys], dim, false);
            Ok(inputs
                .iter()
                .map(|x| {
                    let n = x.dims()[dim] as usize;
                    x.with_elems(permuted(&x.elems(), dim, &perm, n))
                })
                .collect())
        }
        SortOp::TopK => {
            let (k, axis) = top_k_params(params, rank)?;
            let perm = permutations(&inputs[..1], axis, true);
            let values = permuted(&inputs[0].elems(), axis, &perm, k as usize);
            let mut indices = ArrayD::<i128>::zeros(IxDyn(values.shape()));
            for (lane, p) in indices.lanes_mut(Axis(axis)).into_iter().zip(&perm) {
                for (slot, &i) in lane.into_iter().zip(p) {
                    *slot = i as i128;
                }
            }
            Ok(vec![
                Array::from_elems(outputs[0].dtype, values),
                Array::from_ints(DType::I32, indices),
            ])
        }
    }
}

/// For each lane along `dim` (in `lanes` order), the stable order of its positions by the
/// keys' values compared lexicographically with `order`.
fn permutations(keys: &[Array], dim: usize, descending: bool) -> Vec<Vec<usize>> {
    let order = |key: &Array, a: Elem, b: Elem| {
        let o = elem_order(a, b, key.dtype());
        if descending { o.reverse() } else { o }
    };
    let lanes: Vec<Vec<Vec<Elem>>> = keys
        .iter()
        .map(|k| {
            k.elems()
                .lanes(Axis(dim))
                .into_iter()
                .map(|l| l.to_vec())
                .collect()
        })
        .collect();
    let count = lanes.first().map_or(0, Vec::len);
    (0..count)
        .map(|lane| {
            let n = lanes[0][lane].len();
            let mut idx: Vec<usize> = (0..n).collect();
            idx.sort_by(|&i, &j| {
                lanes
                    .iter()
                    .zip(keys)
                    .map(|(key, k)| order(k, key[lane][i], key[lane][j]))
                    .find(|o| *o != Ordering::Equal)
                    .unwrap_or(Ordering::Equal)
            });
            idx
        })
        .collect()
}

/// `x` with each lane along `dim` replaced by its first `keep` elements in `perm`'s order.
fn permuted(x: &ArrayD<Elem>, dim: usize, perm: &[Vec<usize>], keep: usize) -> ArrayD<Elem> {
    let mut shape = x.shape().to_vec();
    shape[dim] = keep;
    let mut out = ArrayD::from_elem(IxDyn(&shape), Elem::ZERO);
    for ((src, dst), p) in x
        .lanes(Axis(dim))
        .into_iter()
        .zip(out.lanes_mut(Axis(dim)))
        .zip(perm)
    {
        for (slot, &i) in dst.into_iter().zip(p) {
            *slot = src[i];
        }
    }
    out
}
