//! Reading a checkpoint's tensors back: from the blocks its index lists (each file's size and
//! CRC-32 checked before its bytes are used), or, for a checkpoint written before indexes were
//! kept, from whole tensors named by their paths.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use safetensors::SafeTensors;
use tessera_ir::{Array, ShapedArray};

use super::index::{BlockRecord, Index, TensorRecord, copy_block};
use super::ranged;
use super::writer::Part;
use super::{array_from_bytes, io_error, st_dtype};
use crate::error::{NnError, Result};
use crate::tree::Tree;

/// The data files of one checkpoint folder, each read and checked once.
pub(super) struct Files<'a> {
    folder: &'a Path,
    index: &'a Index,
    read: HashMap<String, Vec<u8>>,
}

impl<'a> Files<'a> {
    pub(super) fn new(folder: &'a Path, index: &'a Index) -> Files<'a> {
        Files {
            folder,
            index,
            read: HashMap::new(),
        }
    }

    /// The bytes of `file`, checked against the manifest's size and CRC-32; errors name the file
    /// and `tensor`, the tensor being read from it.
    fn bytes(&mut self, file: &str, tensor: &str) -> Result<&[u8]> {
        if !self.read.contains_key(file) {
            let bytes = self.read_checked(file, tensor)?;
            self.read.insert(file.to_owned(), bytes);
        }
        Ok(self.read.get(file).map(Vec::as_slice).unwrap_or_default())
    }

    fn read_checked(&self, file: &str, tensor: &str) -> Result<Vec<u8>> {
        let path = self.folder.join(file);
        let damaged = |problem: String| {
            NnError::Checkpoint(format!(
                "{} (holding tensor `{tensor}`) {problem}. Fix: restore the file, or delete the \
                 folder {} to resume from the checkpoint before it",
                path.display(),
                self.folder.display()
            ))
        };
        let record = self
            .index
            .files
            .get(file)
            .ok_or_else(|| damaged("is not listed in the manifest".into()))?;
        let bytes = fs::read(&path).map_err(|e| damaged(format!("cannot be read ({e})")))?;
        if bytes.len() as u64 != record.bytes {
            return Err(damaged(format!(
                "is {} bytes but the manifest says {}: it was cut short or changed",
                bytes.len(),
                record.bytes
            )));
        }
        let crc = super::index::crc32(&bytes);
        if crc != record.crc32 {
            return Err(damaged(format!(
                "has CRC-32 {crc:08x} but the manifest says {:08x}: its bytes are damaged",
                record.crc32
            )));
        }
        Ok(bytes)
    }

    /// The block's bytes, checked against its record's dtype and shape: read alone where the
    /// manifest says where it lies, else from its whole file.
    fn block(&mut self, name: &str, tensor: &TensorRecord, block: &BlockRecord) -> Result<Vec<u8>> {
        match block.stored {
            Some(stored) => {
                ranged::read_block(self.folder, self.index, name, tensor, block, stored)
            }
            None => self.block_of_whole_file(name, tensor, block),
        }
    }

    fn block_of_whole_file(
        &mut self,
        name: &str,
        tensor: &TensorRecord,
        block: &BlockRecord,
    ) -> Result<Vec<u8>> {
        let path = self.folder.join(&block.file);
        let bytes = self.bytes(&block.file, name)?;
        let file = SafeTensors::deserialize(bytes).map_err(|e| {
            NnError::Checkpoint(format!(
                "{} (holding tensor `{name}`) is not a safetensors file: {e}",
                path.display()
            ))
        })?;
        let view = file.tensor(&block.key).map_err(|_| {
            NnError::Checkpoint(format!(
                "{} lacks `{}`, a block of tensor `{name}` the manifest lists",
                path.display(),
                block.key
            ))
        })?;
        let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
        if shape != block.shape || format!("{:?}", view.dtype()) != tensor.dtype {
            return Err(NnError::Checkpoint(format!(
                "{}: block `{}` of tensor `{name}` is {:?}{shape:?}, but the manifest says \
                 {}{:?}",
                path.display(),
                block.key,
                view.dtype(),
                tensor.dtype,
                block.shape
            )));
        }
        Ok(view.data().to_vec())
    }
}

/// The tree of `part` from the indexed checkpoint in `folder`, checked against `expected`: a
/// tensor the model lacks or the checkpoint lacks, or one of another shape or dtype, is an error
/// naming it. Only the tensors `wanted` names are read (the others are `None`; their files are
/// not opened for them).
pub(super) fn assemble(
    files: &mut Files<'_>,
    part: Part,
    expected: &Tree<ShapedArray>,
    wanted: &dyn Fn(Part, &str) -> bool,
) -> Result<Tree<Option<Array>>> {
    let index = files.index;
    let folder = files.folder.to_path_buf();
    let prefix = format!("{}/", part.name());
    let paths = expected.paths();
    let extra = index
        .tensors
        .keys()
        .filter_map(|n| n.strip_prefix(&prefix))
        .find(|n| !paths.iter().any(|w| w == n));
    if let Some(extra) = extra {
        return Err(mismatch(
            &folder,
            extra,
            "is in the checkpoint but not in this model",
        ));
    }
    expected.try_map(&mut |path, aval| {
        let name = format!("{prefix}{path}");
        let record = index
            .tensors
            .get(&name)
            .ok_or_else(|| mismatch(&folder, path, "is missing from the checkpoint"))?;
        let dtype = format!("{:?}", st_dtype(aval.dtype)?);
        if record.shape != aval.shape || record.dtype != dtype {
            return Err(mismatch(
                &folder,
                path,
                &format!(
                    "is {}{:?} in the checkpoint but {:?}{:?} in this model",
                    record.dtype, record.shape, aval.dtype, aval.shape
                ),
            ));
        }
        if !wanted(part, path) {
            return Ok(None);
        }
        let elem = aval.dtype.size_in_bytes();
        let count: i64 = aval.shape.iter().product();
        let mut whole = vec![0u8; count as usize * elem];
        for block in &record.blocks {
            let bytes = files.block(&name, record, block)?;
            copy_block(&mut whole, &aval.shape, block, &bytes, elem);
        }
        array_from_bytes(aval.dtype, &aval.shape, &whole).map(Some)
    })
}

fn mismatch(folder: &Path, tensor: &str, problem: &str) -> NnError {
    NnError::CheckpointMismatch {
        file: folder.join(super::MANIFEST_FILE),
        tensor: tensor.to_owned(),
        problem: problem.to_owned(),
    }
}

/// A tree from a checkpoint written before indexes were kept: one safetensors file holding each
/// tensor whole under its path.
pub(super) fn decode_whole(path: &Path, expected: &Tree<ShapedArray>) -> Result<Tree<Array>> {
    let bytes = fs::read(path).map_err(|e| io_error(path, "cannot read", e))?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| {
        NnError::Checkpoint(format!("{} is not a safetensors file: {e}", path.display()))
    })?;
    let wanted = expected.paths();
    let file_path = PathBuf::from(path);
    if let Some(extra) = file
        .names()
        .into_iter()
        .find(|n| !wanted.iter().any(|w| w == n))
    {
        return Err(NnError::CheckpointMismatch {
            file: file_path,
            tensor: extra.to_owned(),
            problem: "is in the checkpoint but not in this model".into(),
        });
    }
    expected.try_map(&mut |name, aval| {
        let mismatch = |problem: String| NnError::CheckpointMismatch {
            file: file_path.clone(),
            tensor: name.to_owned(),
            problem,
        };
        let view = file
            .tensor(name)
            .map_err(|_| mismatch("is missing from the checkpoint".into()))?;
        let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
        let dtype = st_dtype(aval.dtype)?;
        if shape != aval.shape || view.dtype() != dtype {
            return Err(mismatch(format!(
                "is {:?}{shape:?} in the checkpoint but {:?}{:?} in this model",
                view.dtype(),
                aval.dtype,
                aval.shape
            )));
        }
        array_from_bytes(aval.dtype, &shape, view.data())
    })
}
