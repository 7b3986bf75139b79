//! The checkpoint's index of tensors, kept in its manifest: each tensor's dtype and global shape,
//! and the blocks it is stored as (a file, the key inside it, the block's start and shape); and
//! each file's size and CRC-32, so that a truncated or damaged file is named before its bytes
//! are used.
//!
//! A block is a box of the global array, `[start, start + shape)` per dimension. The blocks of
//! a tensor cover it exactly once: [`Index::check`] refuses a gap, an overlap or a block outside
//! the tensor. [`copy_block`] writes a block's bytes into the global array's row-major bytes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{NnError, Result};

/// Where one block of a tensor is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockRecord {
    /// The file, relative to the checkpoint's folder.
    pub file: String,
    /// The tensor's name inside that safetensors file.
    pub key: String,
    /// The block's first index in each dimension.
    pub start: Vec<i64>,
    /// The block's size in each dimension.
    pub shape: Vec<i64>,
    /// Where its bytes begin in the file, and their CRC-32: a reader reads and checks only the
    /// blocks it needs. Absent in checkpoints written before 2026-11-27, which are read and
    /// checked file by file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<Stored>,
}

/// Where a block's bytes lie in its file, and their checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    /// The offset of its first byte.
    pub offset: u64,
    /// The CRC-32 of its bytes.
    pub crc32: u32,
}

/// One tensor of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorRecord {
    /// Its dtype, as safetensors names it (`F32`, `BF16`, ...).
    pub dtype: String,
    /// Its global shape.
    pub shape: Vec<i64>,
    /// The blocks that together hold it.
    pub blocks: Vec<BlockRecord>,
}

/// The CRC-32 (IEEE, as zlib's and `crc32` tools') of `bytes`: a file's checksum in the index.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// One data file of a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// Its size in bytes.
    pub bytes: u64,
    /// The CRC-32 (IEEE) of its bytes.
    pub crc32: u32,
}

/// The tensors and files of a checkpoint. Tensor names are `params/<tree path>` and
/// `optimizer/<tree path>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Index {
    /// Every tensor, by name.
    #[serde(default)]
    pub tensors: BTreeMap<String, TensorRecord>,
    /// Every data file, by its name in the folder.
    #[serde(default)]
    pub files: BTreeMap<String, FileRecord>,
}

impl Index {
    /// Whether the index lists nothing (a checkpoint written before indexes were kept).
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Adds `other`'s tensors and files (another writer's part of the same checkpoint). A tensor
    /// both list must agree on its dtype and shape; its blocks are joined.
    pub fn merge(&mut self, other: Index) -> Result<()> {
        for (name, record) in other.tensors {
            match self.tensors.get_mut(&name) {
                None => {
                    self.tensors.insert(name, record);
                }
                Some(mine) if mine.dtype == record.dtype && mine.shape == record.shape => {
                    mine.blocks.extend(record.blocks);
                }
                Some(mine) => {
                    return Err(NnError::Checkpoint(format!(
                        "two writers disagree on tensor `{name}`: {}{:?} and {}{:?}",
                        mine.dtype, mine.shape, record.dtype, record.shape
                    )));
                }
            }
        }
        for (name, file) in other.files {
            if self.files.insert(name.clone(), file).is_some() {
                return Err(NnError::Checkpoint(format!(
                    "two writers wrote the same file `{name}`; give each writer its own number"
                )));
            }
        }
        Ok(())
    }

    /// Checks that every tensor's blocks cover it exactly once and name listed files.
    pub fn check(&self) -> Result<()> {
        for (name, tensor) in &self.tensors {
            check_cover(name, tensor)?;
            if let Some(block) = tensor
                .blocks
                .iter()
                .find(|b| !self.files.contains_key(&b.file))
            {
                return Err(NnError::Checkpoint(format!(
                    "tensor `{name}` has a block in `{}`, which the manifest does not list",
                    block.file
                )));
            }
        }
        Ok(())
    }
}

/// The number of elements of `shape` (saturating: a damaged manifest's sizes never overflow).
fn elements(shape: &[i64]) -> i64 {
    shape
        .iter()
        .try_fold(1i64, |n, &d| n.checked_mul(d))
        .unwrap_or(i64::MAX)
}

/// Whether the blocks `a` and `b` share an element.
fn overlap(a: &BlockRecord, b: &BlockRecord) -> bool {
    (0..a.start.len())
        .all(|d| a.start[d] < b.start[d] + b.shape[d] && b.start[d] < a.start[d] + a.shape[d])
}

fn check_cover(name: &str, tensor: &TensorRecord) -> Result<()> {
    let bad = |problem: String| {
        NnError::Checkpoint(format!(
            "tensor `{name}` ({}{:?}) is not stored whole: {problem}. The checkpoint is damaged; \
             resume from an earlier one",
            tensor.dtype, tensor.shape
        ))
    };
    let rank = tensor.shape.len();
    for b in &tensor.blocks {
        let fits = b.start.len() == rank
            && b.shape.len() == rank
            && (0..rank).all(|d| {
                let end = b.start[d].checked_add(b.shape[d]);
                b.start[d] >= 0 && b.shape[d] >= 0 && end.is_some_and(|e| e <= tensor.shape[d])
            });
        if !fits {
            return Err(bad(format!(
                "the block at {:?} of shape {:?} (in `{}`) lies outside it",
                b.start, b.shape, b.file
            )));
        }
    }
    for (i, a) in tensor.blocks.iter().enumerate() {
        let shared = tensor.blocks[i + 1..]
            .iter()
            .find(|b| elements(&a.shape) > 0 && elements(&b.shape) > 0 && overlap(a, b));
        if let Some(b) = shared {
            return Err(bad(format!(
                "the blocks at {:?} (in `{}`) and {:?} (in `{}`) overlap",
                a.start, a.file, b.start, b.file
            )));
        }
    }
    let covered = tensor
        .blocks
        .iter()
        .fold(0i64, |n, b| n.saturating_add(elements(&b.shape)));
    if covered != elements(&tensor.shape) {
        return Err(bad(format!(
            "its blocks hold {covered} of its {} elements",
            elements(&tensor.shape)
        )));
    }
    Ok(())
}

/// Copies a block's row-major bytes (`src`, of `block.shape`) into the row-major bytes of the
/// whole array (`dst`, of `shape`), `elem` bytes per element.
pub(super) fn copy_block(
    dst: &mut [u8],
    shape: &[i64],
    block: &BlockRecord,
    src: &[u8],
    elem: usize,
) {
    let rank = shape.len();
    if rank == 0 {
        dst[..elem].copy_from_slice(&src[..elem]);
        return;
    }
    let row = block.shape[rank - 1] as usize * elem;
    let rows = elements(&block.shape[..rank - 1]);
    if row == 0 || rows == 0 {
        return;
    }
    // Row-major strides of the whole array, in elements.
    let mut strides = vec![1i64; rank];
    for d in (0..rank - 1).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    let mut index = vec![0i64; rank - 1];
    for r in 0..rows as usize {
        let at: i64 = (0..rank - 1)
            .map(|d| (block.start[d] + index[d]) * strides[d])
            .sum::<i64>()
            + block.start[rank - 1];
        let at = at as usize * elem;
        dst[at..at + row].copy_from_slice(&src[r * row..(r + 1) * row]);
        for d in (0..rank - 1).rev() {
            index[d] += 1;
            if index[d] < block.shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use super::*;

    fn block(start: &[i64], shape: &[i64]) -> BlockRecord {
        BlockRecord {
            stored: None,
            file: "f".into(),
            key: "k".into(),
            start: start.to_vec(),
            shape: shape.to_vec(),
        }
    }

    fn tensor(blocks: Vec<BlockRecord>) -> Index {
        let mut index = Index::default();
        index
            .files
            .insert("f".into(), FileRecord { bytes: 0, crc32: 0 });
        index.tensors.insert(
            "t".into(),
            TensorRecord {
                dtype: "F32".into(),
                shape: vec![4, 6],
                blocks,
            },
        );
        index
    }

    #[test]
    fn blocks_must_cover_the_tensor_once() {
        let halves = vec![block(&[0, 0], &[4, 3]), block(&[0, 3], &[4, 3])];
        tensor(halves).check().unwrap();
        let gap = tensor(vec![block(&[0, 0], &[4, 3])]).check().unwrap_err();
        assert!(gap.to_string().contains("12 of its 24"), "{gap}");
        let twice = vec![block(&[0, 0], &[4, 4]), block(&[0, 2], &[4, 4])];
        let err = tensor(twice).check().unwrap_err();
        assert!(err.to_string().contains("overlap"), "{err}");
        let outside = tensor(vec![block(&[0, 4], &[4, 3])]).check().unwrap_err();
        assert!(outside.to_string().contains("outside"), "{outside}");
        // Sizes of a damaged manifest that would overflow are refused, not wrapped.
        let huge = tensor(vec![block(&[0, i64::MAX], &[4, i64::MAX])])
            .check()
            .unwrap_err();
        assert!(huge.to_string().contains("outside"), "{huge}");
    }

    #[test]
    fn a_block_lands_at_its_place_in_the_whole_array() {
        // A 3x4 array of u8 elements; the block [1..3, 1..3] holds 1 2 / 3 4.
        let mut whole = vec![0u8; 12];
        copy_block(
            &mut whole,
            &[3, 4],
            &block(&[1, 1], &[2, 2]),
            &[1, 2, 3, 4],
            1,
        );
        assert_eq!(whole, [0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0]);
        // Two-byte elements, a 3-d array.
        let mut whole = vec![0u8; 2 * 8];
        let src: Vec<u8> = (1..=8).collect();
        copy_block(
            &mut whole,
            &[2, 2, 2],
            &block(&[1, 0, 0], &[1, 2, 2]),
            &src,
            2,
        );
        assert_eq!(&whole[8..], &src[..]);
        assert!(whole[..8].iter().all(|&b| b == 0));
    }
}
