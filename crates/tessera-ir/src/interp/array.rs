//! Host arrays: a dtype-tagged enum of `ndarray` arrays, and the widened form rules compute in.
//!
//! Rules compute on [`Wide`] (bool, i64, u64 or f64 elements) and narrow the result back to the
//! dtype with [`Array::from_wide`]: float results are rounded once to the target precision (for
//! the basic arithmetic ops this equals computing natively), integers wrap like two's complement.

use crate::interp::EvalError;
use crate::types::{DType, ShapedArray};
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

/// A host array of any dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    /// `bool`.
    Bool(ArrayD<bool>),
    /// `i8`.
    I8(ArrayD<i8>),
    /// `i16`.
    I16(ArrayD<i16>),
    /// `i32`.
    I32(ArrayD<i32>),
    /// `i64`.
    I64(ArrayD<i64>),
    /// `u8`.
    U8(ArrayD<u8>),
    /// `u16`.
    U16(ArrayD<u16>),
    /// `u32`.
    U32(ArrayD<u32>),
    /// `u64`.
    U64(ArrayD<u64>),
    /// `bf16`.
    BF16(ArrayD<bf16>),
    /// `f16`.
    F16(ArrayD<f16>),
    /// `f32`.
    F32(ArrayD<f32>),
    /// `f64`.
    F64(ArrayD<f64>),
}

/// An array widened for computation: one variant per kind of dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum Wide {
    /// Booleans.
    B(ArrayD<bool>),
    /// Signed integers.
    I(ArrayD<i64>),
    /// Unsigned integers.
    U(ArrayD<u64>),
    /// Floats.
    F(ArrayD<f64>),
}

/// Applies `$e` (an expression in `$a`, generic over the element type) to every variant of a
/// [`Wide`], keeping the variant.
#[macro_export]
#[doc(hidden)]
macro_rules! wide_map {
    ($w:expr, $a:ident => $e:expr) => {
        match $w {
            $crate::interp::Wide::B($a) => $crate::interp::Wide::B($e),
            $crate::interp::Wide::I($a) => $crate::interp::Wide::I($e),
            $crate::interp::Wide::U($a) => $crate::interp::Wide::U($e),
            $crate::interp::Wide::F($a) => $crate::interp::Wide::F($e),
        }
    };
}

macro_rules! per_dtype {
    ($s:expr, $a:ident => $e:expr) => {
        match $s {
            Array::Bool($a) => $e,
            Array::I8($a) => $e,
            Array::I16($a) => $e,
            Array::I32($a) => $e,
            Array::I64($a) => $e,
            Array::U8($a) => $e,
            Array::U16($a) => $e,
            Array::U32($a) => $e,
            Array::U64($a) => $e,
            Array::BF16($a) => $e,
            Array::F16($a) => $e,
            Array::F32($a) => $e,
            Array::F64($a) => $e,
        }
    };
}

impl Wide {
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            Wide::B(a) => a.shape(),
            Wide::I(a) => a.shape(),
            Wide::U(a) => a.shape(),
            Wide::F(a) => a.shape(),
        }
    }

    /// Every element as f64.
    pub fn to_f64(&self) -> ArrayD<f64> {
        match self {
            Wide::B(a) => a.mapv(|x| f64::from(u8::from(x))),
            Wide::I(a) => a.mapv(|x| x as f64),
            Wide::U(a) => a.mapv(|x| x as f64),
            Wide::F(a) => a.clone(),
        }
    }

    /// Every element as i64 (floats truncate toward zero, saturating).
    pub fn to_i64(&self) -> ArrayD<i64> {
        match self {
            Wide::B(a) => a.mapv(i64::from),
            Wide::I(a) => a.clone(),
            Wide::U(a) => a.mapv(|x| x as i64),
            Wide::F(a) => a.mapv(|x| x as i64),
        }
    }

    /// Every element as u64 (floats truncate toward zero, saturating).
    pub fn to_u64(&self) -> ArrayD<u64> {
        match self {
            Wide::B(a) => a.mapv(u64::from),
            Wide::I(a) => a.mapv(|x| x as u64),
            Wide::U(a) => a.clone(),
            Wide::F(a) => a.mapv(|x| x as u64),
        }
    }

    /// Every element as bool (non-zero is true).
    pub fn to_bool(&self) -> ArrayD<bool> {
        match self {
            Wide::B(a) => a.clone(),
            Wide::I(a) => a.mapv(|x| x != 0),
            Wide::U(a) => a.mapv(|x| x != 0),
            Wide::F(a) => a.mapv(|x| x != 0.0),
        }
    }
}

impl Array {
    /// The dtype.
    pub fn dtype(&self) -> DType {
        match self {
            Array::Bool(_) => DType::Bool,
            Array::I8(_) => DType::I8,
            Array::I16(_) => DType::I16,
            Array::I32(_) => DType::I32,
            Array::I64(_) => DType::I64,
            Array::U8(_) => DType::U8,
            Array::U16(_) => DType::U16,
            Array::U32(_) => DType::U32,
            Array::U64(_) => DType::U64,
            Array::BF16(_) => DType::BF16,
            Array::F16(_) => DType::F16,
            Array::F32(_) => DType::F32,
            Array::F64(_) => DType::F64,
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        per_dtype!(self, a => a.shape())
    }

    /// The (strongly typed) aval.
    pub fn aval(&self) -> ShapedArray {
        ShapedArray::new(self.dtype(), self.shape())
    }

    /// The array widened for computation.
    pub fn widen(&self) -> Wide {
        match self {
            Array::Bool(a) => Wide::B(a.clone()),
            Array::I8(a) => Wide::I(a.mapv(i64::from)),
            Array::I16(a) => Wide::I(a.mapv(i64::from)),
            Array::I32(a) => Wide::I(a.mapv(i64::from)),
            Array::I64(a) => Wide::I(a.clone()),
            Array::U8(a) => Wide::U(a.mapv(u64::from)),
            Array::U16(a) => Wide::U(a.mapv(u64::from)),
            Array::U32(a) => Wide::U(a.mapv(u64::from)),
            Array::U64(a) => Wide::U(a.clone()),
            Array::BF16(a) => Wide::F(a.mapv(f64::from)),
            Array::F16(a) => Wide::F(a.mapv(f64::from)),
            Array::F32(a) => Wide::F(a.mapv(f64::from)),
            Array::F64(a) => Wide::F(a.clone()),
        }
    }

    /// Converts a widened array to `dtype` (rounding floats, wrapping integers).
    pub fn from_wide(w: &Wide, dtype: DType) -> Array {
        match dtype {
            DType::Bool => Array::Bool(w.to_bool()),
            DType::I8 => Array::I8(w.to_i64().mapv(|x| x as i8)),
            DType::I16 => Array::I16(w.to_i64().mapv(|x| x as i16)),
            DType::I32 => Array::I32(w.to_i64().mapv(|x| x as i32)),
            DType::I64 => Array::I64(w.to_i64()),
            DType::U8 => Array::U8(w.to_u64().mapv(|x| x as u8)),
            DType::U16 => Array::U16(w.to_u64().mapv(|x| x as u16)),
            DType::U32 => Array::U32(w.to_u64().mapv(|x| x as u32)),
            DType::U64 => Array::U64(w.to_u64()),
            DType::BF16 => Array::BF16(w.to_f64().mapv(bf16::from_f64)),
            DType::F16 => Array::F16(w.to_f64().mapv(f16::from_f64)),
            DType::F32 => Array::F32(w.to_f64().mapv(|x| x as f32)),
            DType::F64 => Array::F64(w.to_f64()),
        }
    }

    /// Builds an array of `dtype` and `shape` from row-major f64 values (as in the oracle files).
    pub fn from_f64(dtype: DType, shape: &[usize], data: &[f64]) -> Result<Array, EvalError> {
        let w = ArrayD::from_shape_vec(IxDyn(shape), data.to_vec()).map_err(|_| {
            EvalError::Input(format!(
                "{} values do not fill shape {shape:?} ({} elements)",
                data.len(),
                shape.iter().product::<usize>()
            ))
        })?;
        Ok(Array::from_wide(&Wide::F(w), dtype))
    }

    /// A rank-0 array.
    pub fn scalar(dtype: DType, value: f64) -> Array {
        Array::from_wide(&Wide::F(ArrayD::from_elem(IxDyn(&[]), value)), dtype)
    }

    /// The elements, row-major, as f64.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.widen().to_f64().iter().copied().collect()
    }
}
