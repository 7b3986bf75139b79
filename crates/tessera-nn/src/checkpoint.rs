//! Checkpoints: parameters and optimizer state in `safetensors` files, named by their tree paths,
//! plus a small JSON manifest (step, seed, data position, model). Each checkpoint is a folder
//! `step-NNNNNNNN` of a checkpoint directory.
//!
//! A checkpoint is written to a hidden temporary folder, every file synced, then the folder is
//! renamed into place and the directory synced: a crash mid-write leaves the previous checkpoints
//! as they were and a temporary folder that [`latest`] ignores and the next [`save`] removes.

mod lock;

pub use lock::DirLock;

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, SafeTensors, TensorView};
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

/// Writes a checkpoint into `dir` (created if missing) and returns its folder.
pub fn save(
    dir: &Path,
    manifest: &Manifest,
    params: &Tree<Array>,
    opt_state: &Tree<Array>,
) -> Result<PathBuf> {
    fs::create_dir_all(dir).map_err(|e| {
        io_error(
            dir,
            "cannot create the checkpoint directory (is it writable?)",
            e,
        )
    })?;
    remove_partials(dir)?;
    let name = format!("step-{:08}", manifest.step);
    let partial = dir.join(format!(".{name}.partial-{}", std::process::id()));
    fs::create_dir(&partial).map_err(|e| io_error(&partial, "cannot create", e))?;
    write_synced(&partial.join(PARAMS_FILE), &encode(params)?)?;
    write_synced(&partial.join(STATE_FILE), &encode(opt_state)?)?;
    let text = serde_json::to_vec_pretty(manifest)
        .map_err(|e| NnError::Checkpoint(format!("cannot encode the manifest: {e}")))?;
    write_synced(&partial.join(MANIFEST_FILE), &text)?;
    sync_dir(&partial)?;
    let target = dir.join(&name);
    if target.exists() {
        fs::remove_dir_all(&target).map_err(|e| io_error(&target, "cannot replace", e))?;
    }
    fs::rename(&partial, &target).map_err(|e| io_error(&target, "cannot rename into", e))?;
    sync_dir(dir)?;
    Ok(target)
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
/// or extra tensor, or one of another shape or dtype, is an error naming it.
pub fn load(
    folder: &Path,
    params: &Tree<ShapedArray>,
    opt_state: &Tree<ShapedArray>,
) -> Result<Checkpoint> {
    let manifest = read_manifest(folder)?;
    Ok(Checkpoint {
        manifest,
        params: decode(&folder.join(PARAMS_FILE), params)?,
        opt_state: decode(&folder.join(STATE_FILE), opt_state)?,
    })
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

fn remove_partials(dir: &Path) -> Result<()> {
    let entries = fs::read_dir(dir).map_err(|e| io_error(dir, "cannot read", e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(".step-") && name.contains(".partial-") {
            fs::remove_dir_all(entry.path())
                .map_err(|e| io_error(&entry.path(), "cannot remove the torn checkpoint", e))?;
        }
    }
    Ok(())
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

/// The array's bytes as safetensors stores them (each element little-endian), for the dtypes
/// checkpoints support.
fn to_bytes(array: &Array) -> Result<Vec<u8>> {
    st_dtype(array.dtype())?;
    Ok(array.to_le_bytes().into_owned())
}

/// The array of `dtype` and `shape` whose little-endian bytes are `bytes` (exact for every
/// dtype: the bytes are the array's own).
fn array_from_bytes(dtype: DType, shape: &[i64], bytes: &[u8]) -> Result<Array> {
    Ok(Array::from_le_bytes(dtype, shape, bytes.to_vec())?)
}

fn encode(tree: &Tree<Array>) -> Result<Vec<u8>> {
    let buffers: Vec<(String, DType, Vec<usize>, Vec<u8>)> = tree
        .paths()
        .into_iter()
        .zip(tree.leaves())
        .map(|(path, a)| {
            let shape = a.shape().iter().map(|&d| d as usize).collect();
            Ok((path, a.aval().dtype, shape, to_bytes(a)?))
        })
        .collect::<Result<_>>()?;
    let views = buffers
        .iter()
        .map(|(path, dtype, shape, bytes)| {
            let view = TensorView::new(st_dtype(*dtype)?, shape.clone(), bytes)
                .map_err(|e| NnError::Checkpoint(format!("tensor `{path}`: {e}")))?;
            Ok((path.clone(), view))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize(views, None)
        .map_err(|e| NnError::Checkpoint(format!("cannot encode the tensors: {e}")))
}

fn decode(path: &Path, expected: &Tree<ShapedArray>) -> Result<Tree<Array>> {
    let bytes = fs::read(path).map_err(|e| io_error(path, "cannot read", e))?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| {
        NnError::Checkpoint(format!("{} is not a safetensors file: {e}", path.display()))
    })?;
    let wanted = expected.paths();
    if let Some(extra) = file
        .names()
        .into_iter()
        .find(|n| !wanted.iter().any(|w| w == n))
    {
        return Err(NnError::CheckpointMismatch {
            file: path.to_path_buf(),
            tensor: extra.to_owned(),
            problem: "is in the checkpoint but not in this model".into(),
        });
    }
    expected.try_map(&mut |name, aval| {
        let mismatch = |problem: String| NnError::CheckpointMismatch {
            file: path.to_path_buf(),
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
