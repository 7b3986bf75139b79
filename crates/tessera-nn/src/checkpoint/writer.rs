//! Writing a checkpoint in parts: each writer (a process of a job, or the one process of a run)
//! writes the blocks it holds into the step's temporary folder, and one writer then commits the
//! checkpoint (its manifest, listing every writer's blocks and files, and the rename into place).
//!
//! The protocol of a job of several processes:
//! 1. writer 0 calls [`prepare`] (removes torn checkpoints of earlier runs), then every writer
//!    waits for it (a barrier);
//! 2. every writer calls [`write_part`] with the blocks it holds, each block of each tensor held
//!    by exactly one writer, and sends the [`Index`] it returns to writer 0;
//! 3. writer 0 joins the parts ([`Index::merge`]) and calls [`commit`].
//!
//! Until the commit's rename, the checkpoint is a hidden folder that [`super::latest`] ignores:
//! a writer that dies at any moment leaves the previous checkpoint complete, and the next
//! [`prepare`] removes the torn one.

use std::fs;
use std::path::{Path, PathBuf};

use tessera_ir::Array;

use super::index::{BlockRecord, Index, TensorRecord};
use super::{Manifest, io_error, st_dtype, stream, sync_dir, write_synced};
use crate::error::{NnError, Result};

/// Which tree of the checkpoint a block belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// The parameters (`params.*.safetensors`).
    Params,
    /// The optimizer state (`optimizer.*.safetensors`).
    Optimizer,
}

impl Part {
    /// Its name: the prefix of its tensors' names in the index, and of its files.
    pub fn name(self) -> &'static str {
        match self {
            Part::Params => "params",
            Part::Optimizer => "optimizer",
        }
    }
}

/// A block of one tensor that a writer holds, with its values.
#[derive(Debug, Clone)]
pub struct Piece {
    /// The tree the tensor belongs to.
    pub part: Part,
    /// The tensor's path in its tree (e.g. `blocks.0.attn.wq`).
    pub path: String,
    /// The tensor's global shape.
    pub global_shape: Vec<i64>,
    /// Where the block starts in each dimension (zeros for a whole tensor).
    pub start: Vec<i64>,
    /// The block's values; its shape is the block's.
    pub data: Array,
}

impl Piece {
    /// A whole tensor as one block.
    pub fn whole(part: Part, path: impl Into<String>, data: Array) -> Piece {
        Piece {
            part,
            path: path.into(),
            global_shape: data.shape().to_vec(),
            start: vec![0; data.shape().len()],
            data,
        }
    }

    fn is_whole(&self) -> bool {
        self.data.shape() == self.global_shape.as_slice()
    }

    /// Its key in its file: the path, with the block's start where it is not the whole tensor.
    fn key(&self) -> String {
        match self.is_whole() {
            true => self.path.clone(),
            false => {
                let start: Vec<String> = self.start.iter().map(i64::to_string).collect();
                format!("{}@{}", self.path, start.join(","))
            }
        }
    }
}

/// The hidden folder a checkpoint of `step` is written into before its commit.
pub fn partial_folder(dir: &Path, step: u64) -> PathBuf {
    dir.join(format!(".step-{step:08}.partial"))
}

/// Makes `dir` (if missing) and removes the torn checkpoints an ended run left in it. Called by
/// one writer before any writer writes.
pub fn prepare(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| {
        io_error(
            dir,
            "cannot create the checkpoint directory (is it writable?)",
            e,
        )
    })?;
    let entries = fs::read_dir(dir).map_err(|e| io_error(dir, "cannot read", e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(".step-") && name.contains(".partial") {
            fs::remove_dir_all(entry.path())
                .map_err(|e| io_error(&entry.path(), "cannot remove the torn checkpoint", e))?;
        }
    }
    Ok(())
}

/// The name of writer `writer`'s file of `part`, of `writers` writers.
fn file_name(part: Part, writer: usize, writers: usize) -> String {
    match writers {
        1 => format!("{}.safetensors", part.name()),
        _ => format!(
            "{}.rank-{writer:05}-of-{writers:05}.safetensors",
            part.name()
        ),
    }
}

/// Writes writer `writer`'s blocks (of `writers`) of the checkpoint of `step` into its temporary
/// folder, each file synced, and returns the index of what it wrote.
pub fn write_part(
    dir: &Path,
    step: u64,
    writer: usize,
    writers: usize,
    pieces: &[Piece],
) -> Result<Index> {
    let partial = partial_folder(dir, step);
    fs::create_dir_all(&partial).map_err(|e| io_error(&partial, "cannot create", e))?;
    let mut index = Index::default();
    for part in [Part::Params, Part::Optimizer] {
        let mine: Vec<&Piece> = pieces.iter().filter(|p| p.part == part).collect();
        let file = file_name(part, writer, writers);
        // The single writer always writes both files (a tree may be empty).
        if mine.is_empty() && writers > 1 {
            continue;
        }
        let written = stream::write_file(&partial.join(&file), &entries(&mine)?)?;
        index.files.insert(file.clone(), written.file);
        for (piece, &(offset, crc32)) in mine.into_iter().zip(&written.entries) {
            let block = BlockRecord {
                file: file.clone(),
                key: piece.key(),
                start: piece.start.clone(),
                shape: piece.data.shape().to_vec(),
                stored: Some(super::index::Stored { offset, crc32 }),
            };
            let name = format!("{}/{}", part.name(), piece.path);
            let dtype = st_dtype(piece.data.dtype())?;
            let record = index.tensors.entry(name).or_insert_with(|| TensorRecord {
                dtype: format!("{dtype:?}"),
                shape: piece.global_shape.clone(),
                blocks: Vec::new(),
            });
            record.blocks.push(block);
        }
    }
    Ok(index)
}

/// The file entries of `pieces`, their bytes borrowed from the arrays.
fn entries<'a>(pieces: &[&'a Piece]) -> Result<Vec<stream::Entry<'a>>> {
    pieces
        .iter()
        .map(|p| {
            Ok(stream::Entry {
                key: p.key(),
                dtype: st_dtype(p.data.dtype())?,
                shape: p.data.shape().iter().map(|&d| d as usize).collect(),
                bytes: p.data.to_le_bytes(),
            })
        })
        .collect()
}

/// The manifest as it is stored: the run's facts and the index of its tensors.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct OnDisk {
    #[serde(flatten)]
    pub manifest: Manifest,
    #[serde(flatten)]
    pub index: Index,
}

/// Commits the checkpoint of `manifest.step` whose parts (joined in `index`) are in its
/// temporary folder: checks that the blocks cover every tensor once, removes files no part
/// lists (left by a torn save), writes the manifest, and renames the folder into place.
/// Returns the checkpoint's folder.
pub fn commit(dir: &Path, manifest: &Manifest, index: Index) -> Result<PathBuf> {
    index.check()?;
    let partial = partial_folder(dir, manifest.step);
    let entries = fs::read_dir(&partial).map_err(|e| io_error(&partial, "cannot read", e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !index.files.contains_key(&name) {
            fs::remove_file(entry.path())
                .map_err(|e| io_error(&entry.path(), "cannot remove the stale file", e))?;
        }
    }
    for (name, record) in &index.files {
        let path = partial.join(name);
        let size = fs::metadata(&path)
            .map_err(|e| io_error(&path, "a writer's file is missing:", e))?
            .len();
        if size != record.bytes {
            return Err(NnError::Checkpoint(format!(
                "{} holds {size} bytes but its writer wrote {}; was it written twice?",
                path.display(),
                record.bytes
            )));
        }
    }
    let on_disk = OnDisk {
        manifest: manifest.clone(),
        index,
    };
    let text = serde_json::to_vec_pretty(&on_disk)
        .map_err(|e| NnError::Checkpoint(format!("cannot encode the manifest: {e}")))?;
    write_synced(&partial.join(super::MANIFEST_FILE), &text)?;
    sync_dir(&partial)?;
    let target = dir.join(format!("step-{:08}", manifest.step));
    if target.exists() {
        fs::remove_dir_all(&target).map_err(|e| io_error(&target, "cannot replace", e))?;
    }
    fs::rename(&partial, &target).map_err(|e| io_error(&target, "cannot rename into", e))?;
    sync_dir(dir)?;
    Ok(target)
}
