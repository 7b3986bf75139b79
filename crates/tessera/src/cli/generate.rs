//! `tessera generate`: text from a Hugging Face model folder or a checkpoint of `tessera train`,
//! through the prefill and decode programs of [`tessera::generate`] (a key/value cache on the
//! device).

use std::path::PathBuf;
use std::process::ExitCode;

use tessera::generate::{GenerateOptions, Generator};
use tessera::nn::hf::HfModel;

use super::out::outln;

/// Arguments of `tessera generate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A Hugging Face model folder (config.json, safetensors weights, tokenizer.json) of a
    /// `llama`, `mistral` or `qwen2` model.
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "checkpoint",
        conflicts_with = "checkpoint"
    )]
    model_dir: Option<PathBuf>,
    /// A checkpoint directory of `tessera train` (its newest checkpoint) or one of its
    /// `step-NNNNNNNN` folders, of a Llama-family model.
    #[arg(long, value_name = "DIR")]
    checkpoint: Option<PathBuf>,
    /// The text to continue (encoded by the folder's tokenizer, its special tokens included).
    #[arg(long)]
    prompt: String,
    /// The most tokens to add.
    #[arg(long, default_value_t = 32)]
    max_new_tokens: usize,
    /// 0 (the default) picks the likeliest token; above 0, logits are divided by it and the
    /// token sampled.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Sample among the K likeliest tokens only.
    #[arg(long, value_name = "K")]
    top_k: Option<usize>,
    /// Sample among the likeliest tokens whose probabilities sum to at least P.
    #[arg(long, value_name = "P")]
    top_p: Option<f64>,
    /// The sampler's seed: the same seed gives the same tokens.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Do not stop at the model's end-of-sequence token.
    #[arg(long)]
    ignore_eos: bool,
    /// Print one JSON line: prompt_ids, ids (the new tokens), text, tokens_per_second.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args, plugin: Option<&str>) -> anyhow::Result<ExitCode> {
    let (model, params) = match (&args.model_dir, &args.checkpoint) {
        (Some(dir), _) => {
            let model = HfModel::open(dir, 1)?;
            let params = model.load_all()?;
            (model, params)
        }
        (None, Some(dir)) => {
            let (model, params, _) = tessera::nn::hf::from_checkpoint(dir, 1)?;
            (model, params)
        }
        (None, None) => anyhow::bail!("give --model-dir DIR or --checkpoint DIR"),
    };
    let tokenizer = model.tokenizer()?;
    let prompt_ids: Vec<i64> = tokenizer
        .encode(&args.prompt)?
        .into_iter()
        .map(i64::from)
        .collect();
    let options = GenerateOptions {
        max_new_tokens: args.max_new_tokens,
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
        eos_token_ids: if args.ignore_eos {
            Vec::new()
        } else {
            model.eos_token_ids()
        },
        max_positions: Some(model.config.max_positions),
    };
    let client = tessera_pjrt::Client::open(plugin, 1)?;
    let mut generator = Generator::new(&client, model.config.decoder, &params)?;
    let generation = generator.generate(&prompt_ids, &options)?;
    let new: Vec<u32> = generation.ids.iter().map(|&x| x as u32).collect();
    let text = tokenizer.decode(&new)?;
    if args.json {
        let line = serde_json::json!({
            "prompt_ids": prompt_ids,
            "ids": generation.ids,
            "text": text,
            "tokens_per_second": generation.tokens_per_second(),
        });
        outln!("{line}")?;
    } else {
        outln!("{}{text}", args.prompt)?;
        outln!(
            "({} new tokens, {:.1} tokens/s)",
            generation.ids.len(),
            generation.tokens_per_second()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
