//! Dense host arrays, one type for every layer: the reference interpreter computes on them,
//! PJRT copies them to and from devices (`tessera_pjrt::HostArray` is this type), checkpoints
//! write their bytes.
//!
//! An [`Array`] holds its dtype, its shape and its elements in the dtype's own bytes (see
//! [`bytes`]: 2 per `bf16`, native-endian, as a device buffer holds them). Rules see elements
//! through views: [`Array::elems`] decodes them to [`Elem`]s for rules that move elements
//! (reshape, slice, gather, ...); [`Array::values`] (`f64`) and [`Array::ints`] (exact `i128`)
//! for rules that compute, which build their result with [`Array::from_values`] or
//! [`Array::from_ints`] (rounding or wrapping to the dtype) or [`Array::from_elems`].

mod blocks;
pub mod bytes;
mod elem;

use ndarray::{ArrayD, IxDyn};

pub use blocks::Block;
pub use bytes::{Element, element_count};
pub use elem::{Elem, is_exact_int};

use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{IrError, Result};

/// A dense array on the host: a dtype, a shape and the elements' bytes, row-major.
#[derive(Clone)]
pub struct Array {
    dtype: DType,
    dims: Vec<i64>,
    bytes: Vec<u8>,
}

impl Array {
    /// An array from its bytes (see [`bytes`]); fails if their length does not match the shape,
    /// or a boolean's byte is neither 0 nor 1.
    pub fn from_bytes(dtype: DType, dims: &[i64], bytes: Vec<u8>) -> Result<Array> {
        let expected = element_count(dims).saturating_mul(dtype.size_in_bytes());
        if dtype == DType::Bool && bytes.iter().any(|&b| b > 1) {
            return Err(IrError::Eval(
                "a boolean array's bytes must each be 0 or 1".into(),
            ));
        }
        if bytes.len() != expected || dims.iter().any(|&d| d < 0) {
            return Err(IrError::HostSize {
                dtype,
                dims: dims.to_vec(),
                expected,
                actual: bytes.len(),
            });
        }
        Ok(Array {
            dtype,
            dims: dims.to_vec(),
            bytes,
        })
    }

    /// An array of `T::DTYPE` from row-major elements.
    pub fn from_slice<T: Element>(dims: &[i64], data: &[T]) -> Result<Array> {
        let mut bytes = reserve(std::mem::size_of_val(data), T::DTYPE, dims)?;
        for &x in data {
            x.put(&mut bytes);
        }
        Array::from_bytes(T::DTYPE, dims, bytes)
    }

    /// An array of `shape` from row-major `values`, rounded to `dtype`.
    pub fn new(dtype: DType, shape: &[i64], values: Vec<f64>) -> Result<Array> {
        let elems = values.into_iter().map(|x| Elem::from_f64(dtype, x));
        Array::from_elem_iter(dtype, shape, elems)
    }

    /// An array of `shape` from row-major exact integers, wrapped to `dtype`.
    pub fn from_int_vec(dtype: DType, shape: &[i64], values: Vec<i128>) -> Result<Array> {
        let elems = values.into_iter().map(|v| Elem::from_int(dtype, v));
        Array::from_elem_iter(dtype, shape, elems)
    }

    /// An array of `shape` from row-major elements already in `dtype`'s domain.
    pub fn from_elem_vec(dtype: DType, shape: &[i64], elems: Vec<Elem>) -> Result<Array> {
        Array::from_elem_iter(dtype, shape, elems.into_iter())
    }

    fn from_elem_iter(
        dtype: DType,
        shape: &[i64],
        elems: impl ExactSizeIterator<Item = Elem>,
    ) -> Result<Array> {
        let count = elems.len();
        if count != element_count(shape) || shape.iter().any(|&d| d < 0) {
            return Err(IrError::Eval(format!(
                "{count} elements do not fill shape {shape:?}"
            )));
        }
        let out = reserve(count.saturating_mul(dtype.size_in_bytes()), dtype, shape)?;
        Ok(Array {
            dtype,
            dims: shape.to_vec(),
            bytes: encode_into(dtype, out, elems),
        })
    }

    /// An array of `dtype` holding `elems` (already in its domain), in their logical order.
    pub fn from_elems(dtype: DType, elems: ArrayD<Elem>) -> Array {
        let dims = elems.shape().iter().map(|&d| d as i64).collect();
        Array {
            dtype,
            dims,
            bytes: encode_all(dtype, elems.len(), elems.iter().copied()),
        }
    }

    /// Wraps `f64` values, rounding them to `dtype`.
    pub fn from_values(dtype: DType, values: ArrayD<f64>) -> Array {
        Array::from_elems(dtype, values.mapv(|x| Elem::from_f64(dtype, x)))
    }

    /// Wraps exact integers, wrapping them to `dtype`.
    pub fn from_ints(dtype: DType, values: ArrayD<i128>) -> Array {
        Array::from_elems(dtype, values.mapv(|v| Elem::from_int(dtype, v)))
    }

    /// A scalar.
    pub fn scalar(dtype: DType, value: f64) -> Array {
        Array::from_values(dtype, ArrayD::from_elem(IxDyn(&[]), value))
    }

    /// An array of zeros (all-zero bytes are zero in every dtype).
    pub fn zeros(aval: &ShapedArray) -> Array {
        let dims: Vec<i64> = aval.shape.iter().map(|&d| d.max(0)).collect();
        let len = element_count(&dims) * aval.dtype.size_in_bytes();
        Array {
            dtype: aval.dtype,
            dims,
            bytes: vec![0; len],
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The dimensions.
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    /// The shape, owned.
    pub fn shape(&self) -> Vec<i64> {
        self.dims.clone()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        element_count(&self.dims)
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The type.
    pub fn aval(&self) -> ShapedArray {
        ShapedArray::new(self.dtype, &self.dims)
    }

    /// The bytes, row-major.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes, row-major, taken out without a copy.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// The elements as `T`, or `None` if `T` is not of this array's dtype.
    pub fn to_typed<T: Element>(&self) -> Option<Vec<T>> {
        (T::DTYPE == self.dtype).then(|| {
            self.bytes
                .chunks_exact(self.dtype.size_in_bytes())
                .map(T::get)
                .collect()
        })
    }

    /// The elements in row-major order.
    fn elem_iter(&self) -> impl Iterator<Item = Elem> + '_ {
        let dtype = self.dtype;
        self.bytes
            .chunks_exact(dtype.size_in_bytes())
            .map(move |c| bytes::decode(dtype, c))
    }

    fn nd<T>(&self, f: impl Fn(Elem) -> T) -> ArrayD<T> {
        let dims: Vec<usize> = self.dims.iter().map(|&d| d as usize).collect();
        let data: Vec<T> = self.elem_iter().map(f).collect();
        ArrayD::from_shape_vec(IxDyn(&dims), data).expect("an array's bytes fill its shape")
    }

    /// The elements, decoded (see [`Elem`]).
    pub fn elems(&self) -> ArrayD<Elem> {
        self.nd(|e| e)
    }

    /// The values as `f64` (integers past 2^53 round; use [`Array::ints`] for them).
    pub fn values(&self) -> ArrayD<f64> {
        let dtype = self.dtype;
        self.nd(|e| e.to_f64(dtype))
    }

    /// The values as exact integers (floats truncated toward zero).
    pub fn ints(&self) -> ArrayD<i128> {
        let dtype = self.dtype;
        self.nd(|e| e.to_int(dtype))
    }

    /// The elements in row-major order, decoded.
    pub fn elem_vec(&self) -> Vec<Elem> {
        self.elem_iter().collect()
    }

    /// The values in row-major order, as `f64`.
    pub fn to_vec(&self) -> Vec<f64> {
        self.elem_iter().map(|e| e.to_f64(self.dtype)).collect()
    }

    /// The values in row-major order, as exact integers.
    pub fn to_int_vec(&self) -> Vec<i128> {
        self.elem_iter().map(|e| e.to_int(self.dtype)).collect()
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

    /// The first element (a scalar's); `None` for an empty array.
    pub fn first_elem(&self) -> Option<Elem> {
        self.elem_iter().next()
    }

    /// The first element as an `f64` (a scalar's value); `None` for an empty array.
    pub fn first_value(&self) -> Option<f64> {
        self.elem_iter().next().map(|e| e.to_f64(self.dtype))
    }

    /// The first element as an exact integer; `None` for an empty array.
    pub fn first_int(&self) -> Option<i128> {
        self.elem_iter().next().map(|e| e.to_int(self.dtype))
    }

    /// `elems` as an array of this array's dtype (elements already in its domain).
    pub fn with_elems(&self, elems: ArrayD<Elem>) -> Array {
        Array::from_elems(self.dtype, elems)
    }

    /// The same bytes read as another shape of as many elements (a reshape without decoding).
    pub fn reshaped(self, dims: &[i64]) -> Result<Array> {
        Array::from_bytes(self.dtype, dims, self.bytes)
    }
}

fn encode_all(dtype: DType, count: usize, elems: impl Iterator<Item = Elem>) -> Vec<u8> {
    encode_into(
        dtype,
        Vec::with_capacity(count * dtype.size_in_bytes()),
        elems,
    )
}

/// Appends the bytes of `elems` to `out`.
fn encode_into(dtype: DType, mut out: Vec<u8>, elems: impl Iterator<Item = Elem>) -> Vec<u8> {
    for e in elems {
        bytes::encode(dtype, e, &mut out);
    }
    out
}

/// An empty buffer with room for `len` bytes of an array of `dtype` and `dims`, reserved
/// fallibly: an allocation the host refuses is an [`IrError::HostAlloc`], not an abort.
fn reserve(len: usize, dtype: DType, dims: &[i64]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| IrError::HostAlloc {
        bytes: u64::try_from(len).unwrap_or(u64::MAX),
        what: format!("an array of {dtype:?}{dims:?}"),
    })?;
    Ok(out)
}

/// Prints the dtype, the shape and the values (integers exactly).
impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("Array");
        s.field("dtype", &self.dtype).field("shape", &self.dims);
        if self.dtype.is_key() {
            let words: Vec<[u32; 2]> = self
                .elem_iter()
                .map(|e| [(e.bits() >> 32) as u32, e.bits() as u32])
                .collect();
            s.field("words", &words);
        } else if is_exact_int(self.dtype) {
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
        if self.dtype != other.dtype || self.dims != other.dims {
            return false;
        }
        // Integers and keys compare exactly (a key's bits are two words, not a float).
        if is_exact_int(self.dtype) || self.dtype.is_key() {
            self.bytes == other.bytes
        } else {
            self.to_vec() == other.to_vec()
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
    fn elements_take_their_dtypes_width() {
        let b = Array::new(DType::BF16, &[2, 2], vec![1.0, -2.0, 0.5, 3.0]).unwrap();
        assert_eq!(b.bytes().len(), 8);
        assert_eq!(
            b.to_typed::<half::bf16>().unwrap(),
            [1.0, -2.0, 0.5, 3.0].map(half::bf16::from_f32)
        );
        assert_eq!(b.values().shape(), [2, 2]);
        let p = Array::new(DType::Bool, &[3], vec![0.0, 2.0, 1.0]).unwrap();
        assert_eq!(p.bytes(), [0, 1, 1]);
        assert!(Array::from_bytes(DType::F32, &[2], vec![0; 7]).is_err());
        assert!(b.to_typed::<f32>().is_none());
    }

    #[test]
    fn a_buffer_the_host_cannot_give_is_an_error() {
        let err = reserve(usize::MAX, DType::F32, &[1 << 62]).unwrap_err();
        assert!(
            matches!(&err, IrError::HostAlloc { bytes, what } if *bytes == u64::try_from(usize::MAX).unwrap_or(u64::MAX) && what.contains("F32")),
            "{err:?}"
        );
        let ok = reserve(16, DType::F32, &[4]).unwrap();
        assert!(ok.is_empty() && ok.capacity() >= 16);
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
