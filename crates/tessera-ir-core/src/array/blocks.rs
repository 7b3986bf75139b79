//! Moving bytes without decoding them: blocks of an array cut out and written back (how shards
//! are gathered and scattered), and PRNG keys viewed as their `u32` words (how keys cross to
//! devices, which know no key type).

use super::{Array, element_count};
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{IrError, Result};

/// A block of an array: `[start, stop)` per dimension.
pub type Block = [(i64, i64)];

impl Array {
    /// Copies out the block `block` (which must lie inside the array).
    pub fn block(&self, block: &Block) -> Result<Array> {
        self.check_block(block)?;
        let dims: Vec<i64> = block.iter().map(|&(a, b)| b - a).collect();
        let mut out = Array::zeros(&ShapedArray::new(self.dtype, &dims));
        copy_block(self, block, &mut out, &full_block(&dims));
        Ok(out)
    }

    /// Writes `source` into the block `block` of `self`; `source`'s dtype must be `self`'s and
    /// its shape the block's.
    pub fn write_block(&mut self, block: &Block, source: &Array) -> Result<()> {
        self.check_block(block)?;
        let dims: Vec<i64> = block.iter().map(|&(a, b)| b - a).collect();
        if source.dims != dims || source.dtype != self.dtype {
            return Err(IrError::HostSize {
                dtype: source.dtype,
                dims: source.dims.clone(),
                expected: element_count(&dims) * self.dtype.size_in_bytes(),
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
            Err(IrError::BadBlock {
                block: block.to_vec(),
                dims: self.dims.clone(),
            })
        }
    }

    /// Row `k` along the first dimension (its bytes are contiguous, so nothing is decoded).
    pub fn row(&self, k: usize) -> Result<Array> {
        let Some((&n, rest)) = self.dims.split_first() else {
            return Err(IrError::Eval("a scalar has no rows".into()));
        };
        if k as i64 >= n {
            return Err(IrError::BadBlock {
                block: vec![(k as i64, k as i64 + 1)],
                dims: self.dims.clone(),
            });
        }
        let size = element_count(rest) * self.dtype.size_in_bytes();
        Array::from_bytes(
            self.dtype,
            rest,
            self.bytes[k * size..(k + 1) * size].to_vec(),
        )
    }

    /// `rows`, all of `dtype` and shape `row_dims`, stacked along a new first dimension.
    pub fn stack_rows(dtype: DType, row_dims: &[i64], rows: &[Array]) -> Result<Array> {
        let mut dims = vec![rows.len() as i64];
        dims.extend_from_slice(row_dims);
        let mut bytes = Vec::with_capacity(element_count(&dims) * dtype.size_in_bytes());
        for row in rows {
            if row.dtype != dtype || row.dims != row_dims {
                return Err(IrError::Eval(format!(
                    "cannot stack a {:?}{:?} row among rows of {dtype:?}{row_dims:?}",
                    row.dtype, row.dims
                )));
            }
            bytes.extend_from_slice(&row.bytes);
        }
        Array::from_bytes(dtype, &dims, bytes)
    }

    /// A key array's words: `u32[..., 2]` over the same bytes (no copy of the elements).
    /// Any other array comes back as it is.
    pub fn key_words(self) -> Array {
        if !self.dtype.is_key() {
            return self;
        }
        let mut dims = self.dims;
        dims.push(2);
        Array {
            dtype: DType::U32,
            dims,
            bytes: self.bytes,
        }
    }

    /// Keys from their words: a `u32[..., 2]` array read as a key array of its leading shape
    /// (the inverse of [`Array::key_words`]).
    pub fn keys_from_words(self) -> Result<Array> {
        match self.dims.split_last() {
            Some((2, lead)) if self.dtype == DType::U32 => Ok(Array {
                dtype: DType::KeyFry,
                dims: lead.to_vec(),
                bytes: self.bytes,
            }),
            _ => Err(IrError::Eval(format!(
                "PRNG keys are read from u32 words of shape [..., 2], not {:?}{:?}",
                self.dtype, self.dims
            ))),
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
fn copy_block(src: &Array, src_block: &Block, dst: &mut Array, dst_block: &Block) {
    let size = src.dtype.size_in_bytes();
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
        let full = Array::from_slice(&[2, 3, 4], &data).unwrap();
        let block = full.block(&[(1, 2), (0, 2), (1, 3)]).unwrap();
        assert_eq!(block.dims(), [1, 2, 2]);
        assert_eq!(block.to_typed::<i32>().unwrap(), [13, 14, 17, 18]);
        let mut again = Array::zeros(&ShapedArray::new(DType::I32, &[2, 3, 4]));
        again
            .write_block(&[(1, 2), (0, 2), (1, 3)], &block)
            .unwrap();
        let back = again.to_typed::<i32>().unwrap();
        assert_eq!(
            (back[13], back[14], back[17], back[18], back[0]),
            (13, 14, 17, 18, 0)
        );
    }

    #[test]
    fn blocks_outside_the_array_are_errors() {
        let full = Array::from_slice(&[4], &[1f32, 2., 3., 4.]).unwrap();
        assert!(matches!(
            full.block(&[(2, 5)]),
            Err(IrError::BadBlock { .. })
        ));
        assert!(matches!(
            full.block(&[(0, 1), (0, 1)]),
            Err(IrError::BadBlock { .. })
        ));
        let scalar = Array::from_slice(&[], &[7f64]).unwrap();
        assert_eq!(scalar.block(&[]).unwrap().to_typed::<f64>().unwrap(), [7.0]);
    }

    #[test]
    fn rows_are_cut_and_stacked() {
        let a = Array::from_slice(&[3, 2], &[1i64, 2, 3, 4, 5, 6]).unwrap();
        let rows: Vec<Array> = (0..3).map(|k| a.row(k).unwrap()).collect();
        assert_eq!(rows[1].to_typed::<i64>().unwrap(), [3, 4]);
        assert_eq!(Array::stack_rows(DType::I64, &[2], &rows).unwrap(), a);
        assert!(a.row(3).is_err());
        assert!(Array::stack_rows(DType::I64, &[3], &rows).is_err());
    }

    #[test]
    fn keys_and_their_words_share_bytes() {
        let words = Array::from_slice(&[3, 2], &[1u32, 2, 3, 4, 5, 6]).unwrap();
        let keys = words.clone().keys_from_words().unwrap();
        assert_eq!((keys.dtype(), keys.dims()), (DType::KeyFry, &[3][..]));
        assert_eq!(keys.elem_vec()[1].bits(), (3 << 32) | 4);
        assert_eq!(keys.key_words(), words);
        assert!(
            Array::from_slice(&[3], &[1u32, 2, 3])
                .unwrap()
                .keys_from_words()
                .is_err()
        );
    }
}
