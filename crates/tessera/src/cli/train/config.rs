//! The model a run trains: the `--model` name and the decoder's sizes from `--config FILE`
//! (TOML) and the size flags, flags winning over the file.

use std::path::Path;

use anyhow::{Context, bail};
use serde::Deserialize;
use tessera_nn::{DecoderConfig, StagePlan, StagePlanError};

use super::args::Args;

/// The sizes a config file may set; anything else in it is refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    model: Option<String>,
    layers: Option<usize>,
    d_model: Option<i64>,
    heads: Option<i64>,
    seq_len: Option<i64>,
    ffn: Option<i64>,
    /// Token ids (256 by default: bytes; a larger vocabulary trains on byte ids too, as a
    /// model of that size).
    vocab: Option<i64>,
    /// Key/value heads (grouped-query attention; `heads` by default).
    kv_heads: Option<i64>,
    stage_layers: Option<Vec<usize>>,
}

/// What to train.
#[derive(Debug, Clone)]
pub enum ModelChoice {
    /// The toy tanh network.
    Mlp,
    /// A decoder of the model library.
    Decoder(DecoderConfig),
}

fn read_config(path: &Path) -> anyhow::Result<ConfigFile> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "the config file {} is not a model config: {e}\nIt takes `model`, `layers`, \
             `d_model`, `heads`, `seq_len`, `ffn`, `vocab`, `kv_heads` and `stage_layers`, e.g.\n  model = \"llama\"\n  layers = 4\n  \
             d_model = 128\n  heads = 4\n  seq_len = 64",
            path.display()
        )
    })
}

/// The model the arguments name, its sizes checked (an error names the config file, if any).
pub fn choose_model(args: &Args) -> anyhow::Result<ModelChoice> {
    let file = match &args.config {
        Some(path) => read_config(path)?,
        None => ConfigFile::default(),
    };
    if let Some(dir) = &args.model_dir {
        let seq_len = args.seq_len.unwrap_or(32);
        let mut config = tessera_nn::hf::HfConfig::read(dir, seq_len)?.decoder;
        config.compute_dtype = compute_dtype(&args.dtype)?;
        config
            .validate()
            .with_context(|| format!("--model-dir {}", dir.display()))?;
        return Ok(ModelChoice::Decoder(config));
    }
    let name = args
        .model
        .clone()
        .or(file.model.clone())
        .unwrap_or_else(|| "mlp".into());
    let sized = args.config.is_some()
        || args.layers.is_some()
        || args.d_model.is_some()
        || args.heads.is_some()
        || args.seq_len.is_some();
    let make = match name.as_str() {
        "mlp" if args.tie_embeddings => {
            bail!("--tie-embeddings ties a decoder's head; use it with --model llama or gpt2")
        }
        "mlp" if args.dtype != "f32" => {
            bail!(
                "--dtype {} sets a decoder's compute dtype; use it with --model llama or gpt2",
                args.dtype
            )
        }
        "mlp" if sized => bail!(
            "--config and the size flags (--layers --d-model --heads --seq-len) shape the \
             decoders; use them with --model llama or gpt2"
        ),
        "mlp" => return Ok(ModelChoice::Mlp),
        "llama" => DecoderConfig::llama,
        "gpt2" | "gpt" => DecoderConfig::gpt2,
        other => bail!("unknown model `{other}`: use `mlp`, `llama` or `gpt2` (`gpt` is `gpt2`)"),
    };
    let mut config = make(
        file.vocab.unwrap_or(256),
        args.layers.or(file.layers).unwrap_or(4),
        args.d_model.or(file.d_model).unwrap_or(64),
        args.heads.or(file.heads).unwrap_or(4),
        args.seq_len.or(file.seq_len).unwrap_or(32),
    );
    if let Some(ffn) = file.ffn {
        config.ffn = ffn;
    }
    if let Some(kv_heads) = file.kv_heads {
        config.kv_heads = kv_heads;
    }
    config.tie_embeddings = args.tie_embeddings;
    config.compute_dtype = compute_dtype(&args.dtype)?;
    if let Err(err) = config.validate() {
        match &args.config {
            Some(path) => bail!("the model in {} does not work: {err}", path.display()),
            None => bail!("the model's sizes do not work: {err}"),
        }
    }
    Ok(ModelChoice::Decoder(config))
}

/// The decoders' compute dtype named by `--dtype`.
fn compute_dtype(name: &str) -> anyhow::Result<tessera_ir::DType> {
    match name {
        "f32" | "float32" => Ok(tessera_ir::DType::F32),
        "bf16" | "bfloat16" => Ok(tessera_ir::DType::BF16),
        other => {
            bail!("--dtype {other}: use f32, or bf16 for mixed precision (float32 parameters)")
        }
    }
}

/// The decoder layers of each stage: `--stage-layers`, else the config file's `stage_layers`,
/// else `--stages` stages at evenly spaced layers (one layer per stage for the MLP). Counts that
/// do not split the layers are refused with the smallest fix.
pub fn stage_layers(args: &Args, choice: &ModelChoice) -> anyhow::Result<Vec<usize>> {
    let stages = args.stages as usize;
    let (given, source) = match (&args.stage_layers, &args.config) {
        (Some(counts), _) => (Some(counts.clone()), "--stage-layers".to_string()),
        (None, Some(path)) => (
            read_config(path)?.stage_layers,
            format!("{}: stage_layers", path.display()),
        ),
        (None, None) => (None, String::new()),
    };
    let join = |counts: &[usize]| {
        let parts: Vec<String> = counts.iter().map(usize::to_string).collect();
        parts.join(",")
    };
    let config = match choice {
        ModelChoice::Decoder(config) => config,
        ModelChoice::Mlp if given.is_some() => bail!(
            "{source} places a decoder's layers; the mlp model has one layer per stage: use it \
             with --model llama or gpt2, or drop it"
        ),
        ModelChoice::Mlp => return Ok(vec![1; stages]),
    };
    let layers = config.layers;
    let Some(counts) = given else {
        return Ok(StagePlan::even(stages, layers)?.counts(layers));
    };
    if counts.len() != stages {
        let refit = StagePlan::even(stages, layers).map(|p| p.counts(layers));
        if counts.is_empty() {
            // `stage_layers = []` in a config file: no stage count to suggest from it.
            bail!(
                "{source} is empty: give one layer count per stage ({stages} for --stages \
                 {stages}){}",
                match refit {
                    Ok(refit) => format!(", e.g. {}", join(&refit)),
                    Err(_) => String::new(),
                }
            );
        }
        bail!(
            "{source} {} names {} stages but --stages is {stages}: pass --stages {} with it{}",
            join(&counts),
            counts.len(),
            counts.len(),
            match refit {
                Ok(refit) => format!(", or give {stages} counts, e.g. {}", join(&refit)),
                Err(_) => String::new(),
            }
        );
    }
    match StagePlan::from_counts(&counts, layers) {
        Ok(plan) => Ok(plan.counts(layers)),
        // "--stage-layers 3,3,2 sums to 8 layers but the model has 9: add 1 to a stage, ..."
        Err(err @ StagePlanError::Sum { .. }) => bail!("{source} {err}"),
        Err(err) => bail!("{source}: {err}"),
    }
}

/// The model's name: `mlp`, `llama` or `gpt2`.
pub fn name(choice: &ModelChoice) -> &'static str {
    match choice {
        ModelChoice::Mlp => "mlp",
        ModelChoice::Decoder(c) => match c.kind {
            tessera_nn::DecoderKind::Llama => "llama",
            tessera_nn::DecoderKind::Gpt2 => "gpt2",
        },
    }
}

/// A one-line description of the model, recorded in checkpoints and checked on resume.
pub fn describe(choice: &ModelChoice, optimizer: &str) -> String {
    match choice {
        ModelChoice::Mlp => format!("mlp optimizer={optimizer}"),
        ModelChoice::Decoder(c) => format!(
            "{}{}{} vocab={} layers={} d_model={} heads={} seq_len={} ffn={}{} optimizer={optimizer}",
            name(choice),
            if c.tie_embeddings { " tied" } else { "" },
            match c.compute_dtype {
                tessera_ir::DType::F32 => String::new(),
                other => format!(" compute={other}"),
            },
            c.vocab,
            c.layers,
            c.d_model,
            c.heads,
            c.seq_len,
            c.ffn,
            llama_features(c)
        ),
    }
}

/// What a decoder has beyond the sizes (an imported model's grouped-query heads, head width,
/// rope, biases, norm epsilon, window), empty for Tessera's own decoders.
fn llama_features(c: &DecoderConfig) -> String {
    let default = match c.kind {
        tessera_nn::DecoderKind::Gpt2 => {
            DecoderConfig::gpt2(c.vocab, c.layers, c.d_model, c.heads, c.seq_len)
        }
        tessera_nn::DecoderKind::Llama => {
            DecoderConfig::llama(c.vocab, c.layers, c.d_model, c.heads, c.seq_len)
        }
    };
    let same = c.kv_heads == default.kv_heads
        && c.head_dim == default.head_dim
        && c.rope == default.rope
        && (c.qkv_bias, c.out_bias, c.mlp_bias)
            == (default.qkv_bias, default.out_bias, default.mlp_bias)
        && c.norm_eps == default.norm_eps
        && c.sliding_window == default.sliding_window;
    match same {
        true => String::new(),
        false => format!(
            " kv_heads={} head_dim={} rope={:?} biases={:?} eps={} window={:?}",
            c.kv_heads,
            c.head_dim,
            c.rope,
            (c.qkv_bias, c.out_bias, c.mlp_bias),
            c.norm_eps,
            c.sliding_window
        ),
    }
}

/// Refuses a run whose parameters (with their gradients and the optimizer's state) or whose
/// step's batch and activations cannot fit in this machine's available memory (where the CPU
/// plugin's devices keep them too), before any of it is allocated: a too-large model or
/// `--batch` would otherwise abort the process when the first tensor is allocated.
pub fn check_memory(choice: &ModelChoice, optimizer: &str, batch: u32) -> anyhow::Result<()> {
    let Some(available) = tessera_ir::interp::memory::available_now() else {
        return Ok(());
    };
    let gb = |b: f64| b / 1e9;
    // A lower bound on one step's data on the host: its inputs and targets as 8-byte values
    // (the devices' activations, in GPU memory under a GPU plugin, are not counted).
    let batch = f64::from(batch);
    let step_bytes = match choice {
        ModelChoice::Mlp => batch * super::model::MLP_WIDTH as f64 * 2.0 * 8.0,
        ModelChoice::Decoder(c) => batch * c.seq_len as f64 * 2.0 * 8.0,
    };
    if step_bytes > available as f64 {
        bail!(
            "one step's batch needs at least {:.1} GB on the host (--batch {batch}) but this \
             machine has {:.1} GB of memory available; use a smaller --batch{}",
            gb(step_bytes),
            gb(available as f64),
            match choice {
                ModelChoice::Mlp => "",
                ModelChoice::Decoder(_) => ", or --seq-len",
            }
        );
    }
    let ModelChoice::Decoder(config) = choice else {
        return Ok(());
    };
    let params = config.param_count().max(0) as f64;
    let bytes_per_param = 4.0;
    // Initial values and the host's copy, the devices' copy, the gradient accumulators, and
    // AdamW's two moments (SGD keeps none).
    let copies = 4.0 + if optimizer == "adamw" { 2.0 } else { 0.0 };
    let needed = params * bytes_per_param * copies;
    if needed > available as f64 {
        bail!(
            "the model's {params:.0} parameters need about {:.1} GB ({copies} float32 copies: \
             parameters, gradients and optimizer state) but this machine has {:.1} GB of memory \
             available; use a smaller --d-model, --layers or --ffn",
            gb(needed),
            gb(available as f64)
        );
    }
    Ok(())
}

/// `choice` with its attention running on the kernel `--attention` names: `auto` is cuDNN on a
/// CUDA plugin when the decoder computes in bfloat16 or float16 (cuDNN's dtypes), else XLA's
/// decomposition; `cudnn` is refused where the plugin is not CUDA.
pub fn with_attention(
    choice: ModelChoice,
    name: &str,
    plugin: Option<&str>,
) -> anyhow::Result<ModelChoice> {
    use tessera_ir::prim::AttentionImpl;
    let ModelChoice::Decoder(config) = choice else {
        return Ok(choice);
    };
    let cuda = || {
        tessera_pjrt::resolve_plugin(plugin)
            .is_ok_and(|p| p.platform == Some(tessera_pjrt::PluginPlatform::Cuda))
    };
    let half = matches!(
        config.compute_dtype,
        tessera_ir::DType::BF16 | tessera_ir::DType::F16
    );
    let kernel = match name {
        "xla" => AttentionImpl::Xla,
        "auto" if half && cuda() => AttentionImpl::Cudnn,
        "auto" => AttentionImpl::Xla,
        "cudnn" if cuda() => AttentionImpl::Cudnn,
        "cudnn" => bail!(
            "--attention cudnn runs cuDNN's kernels, which need a CUDA plugin (--plugin cuda); \
             this run's plugin is not one: use --attention xla or auto"
        ),
        other => bail!("--attention {other}: use auto, xla or cudnn"),
    };
    Ok(ModelChoice::Decoder(config.with_attention(kernel)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 1B presets of `configs/` read as 1B-class grouped-query Llamas.
    #[test]
    fn the_one_billion_presets_are_what_they_say() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs");
        for (file, vocab) in [
            ("llama-1b-32k.toml", 32000),
            ("llama-1b-128k.toml", 128_256),
        ] {
            let path = format!("{root}/{file}");
            let words = [
                "--config".to_string(),
                path,
                "--dtype".into(),
                "bf16".into(),
            ];
            let args = super::super::profile::parse(&words).expect("arguments");
            let ModelChoice::Decoder(c) = choose_model(&args).expect(file) else {
                panic!("{file}: not a decoder");
            };
            assert_eq!(
                (c.vocab, c.kv_heads, c.heads, c.seq_len),
                (vocab, 8, 32, 4096)
            );
            let params = c.param_count() as f64;
            assert!((1.0e9..1.6e9).contains(&params), "{file}: {params}");
        }
    }
}
