//! Abstract values: dtype, shape and weak type (JAX's `ShapedArray`).

use std::fmt;

use crate::dtype::DType;

/// The type of an IR value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShapedArray {
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<i64>,
    /// A weakly typed value (a Python scalar) that adopts its partner's dtype in binary ops.
    pub weak_type: bool,
}

impl ShapedArray {
    /// A strongly typed array.
    pub fn new(dtype: DType, shape: &[i64]) -> Self {
        ShapedArray {
            dtype,
            shape: shape.to_vec(),
            weak_type: false,
        }
    }

    /// A scalar.
    pub fn scalar(dtype: DType) -> Self {
        ShapedArray::new(dtype, &[])
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn size(&self) -> usize {
        self.shape.iter().map(|&d| d.max(0) as usize).product()
    }

    /// The same shape with another dtype.
    pub fn with_dtype(&self, dtype: DType) -> Self {
        ShapedArray {
            dtype,
            shape: self.shape.clone(),
            weak_type: false,
        }
    }

    /// Equal ignoring weak type.
    pub fn same_type(&self, other: &ShapedArray) -> bool {
        self.dtype == other.dtype && self.shape == other.shape
    }
}

impl fmt::Display for ShapedArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}
