//! `tessera export`: a checkpoint of a Llama-family model (written by any layout, one process
//! or an MPI job) as a Hugging Face folder that `transformers` loads.

use std::path::PathBuf;
use std::process::ExitCode;

use tessera::nn::hf;

use super::out::outln;

/// Arguments of `tessera export`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A checkpoint directory (`tessera train --checkpoint-dir`; its newest checkpoint), or one
    /// of its `step-NNNNNNNN` folders.
    #[arg(long, value_name = "DIR")]
    checkpoint: PathBuf,
    /// The folder to write: config.json, model.safetensors (sharded above --max-shard-bytes,
    /// with model.safetensors.index.json) and tokenizer.json.
    #[arg(long, value_name = "OUT")]
    hf: PathBuf,
    /// The largest weight file written before the weights are sharded.
    #[arg(long, default_value_t = hf::DEFAULT_MAX_SHARD_BYTES)]
    max_shard_bytes: u64,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (model, params, step) = hf::from_checkpoint(&args.checkpoint, 1)?;
    let tokenizer = model.dir.join("tokenizer.json");
    hf::export(
        &args.hf,
        &model.config,
        &params,
        Some(&tokenizer),
        args.max_shard_bytes,
    )?;
    outln!(
        "exported step {step} of {} to {}",
        args.checkpoint.display(),
        args.hf.display()
    )?;
    Ok(ExitCode::SUCCESS)
}
