//! Abstract values: dtype, shape and weak type (JAX's `ShapedArray`), plus the sharding a value
//! may carry and the manual mesh axes it varies over (JAX's `vma`, used inside `shard_map`).

use std::collections::BTreeSet;
use std::fmt;

use tessera_sharding::NamedSharding;

use crate::dtype::DType;

/// The type of an IR value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapedArray {
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<i64>,
    /// A weakly typed value (a Python scalar) that adopts its partner's dtype in binary ops.
    pub weak_type: bool,
    /// The manual mesh axes the value varies over (empty outside `shard_map`).
    pub vma: BTreeSet<String>,
    /// The sharding the value is laid out by, where one is known.
    pub sharding: Option<Box<NamedSharding>>,
}

impl ShapedArray {
    /// A strongly typed array.
    pub fn new(dtype: DType, shape: &[i64]) -> Self {
        ShapedArray {
            dtype,
            shape: shape.to_vec(),
            weak_type: false,
            vma: Default::default(),
            sharding: None,
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
            vma: Default::default(),
            sharding: None,
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
        f.write_str("]")?;
        // Inside shard_map, the manual axes the value varies over, as JAX prints them.
        if !self.vma.is_empty() {
            let axes: Vec<&str> = self.vma.iter().map(String::as_str).collect();
            write!(f, "{{V:{}}}", axes.join(","))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tessera_sharding::{Mesh, PartitionSpec};

    use super::*;

    #[test]
    fn avals_carry_a_sharding_and_varying_axes_without_changing_their_type() {
        let mesh = Mesh::auto(&[("x", 2), ("y", 4)]).unwrap();
        let sharding = NamedSharding::new(&mesh, PartitionSpec::parse("P('x')").unwrap()).unwrap();
        let plain = ShapedArray::new(DType::F32, &[8, 4]);
        let mut laid_out = plain.clone();
        laid_out.sharding = Some(Box::new(sharding));
        laid_out.vma.insert("y".into());
        assert!(laid_out.same_type(&plain));
        assert_ne!(laid_out, plain);
        assert_eq!(plain.to_string(), "f32[8,4]");
        assert_eq!(laid_out.to_string(), "f32[8,4]{V:y}");
    }
}
