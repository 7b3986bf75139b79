//! Evaluation rules of the `indexing` family (moved from the core crate's `prim/indexing.rs`).

use ndarray::{ArrayD, Dimension, IxDyn};
use tessera_ir_core::array::{Array, Elem};
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::error::Result;
use tessera_ir_core::params::Params;
use tessera_ir_core::prim::IndexingOp;
use tessera_ir_core::prim::index_modes::{GatherScatterMode, scatter_window_sizes};
use tessera_ir_core::prim::index_params::{GatherParams, ScatterParams};
use tessera_ir_core::prim::indexing::clamp_i64;

/// Splits an output (or update) index into its batch part and its window part.
fn split(index: &[usize], window_dims: &[i64]) -> (Vec<usize>, Vec<usize>) {
    let mut batch = Vec::new();
    let mut window = Vec::new();
    for (d, &i) in index.iter().enumerate() {
        if window_dims.contains(&(d as i64)) {
            window.push(i)
        } else {
            batch.push(i)
        }
    }
    (batch, window)
}

/// The index vector at batch position `batch` of `indices` (read exactly).
fn index_vector(indices: &ArrayD<i128>, batch: &[usize]) -> Vec<i64> {
    let n = indices.shape().last().copied().unwrap_or(0);
    (0..n)
        .map(|k| {
            let mut at = batch.to_vec();
            at.push(k);
            clamp_i64(indices[IxDyn(&at)])
        })
        .collect()
}

pub(crate) fn eval(
    op: IndexingOp,
    params: &Params,
    inputs: &[Array],
    outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    let operand = &inputs[0];
    let op_shape: Vec<i64> = operand.shape();
    let rank = op_shape.len();
    if op == IndexingOp::Gather {
        let typed = GatherParams::read(params)?;
        let (dn, sizes, mode) = (&typed.dims, &typed.slice_sizes, typed.mode);
        let fill = Elem::from_f64(operand.dtype(), typed.fill(operand.dtype()));
        let dims: Vec<usize> = outputs[0].shape.iter().map(|&d| d as usize).collect();
        let kept: Vec<usize> = (0..rank)
            .filter(|d| {
                let d = *d as i64;
                !dn.collapsed_slice_dims.contains(&d) && !dn.operand_batching_dims.contains(&d)
            })
            .collect();
        let (elems, indices) = (operand.elems(), inputs[1].ints());
        let data = ArrayD::from_shape_fn(IxDyn(&dims), |idx| {
            let idx: Vec<usize> = idx.slice().to_vec();
            let (batch, window) = split(&idx, &dn.offset_dims);
            let starts = index_vector(&indices, &batch);
            let mut at = vec![0i64; rank];
            for (k, &d) in dn.start_index_map.iter().enumerate() {
                let d = d as usize;
                let hi = op_shape[d] - sizes[d];
                if mode == GatherScatterMode::FillOrDrop && !(0..=hi).contains(&starts[k]) {
                    return fill;
                }
                at[d] = starts[k].clamp(0, hi);
            }
            // A batching dimension is read at the indices' position along its partner.
            for (&o, &i) in dn
                .operand_batching_dims
                .iter()
                .zip(&dn.start_indices_batching_dims)
            {
                at[o as usize] = batch[i as usize] as i64;
            }
            for (w, &d) in window.iter().zip(&kept) {
                at[d] += *w as i64;
            }
            let at: Vec<usize> = at.iter().map(|&v| v as usize).collect();
            elems[IxDyn(&at)]
        });
        return Ok(vec![operand.with_elems(data)]);
    }
    let ScatterParams { dims: dn, mode, .. } = ScatterParams::read(params)?;
    let (indices, updates) = (&inputs[1], &inputs[2]);
    let sizes = scatter_window_sizes(&dn, &updates.shape(), rank);
    let kept: Vec<usize> = (0..rank)
        .filter(|d| {
            let d = *d as i64;
            !dn.inserted_window_dims.contains(&d) && !dn.operand_batching_dims.contains(&d)
        })
        .collect();
    let mut data = operand.elems();
    let indices = indices.ints();
    for (idx, &u) in updates.elems().indexed_iter() {
        let idx: Vec<usize> = idx.slice().to_vec();
        let (batch, window) = split(&idx, &dn.update_window_dims);
        let starts = index_vector(&indices, &batch);
        let mut at = vec![0i64; rank];
        let mut fits = true;
        for (k, &d) in dn.scatter_dims_to_operand_dims.iter().enumerate() {
            let d = d as usize;
            let hi = op_shape[d] - sizes[d];
            at[d] = match mode {
                GatherScatterMode::Clip => starts[k].clamp(0, hi.max(0)),
                GatherScatterMode::FillOrDrop | GatherScatterMode::PromiseInBounds => {
                    fits &= (0..=hi).contains(&starts[k]);
                    starts[k]
                }
            };
        }
        for (&o, &i) in dn
            .operand_batching_dims
            .iter()
            .zip(&dn.scatter_indices_batching_dims)
        {
            at[o as usize] = batch[i as usize] as i64;
        }
        for (w, &d) in window.iter().zip(&kept) {
            at[d] += *w as i64;
        }
        // A window that does not fit is dropped whole, as XLA's scatter does.
        if fits && at.iter().zip(&op_shape).all(|(&a, &n)| (0..n).contains(&a)) {
            let at: Vec<usize> = at.iter().map(|&v| v as usize).collect();
            let old = data[IxDyn(&at)];
            data[IxDyn(&at)] = match op {
                IndexingOp::Scatter(kind) => kind.combine(old, u, operand.dtype()),
                IndexingOp::ScatterAdd | IndexingOp::Gather => old.add(u, operand.dtype()),
            };
        }
    }
    Ok(vec![operand.with_elems(data)])
}
