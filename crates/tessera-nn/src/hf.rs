//! Hugging Face model folders in and out: a Llama-family folder (`config.json`, safetensors
//! weights single or sharded, `tokenizer.json`) read into a [`DecoderConfig`](crate::DecoderConfig) and its
//! parameters, and a decoder's parameters written back as a folder `transformers` loads.
//!
//! - [`HfConfig`]: `config.json` (`llama`, `mistral`, `qwen2`; both spellings of the rope
//!   settings) to and from a decoder configuration.
//! - [`hf_tensors`]: the one table from Hugging Face's tensor names to Tessera's parameter
//!   paths, with the transposes and the fusion of q/k/v it implies.
//! - [`HfModel::load_params`]: the parameters a caller asks for, each tensor read alone from its
//!   file (so each pipeline stage reads only its share), float32/bfloat16/float16 on disk.
//! - [`export`]: `config.json`, `model.safetensors` (sharded above a size, with the index) and
//!   `tokenizer.json`.
//! - [`HfTokenizer`]: `tokenizer.json` through Hugging Face's `tokenizers` library.

mod config;
mod files;
mod names;
mod tokenizer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tessera_ir::{Array, DType};

pub use config::{HfConfig, SUPPORTED};
pub use files::{WeightFiles, write_weights};
pub use names::{HfTensor, Layout, Part, hf_tensors};
pub use tokenizer::HfTokenizer;

use crate::error::{NnError, Result};
use crate::tree::Tree;

/// Shards of an export are at most this large (as `transformers`' default `max_shard_size`).
pub const DEFAULT_MAX_SHARD_BYTES: u64 = 5_000_000_000;

/// A Hugging Face model folder, its config read.
#[derive(Debug, Clone)]
pub struct HfModel {
    /// The folder.
    pub dir: PathBuf,
    /// Its `config.json`.
    pub config: HfConfig,
}

/// Parameters read from a folder, by Tessera path, and what reading them cost.
#[derive(Debug, Default)]
pub struct LoadedParams {
    /// The parameters asked for (float32), by path.
    pub params: BTreeMap<String, Array>,
    /// Bytes of tensor data read from the weight files.
    pub bytes_read: u64,
}

impl HfModel {
    /// Opens `dir` for sequences of `seq_len` tokens (reads `config.json` alone).
    pub fn open(dir: &Path, seq_len: i64) -> Result<Self> {
        Ok(HfModel {
            dir: dir.to_path_buf(),
            config: HfConfig::read(dir, seq_len)?,
        })
    }

    /// The folder's `tokenizer.json`, refused if it has more ids than the model.
    pub fn tokenizer(&self) -> Result<HfTokenizer> {
        let tok = HfTokenizer::from_file(&self.dir.join("tokenizer.json"))?;
        tok.check_fits(self.config.decoder.vocab)?;
        Ok(tok)
    }

    /// The ids that end generation: `generation_config.json`'s `eos_token_id` where it has
    /// one, else `config.json`'s.
    pub fn eos_token_ids(&self) -> Vec<i64> {
        let path = self.dir.join("generation_config.json");
        let from_generation = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Map<String, Value>>(&t).ok())
            .filter(|g| {
                g.get("eos_token_id")
                    .is_some_and(|v| v.is_number() || v.is_array())
            })
            .map(|g| config::ids(&g, "eos_token_id"));
        from_generation.unwrap_or_else(|| self.config.eos_token_ids.clone())
    }

    /// The parameters whose Tessera paths `wanted` accepts, each Hugging Face tensor read alone
    /// (the others are not read at all).
    pub fn load_params(&self, wanted: &dyn Fn(&str) -> bool) -> Result<LoadedParams> {
        let decoder = &self.config.decoder;
        let mut files = WeightFiles::open(&self.dir)?;
        let shapes = decoder.spec().map(&mut |_, p| p.shape.clone());
        let tensors = hf_tensors(decoder);
        let mut out = LoadedParams::default();
        for path in shapes.paths() {
            if !wanted(&path) {
                continue;
            }
            let shape = shapes.leaf(&path)?.clone();
            let sources: Vec<&HfTensor> = tensors.iter().filter(|t| t.path == path).collect();
            let values = read_param(&mut files, decoder, &sources, &shape)?;
            out.params
                .insert(path, Array::from_slice::<f32>(&shape, &values)?);
        }
        out.bytes_read = files.bytes_read;
        Ok(out)
    }

    /// Every parameter, as a tree in [`DecoderConfig::spec`](crate::DecoderConfig::spec)'s structure.
    pub fn load_all(&self) -> Result<Tree<Array>> {
        let mut loaded = self.load_params(&|_| true)?.params;
        let spec = self.config.decoder.spec();
        let leaves = spec
            .paths()
            .iter()
            .map(|p| {
                loaded
                    .remove(p)
                    .ok_or_else(|| NnError::Config(format!("parameter `{p}` was not read")))
            })
            .collect::<Result<Vec<_>>>()?;
        spec.unflatten(leaves)
    }
}

/// One Tessera parameter from its Hugging Face tensors.
fn read_param(
    files: &mut WeightFiles,
    decoder: &crate::DecoderConfig,
    sources: &[&HfTensor],
    shape: &[i64],
) -> Result<Vec<f32>> {
    match sources {
        [one] if one.layout == Layout::Same => files.read_f32(&one.name, &one.shape),
        [one] if one.layout == Layout::Transpose => {
            let values = files.read_f32(&one.name, &one.shape)?;
            Ok(names::transpose(&values, one.shape[0], one.shape[1]))
        }
        [q, k, v] => {
            let d = if shape.len() == 2 { shape[0] } else { 1 };
            let q = files.read_f32(&q.name, &q.shape)?;
            let k = files.read_f32(&k.name, &k.shape)?;
            let v = files.read_f32(&v.name, &v.shape)?;
            Ok(names::fuse_qkv(decoder, &q, &k, &v, d))
        }
        _ => Err(NnError::Config(format!(
            "no Hugging Face tensor makes a parameter of shape {shape:?} ({sources:?})"
        ))),
    }
}

/// The folder a checkpoint directory keeps for its model (`tessera train` writes the model's
/// `config.json` and tokenizer there when it saves checkpoints of a Llama-family decoder).
pub const CHECKPOINT_FOLDER: &str = "hf";

/// A model trained by `tessera train`, from its checkpoint directory `dir` (or one of its
/// `step-N` folders): the directory's `hf/` folder (config and tokenizer) and the checkpoint's
/// parameters, with its step. Checkpoints written by any layout or number of processes load
/// alike.
pub fn from_checkpoint(dir: &Path, seq_len: i64) -> Result<(HfModel, Tree<Array>, u64)> {
    let (root, folder) = if dir.join("manifest.json").exists() {
        let parent = dir.parent().unwrap_or(Path::new(".")).to_path_buf();
        (parent, dir.to_path_buf())
    } else {
        let newest = crate::checkpoint::latest(dir)?.ok_or_else(|| NnError::HuggingFace {
            path: dir.to_path_buf(),
            problem: "holds no checkpoint (no step-NNNNNNNN folder with a manifest); train with \
                --checkpoint-dir first"
                .into(),
        })?;
        (dir.to_path_buf(), newest)
    };
    let hf_dir = root.join(CHECKPOINT_FOLDER);
    if !hf_dir.join("config.json").exists() {
        return Err(NnError::HuggingFace {
            path: root,
            problem: format!(
                "has no {CHECKPOINT_FOLDER}/config.json: it was not written by a run of a \
                 Llama-family decoder (GPT-2 style models do not export)"
            ),
        });
    }
    let model = HfModel::open(&hf_dir, seq_len)?;
    let (manifest, params) =
        crate::checkpoint::load_params(&folder, &model.config.decoder.avals())?;
    Ok((model, params, manifest.step))
}

/// Writes `params` (in `config.decoder`'s structure) as a Hugging Face folder `out`:
/// `config.json` (the imported one with every field kept, or a `LlamaConfig` for a model
/// trained from scratch), the weights in float32 (sharded above `max_shard_bytes`), and
/// `tokenizer.json`: a copy of `tokenizer`'s file, or the byte-level tokenizer.
pub fn export(
    out: &Path,
    config: &HfConfig,
    params: &Tree<Array>,
    tokenizer: Option<&Path>,
    max_shard_bytes: u64,
) -> Result<()> {
    let fail = |path: &Path, e: std::io::Error| NnError::HuggingFace {
        path: path.to_path_buf(),
        problem: format!("cannot be written: {e}"),
    };
    std::fs::create_dir_all(out).map_err(|e| fail(out, e))?;
    let decoder = &config.decoder;
    let mut tensors = Vec::new();
    for t in hf_tensors(decoder) {
        let array = params.leaf(&t.path)?;
        let ours = array
            .converted(DType::F32)
            .to_typed::<f32>()
            .unwrap_or_default();
        let shape = array.shape();
        let values = match t.layout {
            Layout::Same => ours,
            Layout::Transpose => names::transpose(&ours, shape[0], shape[1]),
            Layout::Qkv(part) => {
                let d = if shape.len() == 2 { shape[0] } else { 1 };
                names::split_qkv(decoder, &ours, part, d)
            }
        };
        tensors.push((t.name, t.shape, values));
    }
    write_weights(out, &tensors, max_shard_bytes)?;
    let mut raw = config.raw.clone();
    raw.insert("torch_dtype".into(), Value::from("float32"));
    raw.remove("dtype");
    let path = out.join("config.json");
    let text = serde_json::to_string_pretty(&Value::Object(raw))
        .map_err(|e| NnError::Config(e.to_string()))?;
    std::fs::write(&path, text).map_err(|e| fail(&path, e))?;
    let target = out.join("tokenizer.json");
    match tokenizer {
        Some(source) => copy_tokenizer(source, out)?,
        None => HfTokenizer::byte_level()?.save(&target)?,
    }
    Ok(())
}

/// Copies `tokenizer_json` to `out/tokenizer.json`, and beside it the files `transformers`'
/// tokenizer and generation classes read next to a tokenizer, where there are any
/// (`tokenizer_config.json`, `special_tokens_map.json`, `generation_config.json`).
pub fn copy_tokenizer(tokenizer_json: &Path, out: &Path) -> Result<()> {
    let copy = |from: &Path, to: PathBuf| {
        std::fs::copy(from, &to)
            .map(|_| ())
            .map_err(|e| NnError::HuggingFace {
                path: to,
                problem: format!("cannot be written from {}: {e}", from.display()),
            })
    };
    copy(tokenizer_json, out.join("tokenizer.json"))?;
    for extra in [
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
    ] {
        let from = tokenizer_json.with_file_name(extra);
        if from.exists() {
            copy(&from, out.join(extra))?;
        }
    }
    Ok(())
}
