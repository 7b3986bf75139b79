//! Host arrays: bytes in row-major order with an element type and dimensions.

use crate::element_type::ElementType;
use crate::error::{PjrtError, Result};

/// A dense row-major array in host memory.
#[derive(Debug, Clone, PartialEq)]
pub struct HostArray {
    ty: ElementType,
    dims: Vec<i64>,
    bytes: Vec<u8>,
}

/// Plain element types that can be copied to and from bytes.
pub trait Element: Copy + 'static {
    /// The matching buffer element type.
    const TYPE: ElementType;
    /// Appends the native-endian bytes of `self`.
    fn put(self, out: &mut Vec<u8>);
    /// Reads one element from native-endian bytes.
    fn get(bytes: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $e:ident) => {
        impl Element for $t {
            const TYPE: ElementType = ElementType::$e;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes());
            }
            fn get(bytes: &[u8]) -> Self {
                let mut raw = [0u8; size_of::<$t>()];
                raw.copy_from_slice(&bytes[..size_of::<$t>()]);
                <$t>::from_ne_bytes(raw)
            }
        }
    };
}
element!(f32, F32);
element!(f64, F64);
element!(i8, S8);
element!(i16, S16);
element!(i32, S32);
element!(i64, S64);
element!(u8, U8);
element!(u16, U16);
element!(u32, U32);
element!(u64, U64);

impl HostArray {
    /// An array from raw bytes; fails if their length does not match the shape.
    pub fn from_bytes(ty: ElementType, dims: &[i64], bytes: Vec<u8>) -> Result<HostArray> {
        let expected = element_count(dims) * ty.size_in_bytes();
        if bytes.len() != expected || dims.iter().any(|&d| d < 0) {
            return Err(PjrtError::HostSize {
                ty,
                dims: dims.to_vec(),
                expected,
                actual: bytes.len(),
            });
        }
        Ok(HostArray {
            ty,
            dims: dims.to_vec(),
            bytes,
        })
    }

    /// An array from typed elements.
    pub fn from_slice<T: Element>(dims: &[i64], data: &[T]) -> Result<HostArray> {
        let mut bytes = Vec::with_capacity(data.len() * T::TYPE.size_in_bytes());
        for &x in data {
            x.put(&mut bytes);
        }
        HostArray::from_bytes(T::TYPE, dims, bytes)
    }

    /// The elements as `T`, or `None` if `T` is not the element type.
    pub fn to_vec<T: Element>(&self) -> Option<Vec<T>> {
        (T::TYPE == self.ty).then(|| {
            self.bytes
                .chunks_exact(self.ty.size_in_bytes())
                .map(T::get)
                .collect()
        })
    }

    /// The element type.
    pub fn element_type(&self) -> ElementType {
        self.ty
    }

    /// The dimensions.
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    /// The raw bytes, row-major.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The number of elements of a shape (1 for a scalar).
pub fn element_count(dims: &[i64]) -> usize {
    dims.iter().map(|&d| d.max(0) as usize).product()
}
