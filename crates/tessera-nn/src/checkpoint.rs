//! Checkpoints: parameters and optimizer state in `safetensors` files, plus a JSON manifest
//! (step, seed, data position, model, the run's losses, and the index of every tensor: its dtype,
//! global shape, and the file and slice of each block it is stored as, with each file's size and
//! CRC-32). Each checkpoint is a folder `step-NNNNNNNN` of a checkpoint directory.
//!
//! One process holding whole tensors calls [`save`]: `params.safetensors` and
//! `optimizer.safetensors` hold each tensor under its tree path. Processes that each hold part of
//! the state (the ranks of an MPI job, or the devices of sharded stages) write their blocks with
//! [`write_part`] and one of them commits with [`commit`] (see [`writer`]'s protocol); [`load`]
//! assembles every tensor from its blocks, whatever layout wrote them.
//!
//! A checkpoint is written to a hidden temporary folder, every file synced, then the folder is
//! renamed into place and the directory synced: a crash mid-write leaves the previous checkpoints
//! as they were and a temporary folder that [`latest`] ignores and the next save removes.

mod index;
mod lock;
mod ranged;
mod reader;
mod stream;
pub mod writer;

pub use index::{BlockRecord, FileRecord, Index, Stored, TensorRecord};
pub use lock::DirLock;
pub use writer::{Part, Piece, commit, partial_folder, prepare, write_part};

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use safetensors::tensor::Dtype;
use tessera_ir::{Array, DType, ShapedArray};

use crate::error::{NnError, Result};
use crate::tree::Tree;

/// What a checkpoint records besides its tensors.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    /// The number of steps taken before it was written.
    pub step: u64,
    /// The run's seed.
    pub seed: u64,
    /// Where the data loader stands (e.g. the next window's offset).
    pub data_position: u64,
    /// A description of the model (its configuration), checked on resume.
    pub model: String,
    /// The run's losses up to this step, across resumes (empty in manifests written before
    /// histories were kept).
    #[serde(default)]
    pub history: History,
}

/// A run's losses so far: `(step, loss)` of each training step and each evaluation.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct History {
    /// Each training step's loss.
    pub losses: Vec<(u64, f64)>,
    /// Each evaluation's loss.
    pub eval_losses: Vec<(u64, f64)>,
}

/// A loaded checkpoint.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// Its manifest.
    pub manifest: Manifest,
    /// The parameters.
    pub params: Tree<Array>,
    /// The optimizer state.
    pub opt_state: Tree<Array>,
}

const PARAMS_FILE: &str = "params.safetensors";
const STATE_FILE: &str = "optimizer.safetensors";
const MANIFEST_FILE: &str = "manifest.json";

fn io_error(path: &Path, what: &str, err: std::io::Error) -> NnError {
    NnError::Checkpoint(format!("{what} {}: {err}", path.display()))
}

/// Writes a checkpoint of whole tensors into `dir` (created if missing) and returns its folder.
pub fn save(
    dir: &Path,
    manifest: &Manifest,
    params: &Tree<Array>,
    opt_state: &Tree<Array>,
) -> Result<PathBuf> {
    prepare(dir)?;
    let pieces: Vec<Piece> = [(Part::Params, params), (Part::Optimizer, opt_state)]
        .into_iter()
        .flat_map(|(part, tree)| {
            tree.paths()
                .into_iter()
                .zip(tree.leaves())
                .map(move |(path, a)| Piece::whole(part, path, a.clone()))
        })
        .collect();
    let index = write_part(dir, manifest.step, 0, 1, &pieces)?;
    commit(dir, manifest, index)
}

/// The newest complete checkpoint folder in `dir`, if any.
pub fn latest(dir: &Path) -> Result<Option<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(dir, "cannot read", e)),
    };
    let newest = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let step: u64 = name.strip_prefix("step-")?.parse().ok()?;
            entry
                .path()
                .join(MANIFEST_FILE)
                .is_file()
                .then(|| (step, entry.path()))
        })
        .max_by_key(|(step, _)| *step);
    Ok(newest.map(|(_, path)| path))
}

/// Loads the checkpoint in `folder`, checking its tensors against the expected trees: a missing
/// or extra tensor, or one of another shape or dtype, is an error naming it; so is a data file
/// that is missing, cut short or damaged (its size and CRC-32 are in the manifest).
pub fn load(
    folder: &Path,
    params: &Tree<ShapedArray>,
    opt_state: &Tree<ShapedArray>,
) -> Result<Checkpoint> {
    let partial = load_where(folder, params, opt_state, &|_, _| true)?;
    let whole = |tree: Tree<Option<Array>>| {
        tree.try_map(&mut |path, a: &Option<Array>| {
            a.clone()
                .ok_or_else(|| NnError::Checkpoint(format!("tensor `{path}` was not read")))
        })
    };
    Ok(Checkpoint {
        manifest: partial.manifest,
        params: whole(partial.params)?,
        opt_state: whole(partial.opt_state)?,
    })
}

/// A checkpoint of which only some tensors were read ([`load_where`]).
#[derive(Debug, Clone)]
pub struct PartialCheckpoint {
    /// Its manifest.
    pub manifest: Manifest,
    /// The parameters (`None` where not asked for).
    pub params: Tree<Option<Array>>,
    /// The optimizer state (`None` where not asked for).
    pub opt_state: Tree<Option<Array>>,
}

/// [`load`], reading only the tensors `wanted(part, path)` names: a process that holds part of
/// a model reads only its part (a checkpoint written before indexes were kept is read whole).
/// Every tensor's name, shape and dtype is still checked against the trees.
pub fn load_where(
    folder: &Path,
    params: &Tree<ShapedArray>,
    opt_state: &Tree<ShapedArray>,
    wanted: &dyn Fn(Part, &str) -> bool,
) -> Result<PartialCheckpoint> {
    let manifest = read_manifest(folder)?;
    let index = read_index(folder)?;
    if index.is_empty() {
        let some = |tree: Tree<Array>| tree.map(&mut |_, a| Some(a.clone()));
        return Ok(PartialCheckpoint {
            manifest,
            params: some(reader::decode_whole(&folder.join(PARAMS_FILE), params)?),
            opt_state: some(reader::decode_whole(&folder.join(STATE_FILE), opt_state)?),
        });
    }
    index.check()?;
    let mut files = reader::Files::new(folder, &index);
    Ok(PartialCheckpoint {
        manifest,
        params: reader::assemble(&mut files, Part::Params, params, wanted)?,
        opt_state: reader::assemble(&mut files, Part::Optimizer, opt_state, wanted)?,
    })
}

/// The parameters alone of the checkpoint in `folder`, checked against `params` as [`load`]
/// checks them; its optimizer state is not read (nor need its types be known).
pub fn load_params(folder: &Path, params: &Tree<ShapedArray>) -> Result<(Manifest, Tree<Array>)> {
    let manifest = read_manifest(folder)?;
    let index = read_index(folder)?;
    if index.is_empty() {
        return Ok((
            manifest,
            reader::decode_whole(&folder.join(PARAMS_FILE), params)?,
        ));
    }
    index.check()?;
    let mut files = reader::Files::new(folder, &index);
    let read = reader::assemble(&mut files, Part::Params, params, &|_, _| true)?;
    let whole = read.try_map(&mut |path, a: &Option<Array>| {
        a.clone()
            .ok_or_else(|| NnError::Checkpoint(format!("tensor `{path}` was not read")))
    })?;
    Ok((manifest, whole))
}

/// The index of the checkpoint in `folder`: where each tensor's blocks are (empty for a
/// checkpoint written before indexes were kept).
pub fn read_index(folder: &Path) -> Result<Index> {
    let path = folder.join(MANIFEST_FILE);
    let text = fs::read(&path).map_err(|e| io_error(&path, "cannot read", e))?;
    let on_disk: writer::OnDisk = serde_json::from_slice(&text).map_err(|e| {
        NnError::Checkpoint(format!(
            "{} is not a checkpoint manifest ({e}). Fix: restore it, or delete the folder to \
             resume from the checkpoint before it",
            path.display()
        ))
    })?;
    Ok(on_disk.index)
}

/// Reads the manifest of the checkpoint `folder` (`step-NNNNNNNN`), naming the file in every
/// error: a missing, unreadable or malformed manifest, or one whose step is not the folder's
/// (a resumed run would repeat or skip steps).
pub fn read_manifest(folder: &Path) -> Result<Manifest> {
    let path = folder.join(MANIFEST_FILE);
    let text = fs::read(&path).map_err(|e| io_error(&path, "cannot read", e))?;
    let manifest: Manifest = serde_json::from_slice(&text).map_err(|e| {
        NnError::Checkpoint(format!(
            "{} is not a checkpoint manifest ({e}); it holds `step`, `seed`, `data_position` \
             (numbers from 0) and `model`. Fix: restore it, or delete the folder to resume from \
             the checkpoint before it",
            path.display()
        ))
    })?;
    let folder_step = folder
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("step-"))
        .and_then(|n| n.parse::<u64>().ok());
    if let Some(step) = folder_step.filter(|&s| s != manifest.step) {
        return Err(NnError::Checkpoint(format!(
            "{} says step {} but its folder is step {step}; the checkpoint was damaged or moved. \
             Fix: delete the folder to resume from the checkpoint before it",
            path.display(),
            manifest.step
        )));
    }
    Ok(manifest)
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = File::create(path).map_err(|e| io_error(path, "cannot create", e))?;
    file.write_all(bytes)
        .map_err(|e| io_error(path, "cannot write", e))?;
    file.sync_all()
        .map_err(|e| io_error(path, "cannot sync", e))
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, "cannot sync", e))
}

fn unsupported(dtype: DType) -> NnError {
    NnError::Checkpoint(format!(
        "{dtype:?} tensors cannot be checkpointed yet (supported: f32, f64, bf16, f16, i32, i64)"
    ))
}

/// The safetensors dtype of a Tessera dtype, where checkpoints support it.
fn st_dtype(dtype: DType) -> Result<Dtype> {
    Ok(match dtype {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::BF16 => Dtype::BF16,
        DType::F16 => Dtype::F16,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        other => return Err(unsupported(other)),
    })
}

/// The array of `dtype` and `shape` whose little-endian bytes are `bytes` (exact for every
/// dtype: the bytes are the array's own).
fn array_from_bytes(dtype: DType, shape: &[i64], bytes: &[u8]) -> Result<Array> {
    Ok(Array::from_le_bytes(dtype, shape, bytes.to_vec())?)
}
