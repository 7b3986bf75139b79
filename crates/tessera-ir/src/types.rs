//! Element types, shapes and abstract values (`ShapedArray`), as JAX prints them.

use std::fmt;

/// An element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// `bool`.
    Bool,
    /// `i8`.
    I8,
    /// `i16`.
    I16,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// `u8`.
    U8,
    /// `u16`.
    U16,
    /// `u32`.
    U32,
    /// `u64`.
    U64,
    /// `bf16`.
    BF16,
    /// `f16`.
    F16,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
}

/// Every dtype, in a fixed order.
pub const ALL_DTYPES: [DType; 13] = [
    DType::Bool,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::BF16,
    DType::F16,
    DType::F32,
    DType::F64,
];

impl DType {
    /// The short name used in avals (`f32`, `bool`).
    pub fn short_name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// The numpy name used in params and oracle files (`float32`, `bfloat16`).
    pub fn numpy_name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::BF16 => "bfloat16",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    /// Parses a short (`f32`) or numpy (`float32`) name.
    pub fn from_name(name: &str) -> Option<DType> {
        ALL_DTYPES
            .into_iter()
            .find(|d| d.short_name() == name || d.numpy_name() == name)
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::BF16 | DType::F16 | DType::F32 | DType::F64)
    }

    /// Whether this is a signed integer type.
    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// Whether this is an unsigned integer type.
    pub fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// Whether this is an integer type (signed or unsigned).
    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short_name())
    }
}

/// An array shape (dimension sizes, major to minor).
pub type Shape = smallvec::SmallVec<[usize; 4]>;

/// The abstract value of an array: dtype, shape, weak type and the manual mesh axes it varies over.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShapedArray {
    /// The element type.
    pub dtype: DType,
    /// The shape.
    pub shape: Shape,
    /// JAX's weak type: a Python-scalar-derived value whose dtype yields in promotion.
    pub weak_type: bool,
    /// The manual mesh axes this value varies over (JAX's `vma`); `None` outside `shard_map`.
    pub vma: Option<Vec<String>>,
}

impl ShapedArray {
    /// A strongly typed aval.
    pub fn new(dtype: DType, shape: &[usize]) -> ShapedArray {
        ShapedArray {
            dtype,
            shape: shape.iter().copied().collect(),
            weak_type: false,
            vma: None,
        }
    }

    /// A rank-0 aval.
    pub fn scalar(dtype: DType) -> ShapedArray {
        ShapedArray::new(dtype, &[])
    }

    /// The same aval with `weak_type` set.
    pub fn weak(mut self, weak: bool) -> ShapedArray {
        self.weak_type = weak;
        self
    }

    /// The rank.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// The same dtype and flags with another shape.
    pub fn with_shape(&self, shape: &[usize]) -> ShapedArray {
        ShapedArray {
            shape: shape.iter().copied().collect(),
            ..self.clone()
        }
    }

    /// The same shape and flags with another dtype.
    pub fn with_dtype(&self, dtype: DType) -> ShapedArray {
        ShapedArray {
            dtype,
            ..self.clone()
        }
    }

    /// Whether dtype and shape agree (weak types and vma ignored).
    pub fn same_type(&self, other: &ShapedArray) -> bool {
        self.dtype == other.dtype && self.shape == other.shape
    }
}

impl fmt::Display for ShapedArray {
    /// JAX's form: `f32[2,5]`, `bool[]` (weak types are not marked, as in JAX's jaxprs).
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
