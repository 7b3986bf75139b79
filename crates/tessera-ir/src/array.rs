//! Host arrays for the reference interpreter: a dtype and an `ndarray` of `f64` whose values are
//! always rounded to what the dtype can hold (integers up to 2^53 are exact).

use ndarray::{ArrayD, IxDyn};

use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{IrError, Result};

/// A dense array on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    /// The element type.
    pub dtype: DType,
    /// The values, rounded to `dtype`.
    pub data: ArrayD<f64>,
}

impl Array {
    /// An array of `shape` from row-major `values`, rounded to `dtype`.
    pub fn new(dtype: DType, shape: &[i64], values: Vec<f64>) -> Result<Array> {
        let dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
        let data = ArrayD::from_shape_vec(IxDyn(&dims), values)
            .map_err(|e| IrError::Eval(format!("{e}: shape {shape:?}")))?;
        Ok(Array::from_data(dtype, data))
    }

    /// Wraps data, rounding it to `dtype`.
    pub fn from_data(dtype: DType, data: ArrayD<f64>) -> Array {
        Array {
            dtype,
            data: data.mapv(|x| dtype.round(x)),
        }
    }

    /// A scalar.
    pub fn scalar(dtype: DType, value: f64) -> Array {
        Array::from_data(dtype, ArrayD::from_elem(IxDyn(&[]), value))
    }

    /// An array of zeros.
    pub fn zeros(aval: &ShapedArray) -> Array {
        let dims: Vec<usize> = aval.shape.iter().map(|&d| d.max(0) as usize).collect();
        Array {
            dtype: aval.dtype,
            data: ArrayD::zeros(IxDyn(&dims)),
        }
    }

    /// The shape.
    pub fn shape(&self) -> Vec<i64> {
        self.data.shape().iter().map(|&d| d as i64).collect()
    }

    /// The type.
    pub fn aval(&self) -> ShapedArray {
        ShapedArray::new(self.dtype, &self.shape())
    }

    /// The values in row-major order.
    pub fn to_vec(&self) -> Vec<f64> {
        self.data.iter().copied().collect()
    }
}
