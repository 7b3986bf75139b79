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

    /// The raw bytes, row-major, taken out without a copy.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// The number of elements of a shape (1 for a scalar).
pub fn element_count(dims: &[i64]) -> usize {
    dims.iter().map(|&d| d.max(0) as usize).product()
}

/// A block of an array: `[start, stop)` per dimension.
pub type Block = [(i64, i64)];

impl HostArray {
    /// A zero-filled array.
    pub fn zeros(ty: ElementType, dims: &[i64]) -> HostArray {
        HostArray {
            ty,
            dims: dims.to_vec(),
            bytes: vec![0; element_count(dims) * ty.size_in_bytes()],
        }
    }

    /// Copies out the block `block` (which must lie inside the array).
    pub fn block(&self, block: &Block) -> Result<HostArray> {
        self.check_block(block)?;
        let dims: Vec<i64> = block.iter().map(|&(a, b)| b - a).collect();
        let mut out = HostArray::zeros(self.ty, &dims);
        copy_block(self, block, &mut out, &full_block(&dims));
        Ok(out)
    }

    /// Writes `source` into the block `block` of `self`; `source`'s shape must be the block's.
    pub fn write_block(&mut self, block: &Block, source: &HostArray) -> Result<()> {
        self.check_block(block)?;
        let dims: Vec<i64> = block.iter().map(|&(a, b)| b - a).collect();
        if source.dims != dims || source.ty != self.ty {
            return Err(PjrtError::HostSize {
                ty: source.ty,
                dims: source.dims.clone(),
                expected: element_count(&dims) * self.ty.size_in_bytes(),
                actual: source.bytes.len(),
            });
        }
        copy_block(source, &full_block(&dims), self, block);
        Ok(())
    }

    fn check_block(&self, block: &Block) -> Result<()> {
        let inside = block.len() == self.dims.len()
            && block
                .iter()
                .zip(&self.dims)
                .all(|(&(a, b), &d)| 0 <= a && a <= b && b <= d);
        if inside {
            Ok(())
        } else {
            Err(PjrtError::BadBlock {
                block: block.to_vec(),
                dims: self.dims.clone(),
            })
        }
    }
}

fn full_block(dims: &[i64]) -> Vec<(i64, i64)> {
    dims.iter().map(|&d| (0, d)).collect()
}

fn strides(dims: &[i64]) -> Vec<usize> {
    let mut strides = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1].max(0) as usize;
    }
    strides
}

/// Copies the block `src_block` of `src` onto the block `dst_block` of `dst` (same extents),
/// one contiguous innermost run at a time.
fn copy_block(src: &HostArray, src_block: &Block, dst: &mut HostArray, dst_block: &Block) {
    let size = src.ty.size_in_bytes();
    let extents: Vec<i64> = src_block.iter().map(|&(a, b)| b - a).collect();
    if extents.contains(&0) {
        return;
    }
    let (src_strides, dst_strides) = (strides(&src.dims), strides(&dst.dims));
    let rank = extents.len();
    let run = if rank == 0 {
        1
    } else {
        extents[rank - 1] as usize
    };
    let outer: usize = extents[..rank.saturating_sub(1)]
        .iter()
        .map(|&e| e as usize)
        .product();
    let mut index = vec![0i64; rank.saturating_sub(1)];
    for _ in 0..outer {
        let offset = |block: &Block, strides: &[usize]| -> usize {
            let mut at = 0usize;
            for d in 0..rank {
                let i = if d + 1 == rank { 0 } else { index[d] };
                at += (block[d].0 + i) as usize * strides[d];
            }
            at * size
        };
        let (s, d) = (
            offset(src_block, &src_strides),
            offset(dst_block, &dst_strides),
        );
        dst.bytes[d..d + run * size].copy_from_slice(&src.bytes[s..s + run * size]);
        for k in (0..index.len()).rev() {
            index[k] += 1;
            if index[k] < extents[k] {
                break;
            }
            index[k] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_cut_and_written_back_row_major() {
        let data: Vec<i32> = (0..24).collect();
        let full = HostArray::from_slice(&[2, 3, 4], &data).unwrap();
        let block = full.block(&[(1, 2), (0, 2), (1, 3)]).unwrap();
        assert_eq!(block.dims(), [1, 2, 2]);
        assert_eq!(block.to_vec::<i32>().unwrap(), [13, 14, 17, 18]);
        let mut again = HostArray::zeros(ElementType::S32, &[2, 3, 4]);
        again
            .write_block(&[(1, 2), (0, 2), (1, 3)], &block)
            .unwrap();
        let back = again.to_vec::<i32>().unwrap();
        assert_eq!(
            (back[13], back[14], back[17], back[18], back[0]),
            (13, 14, 17, 18, 0)
        );
    }

    #[test]
    fn blocks_outside_the_array_are_errors() {
        let full = HostArray::from_slice(&[4], &[1f32, 2., 3., 4.]).unwrap();
        assert!(matches!(
            full.block(&[(2, 5)]),
            Err(PjrtError::BadBlock { .. })
        ));
        assert!(matches!(
            full.block(&[(0, 1), (0, 1)]),
            Err(PjrtError::BadBlock { .. })
        ));
        assert_eq!(
            HostArray::from_slice(&[], &[7f64])
                .unwrap()
                .block(&[])
                .unwrap()
                .to_vec::<f64>()
                .unwrap(),
            [7.0]
        );
    }
}
