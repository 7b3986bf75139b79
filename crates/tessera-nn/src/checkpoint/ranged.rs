//! Reading one block of a checkpoint file alone: the manifest records where each block's bytes
//! lie and their CRC-32, so a process reads only the blocks of the tensors it needs (not every
//! file that holds one of them whole), and checks them. The file's own header is read too and
//! must agree with the manifest (key, dtype, shape and place), and the file must have the size
//! the manifest gives; a damaged file is refused naming it, the tensor and the block.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use super::index::{BlockRecord, Index, Stored, TensorRecord};
use crate::error::{NnError, Result};

/// The largest header a reader accepts (the format's own limit).
const MAX_HEADER: u64 = 100_000_000;

/// One entry of a safetensors header.
#[derive(serde::Deserialize)]
struct HeaderEntry {
    dtype: String,
    shape: Vec<i64>,
    data_offsets: (u64, u64),
}

/// The bytes of `block` of tensor `name`, read from where `stored` says and checked.
pub(super) fn read_block(
    folder: &Path,
    index: &Index,
    name: &str,
    tensor: &TensorRecord,
    block: &BlockRecord,
    stored: Stored,
) -> Result<Vec<u8>> {
    let path = folder.join(&block.file);
    let damaged = |problem: String| {
        NnError::Checkpoint(format!(
            "{} (holding tensor `{name}`) {problem}. Fix: restore the file, or delete the folder \
             {} to resume from the checkpoint before it",
            path.display(),
            folder.display()
        ))
    };
    let record = index
        .files
        .get(&block.file)
        .ok_or_else(|| damaged("is not listed in the manifest".into()))?;
    let mut file = File::open(&path).map_err(|e| damaged(format!("cannot be read ({e})")))?;
    let size = file
        .metadata()
        .map_err(|e| damaged(format!("cannot be read ({e})")))?
        .len();
    if size != record.bytes {
        return Err(damaged(format!(
            "is {size} bytes but the manifest says {}: it was cut short or changed",
            record.bytes
        )));
    }
    let (data_start, entries) = header(&mut file, size)
        .map_err(|problem| damaged(format!("is not a safetensors file: {problem}")))?;
    let entry = entries
        .get(&block.key)
        .ok_or_else(|| damaged(format!("lacks `{}`, a block the manifest lists", block.key)))?;
    let (begin, end) = entry.data_offsets;
    if entry.dtype != tensor.dtype || entry.shape != block.shape {
        return Err(damaged(format!(
            "holds block `{}` as {}{:?}, but the manifest says {}{:?}",
            block.key, entry.dtype, entry.shape, tensor.dtype, block.shape
        )));
    }
    // Checked: a damaged header's offsets may lie anywhere up to u64::MAX.
    let place = data_start
        .checked_add(begin)
        .zip(data_start.checked_add(end))
        .filter(|&(offset, stop)| offset == stored.offset && begin <= end && stop <= size);
    let Some((offset, _)) = place else {
        return Err(damaged(format!(
            "places block `{}` at data offsets {begin}..{end} after a header ending at byte \
             {data_start}, but the manifest says it begins at byte {} of a {size}-byte file",
            block.key, stored.offset
        )));
    };
    let mut bytes = vec![0u8; (end - begin) as usize];
    file.seek(SeekFrom::Start(offset))
        .and_then(|_| file.read_exact(&mut bytes))
        .map_err(|e| damaged(format!("cannot be read ({e})")))?;
    let crc = super::index::crc32(&bytes);
    if crc != stored.crc32 {
        return Err(damaged(format!(
            "has CRC-32 {crc:08x} for block `{}` but the manifest says {:08x}: its bytes are \
             damaged",
            block.key, stored.crc32
        )));
    }
    Ok(bytes)
}

/// The file's header: where its data begin, and its entries by key (`__metadata__` left out).
fn header(
    file: &mut File,
    size: u64,
) -> std::result::Result<(u64, HashMap<String, HeaderEntry>), String> {
    let mut length = [0u8; 8];
    file.read_exact(&mut length)
        .map_err(|e| format!("its header's length cannot be read ({e})"))?;
    let n = u64::from_le_bytes(length);
    if n > MAX_HEADER || n > size.saturating_sub(8) {
        return Err(format!("its header claims {n} bytes of a {size}-byte file"));
    }
    let mut text = vec![0u8; n as usize];
    file.read_exact(&mut text)
        .map_err(|e| format!("its header cannot be read ({e})"))?;
    let mut values: HashMap<String, serde_json::Value> =
        serde_json::from_slice(&text).map_err(|e| format!("its header is not JSON ({e})"))?;
    values.remove("__metadata__");
    let entries = values
        .into_iter()
        .map(|(key, value)| {
            serde_json::from_value::<HeaderEntry>(value)
                .map(|entry| (key.clone(), entry))
                .map_err(|e| format!("its header's entry `{key}` is malformed ({e})"))
        })
        .collect::<std::result::Result<_, _>>()?;
    Ok((8 + n, entries))
}
