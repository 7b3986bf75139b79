//! Writing one `safetensors` file straight from the arrays' bytes: the header (made and checked
//! by the `safetensors` crate's own [`Metadata`]) and then each tensor's bytes go to the file as
//! they are, the CRC-32 of the file computed on the way. No copy of the whole file is made in
//! memory (a save of a large model otherwise held a second copy of the state while writing it).
//!
//! On Linux a file of [`DIRECT_FROM`] bytes or more is written with direct I/O (`O_DIRECT`):
//! through an aligned staging buffer straight to the disk, not copied into the page
//! cache by the kernel. That copy was most of a save's processor time (about 1 GB/s on the CI
//! machine, against 13 GB/s for the staging copy), taken from the training step when the save
//! runs in the background. A file system that refuses direct I/O gets the ordinary writes.

use std::borrow::Cow;
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
    pub bytes: Cow<'a, [u8]>,
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

/// What [`write_file`] wrote: the file's size and CRC-32, and each entry's place in it.
#[derive(Debug)]
pub(super) struct Written {
    /// The file's size and CRC-32.
    pub file: FileRecord,
    /// Per entry, in order: the offset of its first byte in the file and its bytes' CRC-32.
    pub entries: Vec<(u64, u32)>,
}

/// Per piece, a CRC-32 of its bytes, updated as they are written.
struct Checksums(Vec<crc32fast::Hasher>);

impl Checksums {
    fn new(pieces: usize) -> Checksums {
        Checksums(vec![crc32fast::Hasher::new(); pieces])
    }

    fn update(&mut self, piece: usize, bytes: &[u8]) {
        if let Some(h) = self.0.get_mut(piece) {
            h.update(bytes);
        }
    }

    /// The file's record and each entry's (the pieces after the two of the header).
    fn written(self, pieces: &[Cow<'_, [u8]>]) -> Written {
        let mut whole = crc32fast::Hasher::new();
        let mut entries = Vec::with_capacity(pieces.len().saturating_sub(2));
        let mut offset = 0_u64;
        for (i, (hasher, piece)) in self.0.into_iter().zip(pieces).enumerate() {
            whole.combine(&hasher);
            if i >= 2 {
                entries.push((offset, hasher.finalize()));
            }
            offset += piece.len() as u64;
        }
        Written {
            file: FileRecord {
                bytes: offset,
                crc32: whole.finalize(),
            },
            entries,
        }
    }
}

/// Files from this size on are written with direct I/O where the system allows it.
pub const DIRECT_FROM: u64 = 1 << 20;

/// Writes `entries` as one `safetensors` file at `path`, synced, and returns where each entry
/// lies in it and the file's and every entry's CRC-32.
pub(super) fn write_file(path: &Path, entries: &[Entry<'_>]) -> Result<Written> {
    let header = header(entries)?;
    let pieces = pieces(&header, entries);
    let total: u64 = pieces.iter().map(|p| p.len() as u64).sum();
    #[cfg(target_os = "linux")]
    if total >= DIRECT_FROM {
        match direct::write(path, &pieces, total) {
            Ok(sums) => return Ok(sums.written(&pieces)),
            // Refused by the file system (tmpfs, some network file systems): written as below.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(io_error(path, "cannot write", e)),
        }
    }
    let sums = write_buffered(&pieces, path).map_err(|e| io_error(path, "cannot write", e))?;
    Ok(sums.written(&pieces))
}

/// The file's bytes in order: the header's length, the header, each tensor's bytes.
fn pieces<'a>(header: &'a [u8], entries: &'a [Entry<'_>]) -> Vec<Cow<'a, [u8]>> {
    let length = (header.len() as u64).to_le_bytes().to_vec();
    let mut pieces = vec![length.into(), header.into()];
    pieces.extend(entries.iter().map(|e| Cow::Borrowed(&*e.bytes)));
    pieces
}

/// Writes `pieces` to `path` through the page cache, synced.
fn write_buffered(pieces: &[Cow<'_, [u8]>], path: &Path) -> std::io::Result<Checksums> {
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut sums = Checksums::new(pieces.len());
    for (i, piece) in pieces.iter().enumerate() {
        sums.update(i, piece);
        out.write_all(piece)?;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(sums)
}

/// Direct I/O on Linux: aligned writes of a staging buffer that bypass the page cache.
#[cfg(target_os = "linux")]
mod direct {
    use std::borrow::Cow;
    use std::fs::OpenOptions;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::Path;

    use super::Checksums;

    /// Buffers, file offsets and lengths of direct I/O are multiples of this.
    const ALIGN: usize = 4096;
    /// The staging buffer's size.
    const CHUNK: usize = 8 << 20;

    /// Writes `pieces` (`total` bytes) to `path` with `O_DIRECT`, synced. An `EINVAL` error
    /// means the file system does not take direct I/O (the caller writes it otherwise).
    pub(super) fn write(
        path: &Path,
        pieces: &[Cow<'_, [u8]>],
        total: u64,
    ) -> std::io::Result<Checksums> {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)?;
        let mut staging = vec![0u8; CHUNK + ALIGN];
        let start = staging.as_ptr().align_offset(ALIGN).min(ALIGN);
        let chunk = &mut staging[start..start + CHUNK];
        let mut sums = Checksums::new(pieces.len());
        let mut filled = 0;
        for (i, piece) in pieces.iter().enumerate() {
            let mut rest: &[u8] = piece;
            while !rest.is_empty() {
                let n = rest.len().min(CHUNK - filled);
                sums.update(i, &rest[..n]);
                chunk[filled..filled + n].copy_from_slice(&rest[..n]);
                (filled, rest) = (filled + n, &rest[n..]);
                if filled == CHUNK {
                    file.write_all(chunk)?;
                    filled = 0;
                }
            }
        }
        // The last chunk goes out padded to the alignment, then the file is cut to its size.
        let padded = filled.next_multiple_of(ALIGN);
        chunk[filled..padded].fill(0);
        file.write_all(&chunk[..padded])?;
        file.set_len(total)?;
        file.sync_all()?;
        Ok(sums)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;

    /// Files below, at and across the direct-I/O chunk sizes read back as `safetensors` with
    /// every byte in place, and their records give the file's size and CRC-32.
    #[test]
    fn files_of_any_size_read_back_whole_with_their_checksum() {
        let dir = std::env::temp_dir().join(format!("tessera-stream-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for elements in [3_usize, 262_147, 4_194_309] {
            let values: Vec<u8> = (0..elements * 4).map(|i| (i * 7 % 251) as u8).collect();
            let small = [1u8, 2, 3, 4, 5, 6, 7, 8];
            let entries = [
                Entry {
                    key: "a".into(),
                    dtype: safetensors::Dtype::F32,
                    shape: vec![elements],
                    bytes: values.as_slice().into(),
                },
                Entry {
                    key: "b@1,0".into(),
                    dtype: safetensors::Dtype::I32,
                    shape: vec![2, 1],
                    bytes: small.as_slice().into(),
                },
            ];
            let path = dir.join(format!("{elements}.safetensors"));
            let written = write_file(&path, &entries).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(written.file.bytes, bytes.len() as u64);
            assert_eq!(written.file.crc32, crc32fast::hash(&bytes));
            for ((offset, crc), entry) in written.entries.iter().zip(&entries) {
                let at = *offset as usize;
                let stored = &bytes[at..at + entry.bytes.len()];
                assert_eq!(stored, &*entry.bytes);
                assert_eq!(*crc, crc32fast::hash(stored));
            }
            let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
            assert_eq!(file.tensor("a").unwrap().data(), values.as_slice());
            assert_eq!(file.tensor("b@1,0").unwrap().data(), small.as_slice());
            assert_eq!(file.tensor("b@1,0").unwrap().shape(), [2, 1]);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bytes_that_do_not_fit_the_shape_are_refused() {
        let entries = [Entry {
            key: "a".into(),
            dtype: safetensors::Dtype::F32,
            shape: vec![3],
            bytes: [0u8; 8].as_slice().into(),
        }];
        let err = write_file(Path::new("/nonexistent/x"), &entries).unwrap_err();
        assert!(err.to_string().contains("tensor `a`: 8 bytes"), "{err}");
    }
}
