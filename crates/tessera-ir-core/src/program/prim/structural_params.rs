//! The parameters of the shape-changing primitives, read and checked once into one typed value
//! per primitive ([`StructuralParams::read`]). The shape rule, the interpreter, the derivative
//! and batching rules and the lowering all read its fields, never the printed parameters.

use super::{Prim, StructuralOp};
use crate::dtype::DType;
use crate::error::{Result, type_error};
use crate::program::params::{ParamValue, Params};

/// The typed parameters of one shape-changing primitive (the variant names the primitive).
#[derive(Debug, Clone, PartialEq)]
pub enum StructuralParams {
    /// `iota`: the result's dtype and shape, and the dimension that counts.
    Iota {
        /// The result's dtype.
        dtype: DType,
        /// The result's shape.
        shape: Vec<i64>,
        /// The dimension whose index each element holds.
        dimension: i64,
    },
    /// `broadcast_in_dim`.
    BroadcastInDim {
        /// The result's shape, when printed (otherwise the equation's result type gives it).
        shape: Option<Vec<i64>>,
        /// For each operand dimension, the result dimension it maps to (JAX leaves an empty
        /// tuple out of the printed equation, so absent is empty).
        broadcast_dimensions: Vec<i64>,
    },
    /// `reshape` to `new_sizes`.
    Reshape {
        /// The result's shape.
        new_sizes: Vec<i64>,
    },
    /// `squeeze` of size-1 `dimensions`.
    Squeeze {
        /// The dimensions removed.
        dimensions: Vec<i64>,
    },
    /// `expand_dims`, inserting size-1 `dimensions`.
    ExpandDims {
        /// The dimensions inserted (positions in the result).
        dimensions: Vec<i64>,
    },
    /// `transpose`.
    Transpose {
        /// Result dimension `i` is operand dimension `permutation[i]`.
        permutation: Vec<i64>,
    },
    /// `slice`.
    Slice {
        /// The first index kept, per dimension.
        start_indices: Vec<i64>,
        /// One past the last index, per dimension.
        limit_indices: Vec<i64>,
        /// The step per dimension; `strides=None` (unit steps) reads as ones.
        strides: Vec<i64>,
    },
    /// `dynamic_slice`.
    DynamicSlice {
        /// The window's size per dimension.
        slice_sizes: Vec<i64>,
    },
    /// `dynamic_update_slice` (no parameters).
    DynamicUpdateSlice,
    /// `concatenate` along `dimension`.
    Concatenate {
        /// The dimension joined along (may be negative, counted from the end).
        dimension: i64,
    },
    /// `pad`.
    Pad {
        /// `(low, high, interior)` padding per dimension.
        padding_config: Vec<(i64, i64, i64)>,
    },
}

impl StructuralParams {
    /// The typed parameters of `prim`, which must be a shape-changing primitive.
    pub fn of(prim: Prim, params: &Params) -> Result<Self> {
        let op = prim
            .structural()
            .ok_or_else(|| type_error(prim.name(), "has no shape-changing parameters"))?;
        StructuralParams::read(op, params)
    }

    /// Reads and checks the parameters of `op` (each field's form; the shape rule checks them
    /// against the operands), once: the value is kept with the parameters.
    pub fn read(op: StructuralOp, params: &Params) -> Result<Self> {
        params.typed([op as usize, 0], |params| Self::read_printed(op, params))
    }

    fn read_printed(op: StructuralOp, params: &Params) -> Result<Self> {
        let name = op_name(op);
        Ok(match op {
            StructuralOp::Iota => StructuralParams::Iota {
                dtype: params.dtype(name, "dtype")?,
                shape: params.ints(name, "shape")?,
                dimension: params.int(name, "dimension")?,
            },
            StructuralOp::BroadcastInDim => StructuralParams::BroadcastInDim {
                shape: params.opt_ints(name, "shape")?,
                broadcast_dimensions: params
                    .opt_ints(name, "broadcast_dimensions")?
                    .unwrap_or_default(),
            },
            StructuralOp::Reshape => {
                // `dimensions` other than None transposes first; nothing Tessera or JAX's
                // `jnp.reshape` emits uses it.
                if params.get("dimensions").is_some_and(|d| !d.is_none()) {
                    return Err(type_error(
                        name,
                        "`dimensions` other than None is not supported; transpose the operand \
                         first",
                    ));
                }
                StructuralParams::Reshape {
                    new_sizes: params.ints(name, "new_sizes")?,
                }
            }
            StructuralOp::Squeeze => StructuralParams::Squeeze {
                dimensions: params.ints(name, "dimensions")?,
            },
            StructuralOp::ExpandDims => StructuralParams::ExpandDims {
                dimensions: params.ints(name, "dimensions")?,
            },
            StructuralOp::Transpose => StructuralParams::Transpose {
                permutation: params.ints(name, "permutation")?,
            },
            StructuralOp::Slice => {
                let start_indices = params.ints(name, "start_indices")?;
                let strides = params
                    .opt_ints(name, "strides")?
                    .unwrap_or_else(|| vec![1; start_indices.len()]);
                StructuralParams::Slice {
                    limit_indices: params.ints(name, "limit_indices")?,
                    start_indices,
                    strides,
                }
            }
            StructuralOp::DynamicSlice => StructuralParams::DynamicSlice {
                slice_sizes: params.ints(name, "slice_sizes")?,
            },
            StructuralOp::DynamicUpdateSlice => StructuralParams::DynamicUpdateSlice,
            StructuralOp::Concatenate => StructuralParams::Concatenate {
                dimension: params.int(name, "dimension")?,
            },
            StructuralOp::Pad => StructuralParams::Pad {
                padding_config: padding_config(params)?,
            },
        })
    }
}

/// The printed name of a structural primitive.
fn op_name(op: StructuralOp) -> &'static str {
    match op {
        StructuralOp::Iota => "iota",
        StructuralOp::BroadcastInDim => "broadcast_in_dim",
        StructuralOp::Reshape => "reshape",
        StructuralOp::Squeeze => "squeeze",
        StructuralOp::ExpandDims => "expand_dims",
        StructuralOp::Transpose => "transpose",
        StructuralOp::Slice => "slice",
        StructuralOp::DynamicSlice => "dynamic_slice",
        StructuralOp::DynamicUpdateSlice => "dynamic_update_slice",
        StructuralOp::Concatenate => "concatenate",
        StructuralOp::Pad => "pad",
    }
}

/// `pad`'s `padding_config`: one `(low, high, interior)` triple per dimension.
fn padding_config(params: &Params) -> Result<Vec<(i64, i64, i64)>> {
    let bad = || {
        type_error(
            "pad",
            "padding_config must be a tuple of (low, high, interior) triples",
        )
    };
    let seq = params
        .get("padding_config")
        .and_then(ParamValue::as_seq)
        .ok_or_else(bad)?;
    seq.iter()
        .map(|t| {
            if let Some(&[lo, hi, int]) = t.as_ints().as_deref() {
                Ok((lo, hi, int))
            } else {
                Err(bad())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_parameter_is_an_error_naming_it() {
        let params = Params::new().with("permutation", ParamValue::Name("x".into()));
        let err = StructuralParams::read(StructuralOp::Transpose, &params).unwrap_err();
        assert!(err.to_string().contains("permutation"), "{err}");
    }

    #[test]
    fn unit_strides_and_empty_broadcast_dimensions_read_as_printed() {
        let slice = Params::new()
            .with("start_indices", ParamValue::ints(&[0, 1]))
            .with("limit_indices", ParamValue::ints(&[2, 3]))
            .with("strides", ParamValue::Name("None".into()));
        assert_eq!(
            StructuralParams::read(StructuralOp::Slice, &slice).unwrap(),
            StructuralParams::Slice {
                start_indices: vec![0, 1],
                limit_indices: vec![2, 3],
                strides: vec![1, 1],
            }
        );
        assert_eq!(
            StructuralParams::read(StructuralOp::BroadcastInDim, &Params::new()).unwrap(),
            StructuralParams::BroadcastInDim {
                shape: None,
                broadcast_dimensions: vec![],
            }
        );
    }

    fn shape_of(prim: Prim, params: &Params, x: &[i64]) -> Result<Vec<i64>> {
        let x = crate::aval::ShapedArray::new(DType::F32, x);
        Ok(prim.abstract_eval(params, &[x], None)?.remove(0).shape)
    }

    #[test]
    fn expand_dims_counts_negative_dimensions_from_the_result_s_end() {
        let dims = |d: &[i64]| Params::new().with("dimensions", ParamValue::ints(d));
        // As jnp.expand_dims: f32[5] with (-1, -2) is f32[5,1,1]; (-3, 1) is f32[1,1,5].
        assert_eq!(
            shape_of(Prim::ExpandDims, &dims(&[-1, -2]), &[5]).unwrap(),
            [5, 1, 1]
        );
        assert_eq!(
            shape_of(Prim::ExpandDims, &dims(&[-3, 1]), &[5]).unwrap(),
            [1, 1, 5]
        );
        assert!(shape_of(Prim::ExpandDims, &dims(&[0, -3]), &[5]).is_err());
    }

    #[test]
    fn iota_refuses_a_negative_dimension_and_reshape_a_transposing_one() {
        let iota = Params::new()
            .with("dtype", ParamValue::Name("int32".into()))
            .with("shape", ParamValue::ints(&[2, 3]))
            .with("dimension", ParamValue::Int(-1))
            .with("sharding", ParamValue::Name("None".into()));
        assert!(Prim::Iota.abstract_eval(&iota, &[], None).is_err());
        let reshape = Params::new()
            .with("new_sizes", ParamValue::ints(&[6]))
            .with("dimensions", ParamValue::ints(&[1, 0]));
        let err = shape_of(Prim::Reshape, &reshape, &[2, 3]).unwrap_err();
        assert!(err.to_string().contains("transpose"), "{err}");
    }
}
