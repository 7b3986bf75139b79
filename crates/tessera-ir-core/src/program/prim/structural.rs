//! Shape-changing primitives: `iota`, `broadcast_in_dim`, `reshape`, `squeeze`, `expand_dims`,
//! `transpose`, `slice`, `dynamic_slice`, `dynamic_update_slice`, `concatenate`, `pad`.

use super::structural_params::StructuralParams;
use super::{Prim, StructuralOp, arity, axis, distinct_axes};
use crate::aval::ShapedArray;
use crate::error::{Result, type_error};
use crate::program::params::Params;

pub(super) fn abstract_eval(
    prim: Prim,
    op: StructuralOp,
    params: &Params,
    inputs: &[ShapedArray],
    outputs: Option<&[ShapedArray]>,
) -> Result<Vec<ShapedArray>> {
    let name = prim.name();
    let written = outputs.and_then(|o| o.first());
    let out = |dtype, shape: Vec<i64>| {
        Ok(vec![ShapedArray {
            dtype,
            shape,
            weak_type: false,
            vma: Default::default(),
            sharding: None,
            explicit: None,
        }])
    };
    match StructuralParams::read(op, params)? {
        StructuralParams::Iota {
            dtype,
            shape,
            dimension,
        } => {
            arity(prim, inputs.len(), 0)?;
            // As in JAX, the dimension is not counted from the end.
            if !(0..shape.len() as i64).contains(&dimension) {
                return Err(type_error(
                    name,
                    format!("dimension {dimension} is not a dimension of shape {shape:?}"),
                ));
            }
            out(dtype, shape)
        }
        StructuralParams::BroadcastInDim {
            shape,
            broadcast_dimensions: bdims,
        } => {
            arity(prim, inputs.len(), 1)?;
            let x = &inputs[0];
            let shape = match shape {
                Some(s) => s,
                None => written
                    .map(|w| w.shape.clone())
                    .ok_or_else(|| type_error(name, "needs a `shape` parameter"))?,
            };
            if bdims.len() != x.rank() {
                return Err(type_error(
                    name,
                    format!(
                        "broadcast_dimensions {bdims:?} must name one output dimension per operand dimension of {x}"
                    ),
                ));
            }
            for (i, &d) in bdims.iter().enumerate() {
                let ok = (0..shape.len() as i64).contains(&d)
                    && (x.shape[i] == 1 || x.shape[i] == shape[d as usize]);
                if !ok {
                    return Err(type_error(
                        name,
                        format!("operand {x} does not broadcast to {shape:?} along {bdims:?}"),
                    ));
                }
            }
            Ok(vec![ShapedArray {
                dtype: x.dtype,
                shape,
                weak_type: x.weak_type,
                vma: Default::default(),
                sharding: None,
                explicit: None,
            }])
        }
        StructuralParams::Reshape { new_sizes: shape } => {
            arity(prim, inputs.len(), 1)?;
            let x = &inputs[0];
            if shape.iter().product::<i64>() != x.shape.iter().product::<i64>() {
                return Err(type_error(
                    name,
                    format!("cannot reshape {x} to {shape:?}: element counts differ"),
                ));
            }
            Ok(vec![ShapedArray {
                dtype: x.dtype,
                shape,
                weak_type: x.weak_type,
                vma: Default::default(),
                sharding: None,
                explicit: None,
            }])
        }
        StructuralParams::Squeeze { dimensions } => {
            arity(prim, inputs.len(), 1)?;
            let x = &inputs[0];
            let drop = dimensions
                .iter()
                .map(|&d| axis(prim, d, x.rank()))
                .collect::<Result<Vec<_>>>()?;
            if let Some(&d) = drop.iter().find(|&&d| x.shape[d] != 1) {
                return Err(type_error(name, format!("dimension {d} of {x} is not 1")));
            }
            let shape = x
                .shape
                .iter()
                .enumerate()
                .filter(|(i, _)| !drop.contains(i))
                .map(|(_, &s)| s)
                .collect();
            out(x.dtype, shape)
        }
        StructuralParams::ExpandDims { dimensions } => {
            arity(prim, inputs.len(), 1)?;
            let x = &inputs[0];
            // Each dimension is a position in the result (negative ones count from its end).
            let rank = x.rank() + dimensions.len();
            let added = distinct_axes(prim, &dimensions, rank, "dimensions")?;
            let mut shape = x.shape.clone();
            for d in added {
                shape.insert(d, 1);
            }
            out(x.dtype, shape)
        }
        StructuralParams::Transpose { permutation: perm } => {
            arity(prim, inputs.len(), 1)?;
            let x = &inputs[0];
            let mut sorted = perm.clone();
            sorted.sort_unstable();
            if sorted != (0..x.rank() as i64).collect::<Vec<_>>() {
                return Err(type_error(
                    name,
                    format!("permutation {perm:?} is not a permutation of {x}'s dimensions"),
                ));
            }
            out(x.dtype, perm.iter().map(|&p| x.shape[p as usize]).collect())
        }
        StructuralParams::Slice {
            start_indices: start,
            limit_indices: limit,
            strides,
        } => {
            arity(prim, inputs.len(), 1)?;
            let x = &inputs[0];
            if start.len() != x.rank() || limit.len() != x.rank() || strides.len() != x.rank() {
                return Err(type_error(
                    name,
                    format!("start, limit and strides need one entry per dimension of {x}"),
                ));
            }
            let mut shape = Vec::new();
            for d in 0..x.rank() {
                if !(0 <= start[d]
                    && start[d] <= limit[d]
                    && limit[d] <= x.shape[d]
                    && strides[d] > 0)
                {
                    return Err(type_error(
                        name,
                        format!("slice {start:?}..{limit:?} step {strides:?} is outside {x}"),
                    ));
                }
                shape.push((limit[d] - start[d] + strides[d] - 1) / strides[d]);
            }
            out(x.dtype, shape)
        }
        StructuralParams::DynamicSlice { slice_sizes: sizes } => {
            let x = first_input(prim, inputs)?;
            arity(prim, inputs.len(), 1 + x.rank())?;
            if sizes.len() != x.rank() || sizes.iter().zip(&x.shape).any(|(&s, &d)| s < 0 || s > d)
            {
                return Err(type_error(
                    name,
                    format!("slice_sizes {sizes:?} do not fit {x}"),
                ));
            }
            out(x.dtype, sizes)
        }
        StructuralParams::DynamicUpdateSlice => {
            let x = first_input(prim, inputs)?;
            arity(prim, inputs.len(), 2 + x.rank())?;
            let u = &inputs[1];
            if u.rank() != x.rank() || u.shape.iter().zip(&x.shape).any(|(a, b)| a > b) {
                return Err(type_error(name, format!("update {u} does not fit in {x}")));
            }
            if u.dtype != x.dtype {
                return Err(type_error(
                    name,
                    format!("update {u} has another dtype than the operand {x}"),
                ));
            }
            out(x.dtype, x.shape.clone())
        }
        StructuralParams::Concatenate { dimension } => {
            let first = first_input(prim, inputs)?;
            let dim = axis(prim, dimension, first.rank())?;
            let mut shape = first.shape.clone();
            for x in &inputs[1..] {
                let same = x.rank() == first.rank()
                    && (0..x.rank()).all(|d| d == dim || x.shape[d] == first.shape[d]);
                if !same || x.dtype != first.dtype {
                    return Err(type_error(
                        name,
                        format!("operands {first} and {x} differ outside dimension {dim}"),
                    ));
                }
                shape[dim] += x.shape[dim];
            }
            out(first.dtype, shape)
        }
        StructuralParams::Pad {
            padding_config: config,
        } => {
            arity(prim, inputs.len(), 2)?;
            let x = &inputs[0];
            if config.len() != x.rank() {
                return Err(type_error(
                    name,
                    format!("padding_config needs one (low, high, interior) per dimension of {x}"),
                ));
            }
            let shape = x
                .shape
                .iter()
                .zip(&config)
                .map(|(&d, &(lo, hi, int))| lo + hi + d + (d - 1).max(0) * int)
                .collect();
            out(x.dtype, shape)
        }
    }
}

/// The first operand, or an error naming the primitive when there is none.
fn first_input(prim: Prim, inputs: &[ShapedArray]) -> Result<&ShapedArray> {
    inputs
        .first()
        .ok_or_else(|| type_error(prim.name(), "needs at least one operand"))
}
