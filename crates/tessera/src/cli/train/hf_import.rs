//! `--model-dir` and `--export-hf`: a Hugging Face folder as the run's starting parameters (each
//! process reading only the tensors its groups hold) and tokenizer, the trained model written
//! back as such a folder, and the folder a checkpoint directory keeps so that `tessera export`
//! and `tessera generate --checkpoint` can do the same later.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use tessera_ir::{Array, DType, ShapedArray};
use tessera_mpmd::StepArg;
use tessera_nn::hf::{self, HfConfig, HfModel, HfTokenizer};
use tessera_nn::{DecoderConfig, DecoderKind, Tree};

use super::args::Args;
use super::config::ModelChoice;

/// The folder of `--model-dir`, its tokenizer read.
pub struct Imported {
    /// The folder and its config.
    pub model: HfModel,
    /// Its `tokenizer.json`.
    pub tokenizer: HfTokenizer,
}

/// What reading the folder's weights cost this process.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ImportStats {
    /// Bytes of tensor data read from the weight files.
    pub weights_bytes_read: u64,
    /// The parameters this process read, of `params`.
    pub params_read: usize,
    /// The model's parameters.
    pub params: usize,
    /// Bytes of the float32 parameters this process holds from the import (its peak host
    /// bytes for them; the others are not allocated).
    pub host_bytes: u64,
}

/// Opens `--model-dir`, if given.
pub fn open(args: &Args) -> anyhow::Result<Option<Imported>> {
    let Some(dir) = &args.model_dir else {
        return Ok(None);
    };
    let model = HfModel::open(dir, args.seq_len.unwrap_or(32))?;
    let tokenizer = model.tokenizer()?;
    Ok(Some(Imported { model, tokenizer }))
}

/// Refuses `--export-hf` for what cannot export, before any training.
pub fn check_export(args: &Args, choice: &ModelChoice, processes: usize) -> anyhow::Result<()> {
    let Some(out) = &args.export_hf else {
        return Ok(());
    };
    match choice {
        ModelChoice::Decoder(c) if c.kind == DecoderKind::Llama => {}
        ModelChoice::Decoder(_) | ModelChoice::Mlp => bail!(
            "--export-hf {}: only Llama-family decoders export to Hugging Face; train --model \
             llama or a --model-dir",
            out.display()
        ),
    }
    if processes > 1 {
        bail!(
            "--export-hf {}: an MPI job's parameters are spread over its ranks; save them with \
             --checkpoint-dir DIR and run `tessera export --checkpoint DIR --hf {}`",
            out.display(),
            out.display()
        );
    }
    Ok(())
}

/// The imported parameters this process reads (`reads[i]` for parameter `i`), placeholders
/// from `placeholder` for the others, and what reading them cost.
pub fn initial_params(
    imported: &Imported,
    param_avals: &Tree<ShapedArray>,
    reads: &[bool],
    placeholder: impl Fn(&ShapedArray) -> anyhow::Result<Array>,
) -> anyhow::Result<(Vec<Array>, ImportStats)> {
    let paths = param_avals.paths();
    let wanted: HashSet<&str> = paths
        .iter()
        .zip(reads)
        .filter(|(_, read)| **read)
        .map(|(p, _)| p.as_str())
        .collect();
    let mut loaded = imported.model.load_params(&|p| wanted.contains(p))?;
    let mut stats = ImportStats {
        weights_bytes_read: loaded.bytes_read,
        params_read: loaded.params.len(),
        params: paths.len(),
        host_bytes: 0,
    };
    let mut out = Vec::new();
    for (path, aval) in paths.iter().zip(param_avals.leaves()) {
        match loaded.params.remove(path) {
            Some(array) => {
                stats.host_bytes += array.bytes().len() as u64;
                out.push(array);
            }
            None => out.push(placeholder(aval)?),
        }
    }
    Ok((out, stats))
}

/// The Hugging Face config of the run's model: the imported one, or a `LlamaConfig` for one of
/// Tessera's Llamas (its positions the run's sequence length).
fn hf_config(imported: Option<&Imported>, decoder: &DecoderConfig) -> anyhow::Result<HfConfig> {
    Ok(match imported {
        Some(i) => i.model.config.clone(),
        None => HfConfig::for_decoder(decoder, decoder.seq_len)?,
    })
}

/// Writes the model's config and tokenizer into `dir/hf` (a checkpoint directory), so a
/// checkpoint exports and generates without the folder the run started from.
pub fn record_in_checkpoints(
    dir: &Path,
    imported: Option<&Imported>,
    decoder: &DecoderConfig,
) -> anyhow::Result<()> {
    if decoder.kind != DecoderKind::Llama {
        return Ok(());
    }
    let folder = dir.join(hf::CHECKPOINT_FOLDER);
    std::fs::create_dir_all(&folder).with_context(|| format!("creating {}", folder.display()))?;
    let config = hf_config(imported, decoder)?;
    let text = serde_json::to_string_pretty(&serde_json::Value::Object(config.raw))?;
    std::fs::write(folder.join("config.json"), text)?;
    match imported {
        Some(i) => hf::copy_tokenizer(&i.model.dir.join("tokenizer.json"), &folder)?,
        None => HfTokenizer::byte_level()?.save(&folder.join("tokenizer.json"))?,
    }
    Ok(())
}

/// One carried value on the host, as `dtype`.
fn on_host(arg: &StepArg, dtype: DType) -> anyhow::Result<Array> {
    let host = match arg {
        StepArg::Host(h) => h.clone(),
        StepArg::Mpmd(m) => m.first_mpmd_replica()?.to_host()?,
    };
    Ok(tessera::jit::from_host(&host, dtype)?)
}

/// `--export-hf`: the trained parameters (the first of `weights`) written as a folder.
pub fn export(
    out: &Path,
    imported: Option<&Imported>,
    decoder: &DecoderConfig,
    param_avals: &Tree<ShapedArray>,
    weights: &[StepArg],
) -> anyhow::Result<PathBuf> {
    let params = weights
        .iter()
        .zip(param_avals.leaves())
        .map(|(w, aval)| on_host(w, aval.dtype))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let tree = param_avals.unflatten(params)?;
    let config = hf_config(imported, decoder)?;
    let tokenizer = imported.map(|i| i.model.dir.join("tokenizer.json"));
    hf::export(
        out,
        &config,
        &tree,
        tokenizer.as_deref(),
        hf::DEFAULT_MAX_SHARD_BYTES,
    )?;
    Ok(out.to_path_buf())
}
