//! Host arrays for the reference interpreter, stored per dtype: each element is an [`Elem`], the
//! 64 bits of its value in the dtype's own domain. Floating dtypes hold an `f64` already rounded
//! to the dtype's precision; integers hold their exact two's-complement value (so `i64` and `u64`
//! are exact over their whole range, and wrap as XLA's do); booleans hold 0 or 1.
//!
//! Rules that move elements (reshape, slice, gather, ...) work on [`Elem`]s and never look at a
//! value. Rules that compute read [`Array::values`] (as `f64`) or [`Array::ints`] (as exact
//! `i128`) and build their result with [`Array::from_values`] or [`Array::from_ints`], which
//! round or wrap to the dtype.

use ndarray::{ArrayD, IxDyn};

use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{IrError, Result};

/// One element: the 64 bits of a value, read in the domain of the array's dtype (see the module
/// docs). All-zero bits are zero in every dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Elem(u64);

impl Elem {
    /// Zero in every dtype.
    pub const ZERO: Elem = Elem(0);

    /// `x` rounded to `dtype` (floats to their precision, integers by truncation and wrap-around,
    /// booleans to 0/1).
    pub fn from_f64(dtype: DType, x: f64) -> Elem {
        let x = dtype.round(x);
        match storage(dtype) {
            Storage::Float => Elem(x.to_bits()),
            Storage::Unsigned => Elem(x as u64),
            Storage::Signed => Elem(x as i64 as u64),
        }
    }

    /// The exact integer `v` wrapped to `dtype` as XLA wraps (modulo 2^bits); booleans are
    /// `v != 0`, floats the nearest value.
    pub fn from_int(dtype: DType, v: i128) -> Elem {
        use DType::*;
        let bits = match dtype {
            Bool => u64::from(v != 0),
            I8 => v as i8 as i64 as u64,
            I16 => v as i16 as i64 as u64,
            I32 => v as i32 as i64 as u64,
            I64 => v as i64 as u64,
            U8 => u64::from(v as u8),
            U16 => u64::from(v as u16),
            U32 => u64::from(v as u32),
            U64 => v as u64,
            F64 | KeyFry => return Elem::from_f64(dtype, v as f64),
            // Rounded once: through an f64 rounded to odd, which then rounds to the narrower
            // float as a direct conversion would.
            BF16 | F16 | F32 => return Elem::from_f64(dtype, round_to_odd(v)),
        };
        Elem(bits)
    }

    /// The value as an `f64` (integers past 2^53 round to the nearest `f64`).
    pub fn to_f64(self, dtype: DType) -> f64 {
        match storage(dtype) {
            Storage::Float => f64::from_bits(self.0),
            Storage::Unsigned => self.0 as f64,
            Storage::Signed => self.0 as i64 as f64,
        }
    }

    /// The value as an exact integer (floats truncated toward zero, NaN as 0).
    pub fn to_int(self, dtype: DType) -> i128 {
        match storage(dtype) {
            Storage::Float => f64::from_bits(self.0) as i128,
            Storage::Unsigned => i128::from(self.0),
            Storage::Signed => i128::from(self.0 as i64),
        }
    }

    /// `self + other` in `dtype`: integers exactly and wrapping, floats rounded to the dtype.
    pub fn add(self, other: Elem, dtype: DType) -> Elem {
        if is_exact_int(dtype) {
            Elem::from_int(dtype, self.to_int(dtype).wrapping_add(other.to_int(dtype)))
        } else {
            Elem::from_f64(dtype, self.to_f64(dtype) + other.to_f64(dtype))
        }
    }

    /// The larger of `self` and `other` in `dtype` (for floats, a NaN loses, as `f64::max`).
    pub fn max(self, other: Elem, dtype: DType) -> Elem {
        if is_exact_int(dtype) {
            Elem::from_int(dtype, self.to_int(dtype).max(other.to_int(dtype)))
        } else {
            Elem::from_f64(dtype, self.to_f64(dtype).max(other.to_f64(dtype)))
        }
    }

    /// The smaller of `self` and `other` in `dtype` (for floats, a NaN loses, as `f64::min`).
    pub fn min(self, other: Elem, dtype: DType) -> Elem {
        if is_exact_int(dtype) {
            Elem::from_int(dtype, self.to_int(dtype).min(other.to_int(dtype)))
        } else {
            Elem::from_f64(dtype, self.to_f64(dtype).min(other.to_f64(dtype)))
        }
    }

    /// The raw bits (an `f64`'s bits for floating dtypes, the two's-complement value for
    /// integers).
    pub fn bits(self) -> u64 {
        self.0
    }

    /// An element from raw bits (see [`Elem::bits`]).
    pub fn from_bits(bits: u64) -> Elem {
        Elem(bits)
    }
}

/// `v` as an `f64` rounded to odd: exact when it fits, else the neighbour toward `v` whose last
/// mantissa bit is 1 (so a second rounding to a narrower float is correct).
fn round_to_odd(v: i128) -> f64 {
    let nearest = v as f64;
    let back = nearest as i128;
    if back == v || nearest.to_bits() & 1 == 1 {
        return nearest;
    }
    let bits = nearest.to_bits();
    // Away from zero when the nearest value fell short of `v` in magnitude, else toward zero.
    let outward = (back < v) == (nearest > 0.0);
    f64::from_bits(if outward { bits + 1 } else { bits - 1 })
}

/// How a dtype's values sit in an [`Elem`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Storage {
    /// An `f64` (floating dtypes, and PRNG keys, whose two words are packed into its bits).
    Float,
    /// A zero-extended unsigned integer (and booleans).
    Unsigned,
    /// A sign-extended signed integer.
    Signed,
}

fn storage(dtype: DType) -> Storage {
    use DType::*;
    match dtype {
        BF16 | F16 | F32 | F64 | KeyFry => Storage::Float,
        Bool | U8 | U16 | U32 | U64 => Storage::Unsigned,
        I8 | I16 | I32 | I64 => Storage::Signed,
    }
}

/// Whether `dtype`'s values are integers held exactly (signed, unsigned and booleans): rules
/// compute on [`Array::ints`] for these.
pub fn is_exact_int(dtype: DType) -> bool {
    storage(dtype) != Storage::Float
}

/// A dense array on the host.
#[derive(Clone)]
pub struct Array {
    /// The element type.
    pub dtype: DType,
    /// The elements, in `dtype`'s domain.
    pub data: ArrayD<Elem>,
}

impl Array {
    /// An array of `shape` from row-major `values`, rounded to `dtype`.
    pub fn new(dtype: DType, shape: &[i64], values: Vec<f64>) -> Result<Array> {
        let elems = values
            .into_iter()
            .map(|x| Elem::from_f64(dtype, x))
            .collect();
        Array::from_elem_vec(dtype, shape, elems)
    }

    /// An array of `shape` from row-major exact integers, wrapped to `dtype`.
    pub fn from_int_vec(dtype: DType, shape: &[i64], values: Vec<i128>) -> Result<Array> {
        let elems = values
            .into_iter()
            .map(|v| Elem::from_int(dtype, v))
            .collect();
        Array::from_elem_vec(dtype, shape, elems)
    }

    /// An array of `shape` from row-major elements already in `dtype`'s domain.
    pub fn from_elem_vec(dtype: DType, shape: &[i64], elems: Vec<Elem>) -> Result<Array> {
        let dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
        let data = ArrayD::from_shape_vec(IxDyn(&dims), elems)
            .map_err(|e| IrError::Eval(format!("{e}: shape {shape:?}")))?;
        Ok(Array { dtype, data })
    }

    /// Wraps `f64` values, rounding them to `dtype`.
    pub fn from_values(dtype: DType, values: ArrayD<f64>) -> Array {
        Array {
            dtype,
            data: values.mapv(|x| Elem::from_f64(dtype, x)),
        }
    }

    /// Wraps exact integers, wrapping them to `dtype`.
    pub fn from_ints(dtype: DType, values: ArrayD<i128>) -> Array {
        Array {
            dtype,
            data: values.mapv(|v| Elem::from_int(dtype, v)),
        }
    }

    /// A scalar.
    pub fn scalar(dtype: DType, value: f64) -> Array {
        Array::from_values(dtype, ArrayD::from_elem(IxDyn(&[]), value))
    }

    /// An array of zeros.
    pub fn zeros(aval: &ShapedArray) -> Array {
        let dims: Vec<usize> = aval.shape.iter().map(|&d| d.max(0) as usize).collect();
        Array {
            dtype: aval.dtype,
            data: ArrayD::from_elem(IxDyn(&dims), Elem::ZERO),
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

    /// The values as `f64` (integers past 2^53 round; use [`Array::ints`] for them).
    pub fn values(&self) -> ArrayD<f64> {
        let dtype = self.dtype;
        self.data.mapv(|e| e.to_f64(dtype))
    }

    /// The values as exact integers (floats truncated toward zero).
    pub fn ints(&self) -> ArrayD<i128> {
        let dtype = self.dtype;
        self.data.mapv(|e| e.to_int(dtype))
    }

    /// The values in row-major order, as `f64`.
    pub fn to_vec(&self) -> Vec<f64> {
        self.data.iter().map(|e| e.to_f64(self.dtype)).collect()
    }

    /// The values in row-major order, as exact integers.
    pub fn to_int_vec(&self) -> Vec<i128> {
        self.data.iter().map(|e| e.to_int(self.dtype)).collect()
    }

    /// The values converted to `dtype` as `convert_element_type` converts them: integers
    /// exactly (wrapping), floats rounded, floats to integers truncated (NaN to 0), anything to
    /// `bool` as `x != 0`; a copy when the dtype is already `dtype`.
    pub fn converted(&self, dtype: DType) -> Array {
        if dtype == self.dtype {
            self.clone()
        } else if is_exact_int(self.dtype) {
            Array::from_ints(dtype, self.ints())
        } else {
            Array::from_values(dtype, self.values())
        }
    }

    /// [`Array::converted`], without a copy when the dtype is already `dtype`.
    pub fn into_dtype(self, dtype: DType) -> Array {
        if dtype == self.dtype {
            self
        } else {
            self.converted(dtype)
        }
    }

    /// The first element as an `f64` (a scalar's value); `None` for an empty array.
    pub fn first_value(&self) -> Option<f64> {
        self.data.iter().next().map(|e| e.to_f64(self.dtype))
    }

    /// The first element as an exact integer; `None` for an empty array.
    pub fn first_int(&self) -> Option<i128> {
        self.data.iter().next().map(|e| e.to_int(self.dtype))
    }

    /// `data` as an array of this array's dtype (elements already in its domain).
    pub fn with_elems(&self, data: ArrayD<Elem>) -> Array {
        Array {
            dtype: self.dtype,
            data,
        }
    }
}

/// Prints the dtype, the shape and the values (integers exactly).
impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("Array");
        s.field("dtype", &self.dtype).field("shape", &self.shape());
        if is_exact_int(self.dtype) {
            s.field("values", &self.to_int_vec());
        } else {
            s.field("values", &self.to_vec());
        }
        s.finish()
    }
}

/// Arrays are equal when their dtypes and shapes are, and their values compare equal in the
/// dtype's domain (so `0.0 == -0.0` and NaN differs from itself, as with `f64`).
impl PartialEq for Array {
    fn eq(&self, other: &Array) -> bool {
        if self.dtype != other.dtype || self.data.shape() != other.data.shape() {
            return false;
        }
        // Integers and keys compare exactly (a key's bits are two words, not a float).
        if is_exact_int(self.dtype) || self.dtype.is_key() {
            self.data == other.data
        } else {
            self.values() == other.values()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i64_and_u64_are_exact_over_their_range() {
        let big = (1_i128 << 53) + 1;
        let a =
            Array::from_int_vec(DType::I64, &[3], vec![big, -big, i128::from(i64::MIN)]).unwrap();
        assert_eq!(a.to_int_vec(), vec![big, -big, i128::from(i64::MIN)]);
        let u = Array::from_int_vec(DType::U64, &[1], vec![i128::from(u64::MAX)]).unwrap();
        assert_eq!(u.to_int_vec(), vec![i128::from(u64::MAX)]);
    }

    #[test]
    fn integers_wrap_and_floats_round() {
        assert_eq!(Elem::from_int(DType::I8, 200).to_int(DType::I8), -56);
        assert_eq!(
            Elem::from_int(DType::U32, -1).to_int(DType::U32),
            4294967295
        );
        assert_eq!(
            Elem::from_f64(DType::F32, 0.1).to_f64(DType::F32),
            f64::from(0.1_f32)
        );
        assert_eq!(Elem::from_f64(DType::Bool, 3.0).to_int(DType::Bool), 1);
    }

    #[test]
    fn integers_convert_to_narrow_floats_with_one_rounding() {
        // 2^60 + 2^36 + 1 lies just above the midpoint of two f32 values; rounding through the
        // nearest f64 would land on the midpoint and round to even, down.
        let v = (1_i128 << 60) + (1 << 36) + 1;
        let want = f64::from(v as f32);
        assert_eq!(Elem::from_int(DType::F32, v).to_f64(DType::F32), want);
        assert_eq!(want, ((1_i128 << 60) + (1 << 37)) as f64);
        assert_eq!(round_to_odd(-v), -round_to_odd(v));
    }

    #[test]
    fn equality_compares_values() {
        let a = Array::new(DType::F32, &[1], vec![0.0]).unwrap();
        let b = Array::new(DType::F32, &[1], vec![-0.0]).unwrap();
        assert_eq!(a, b);
        let n = Array::new(DType::F32, &[1], vec![f64::NAN]).unwrap();
        assert_ne!(n, n.clone());
    }
}
