//! Writing one `safetensors` file straight from the arrays' bytes: the header (made and checked
//! by the `safetensors` crate's own [`Metadata`]) and then each tensor's bytes go to the file as
//! they are, the CRC-32 of the file computed on the way. No copy of the whole file is made in
//! memory (a save of a large model otherwise held a second copy of the state while writing it).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use safetensors::tensor::{Metadata, TensorInfo};

use super::index::FileRecord;
use super::io_error;
use crate::error::{NnError, Result};

/// One tensor of a file: its key, dtype, shape and little-endian bytes.
pub(super) struct Entry<'a> {
    pub key: String,
    pub dtype: safetensors::Dtype,
    pub shape: Vec<usize>,
    pub bytes: std::borrow::Cow<'a, [u8]>,
}

/// The header's length is padded with spaces to a multiple of this (the format's alignment).
const HEADER_ALIGN: usize = 8;

/// The file's header: the JSON of every entry's dtype, shape and byte range, in entry order.
fn header(entries: &[Entry<'_>]) -> Result<Vec<u8>> {
    let mut offset = 0;
    let mut infos = Vec::with_capacity(entries.len());
    for entry in entries {
        let expected = entry.shape.iter().product::<usize>() * entry.dtype.bitsize() / 8;
        if expected != entry.bytes.len() {
            return Err(NnError::Checkpoint(format!(
                "tensor `{}`: {} bytes for shape {:?} of {:?} ({expected} expected)",
                entry.key,
                entry.bytes.len(),
                entry.shape,
                entry.dtype
            )));
        }
        let end = offset + entry.bytes.len();
        let info = TensorInfo {
            dtype: entry.dtype,
            shape: entry.shape.clone(),
            data_offsets: (offset, end),
        };
        infos.push((entry.key.clone(), info));
        offset = end;
    }
    let metadata = Metadata::new(None, infos)
        .map_err(|e| NnError::Checkpoint(format!("cannot make the file's header: {e}")))?;
    let mut text = serde_json::to_vec(&metadata)
        .map_err(|e| NnError::Checkpoint(format!("cannot encode the file's header: {e}")))?;
    text.resize(text.len().next_multiple_of(HEADER_ALIGN), b' ');
    Ok(text)
}

/// A writer that counts and checksums what passes through it.
struct Checksummed<W> {
    inner: W,
    crc: crc32fast::Hasher,
    bytes: u64,
}

impl<W: Write> Write for Checksummed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        let written = buf.get(..n).unwrap_or(buf);
        self.crc.update(written);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes `entries` as one `safetensors` file at `path`, synced, and returns its size and CRC-32.
pub(super) fn write_file(path: &Path, entries: &[Entry<'_>]) -> Result<FileRecord> {
    let header = header(entries)?;
    let file = File::create(path).map_err(|e| io_error(path, "cannot create", e))?;
    let mut out = Checksummed {
        inner: BufWriter::with_capacity(1 << 20, file),
        crc: crc32fast::Hasher::new(),
        bytes: 0,
    };
    let write = |out: &mut Checksummed<BufWriter<File>>| -> std::io::Result<()> {
        out.write_all(&(header.len() as u64).to_le_bytes())?;
        out.write_all(&header)?;
        for entry in entries {
            out.write_all(&entry.bytes)?;
        }
        out.flush()
    };
    write(&mut out).map_err(|e| io_error(path, "cannot write", e))?;
    let record = FileRecord {
        bytes: out.bytes,
        crc32: out.crc.clone().finalize(),
    };
    let file = out
        .inner
        .into_inner()
        .map_err(|e| io_error(path, "cannot write", e.into_error()))?;
    file.sync_all()
        .map_err(|e| io_error(path, "cannot sync", e))?;
    Ok(record)
}
