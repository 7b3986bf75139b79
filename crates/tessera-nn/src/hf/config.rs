//! `config.json` of a Hugging Face Llama-family model, read into a [`DecoderConfig`] and written
//! back. Both spellings of the rope settings `transformers` writes are read: `rope_theta` with
//! `rope_scaling` (4.x) and `rope_parameters` holding `rope_theta` and `rope_type` (5.x).

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::decoder::{DecoderConfig, DecoderKind};
use crate::error::{NnError, Result};
use crate::rope::{Rope, RopeScaling};

/// The architectures imported: Llama and the families of the same shape.
pub const SUPPORTED: [&str; 3] = ["llama", "mistral", "qwen2"];

/// What a model folder's `config.json` says, beyond the decoder's sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct HfConfig {
    /// The decoder, at the sequence length it was read for.
    pub decoder: DecoderConfig,
    /// `model_type`: one of [`SUPPORTED`].
    pub model_type: String,
    /// `max_position_embeddings`: the longest sequence the model was trained on.
    pub max_positions: i64,
    /// The ids that end generation (`eos_token_id`, one or several).
    pub eos_token_ids: Vec<i64>,
    /// `bos_token_id`, if any.
    pub bos_token_id: Option<i64>,
    /// The file as read, so an export writes back every field it does not change.
    pub raw: Map<String, Value>,
}

fn problem(path: &Path, what: impl Into<String>) -> NnError {
    NnError::HuggingFace {
        path: path.to_path_buf(),
        problem: what.into(),
    }
}

/// Reads field `key` of `raw` as an integer, or `default` when absent or null.
fn int(raw: &Map<String, Value>, key: &str, default: Option<i64>, path: &Path) -> Result<i64> {
    match raw.get(key) {
        Some(Value::Number(n)) if n.as_i64().is_some() => Ok(n.as_i64().unwrap_or(0)),
        None | Some(Value::Null) => default.ok_or_else(|| {
            problem(
                path,
                format!("`{key}` is missing; a Llama-family config.json has it"),
            )
        }),
        Some(other) => Err(problem(path, format!("`{key}` is {other}, not an integer"))),
    }
}

fn float(raw: &Map<String, Value>, key: &str, default: f64, path: &Path) -> Result<f64> {
    match raw.get(key) {
        Some(Value::Number(n)) => Ok(n.as_f64().unwrap_or(default)),
        None | Some(Value::Null) => Ok(default),
        Some(other) => Err(problem(path, format!("`{key}` is {other}, not a number"))),
    }
}

fn flag(raw: &Map<String, Value>, key: &str, default: bool, path: &Path) -> Result<bool> {
    match raw.get(key) {
        Some(Value::Bool(b)) => Ok(*b),
        None | Some(Value::Null) => Ok(default),
        Some(other) => Err(problem(
            path,
            format!("`{key}` is {other}, not true or false"),
        )),
    }
}

/// One or several token ids (`eos_token_id` may be a list).
pub(super) fn ids(raw: &Map<String, Value>, key: &str) -> Vec<i64> {
    match raw.get(key) {
        Some(Value::Number(n)) => n.as_i64().into_iter().collect(),
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_i64).collect(),
        _ => Vec::new(),
    }
}

impl HfConfig {
    /// Reads `config.json` (already parsed into `raw`) for sequences of `seq_len` tokens.
    /// Refused, by name: another architecture, an activation other than SiLU, a partial
    /// rotary embedding, a rope type Tessera does not compute, Qwen2's sliding window.
    pub fn from_json(raw: Map<String, Value>, seq_len: i64, path: &Path) -> Result<Self> {
        let model_type = raw.get("model_type").and_then(Value::as_str).unwrap_or("");
        if !SUPPORTED.contains(&model_type) {
            return Err(problem(
                path,
                format!(
                    "model_type `{model_type}` is not supported: Tessera imports the \
                     Llama-shaped decoders {}; pick a model of one of them",
                    SUPPORTED.join(", ")
                ),
            ));
        }
        let act = raw
            .get("hidden_act")
            .and_then(Value::as_str)
            .unwrap_or("silu");
        if act != "silu" {
            return Err(problem(
                path,
                format!("hidden_act `{act}` is not supported (only silu)"),
            ));
        }
        if float(&raw, "partial_rotary_factor", 1.0, path)? != 1.0 {
            return Err(problem(
                path,
                "a partial rotary embedding (`partial_rotary_factor` \
                below 1) is not supported",
            ));
        }
        let heads = int(&raw, "num_attention_heads", None, path)?;
        let d_model = int(&raw, "hidden_size", None, path)?;
        let layers = int(&raw, "num_hidden_layers", None, path)?;
        let max_positions = int(&raw, "max_position_embeddings", Some(seq_len), path)?;
        let mut decoder = DecoderConfig::llama(
            int(&raw, "vocab_size", None, path)?,
            usize::try_from(layers).unwrap_or(0),
            d_model,
            heads,
            seq_len,
        );
        decoder.ffn = int(&raw, "intermediate_size", None, path)?;
        decoder.kv_heads = int(&raw, "num_key_value_heads", Some(heads), path)?;
        decoder.head_dim = int(&raw, "head_dim", Some(d_model / heads.max(1)), path)?;
        decoder.norm_eps = float(&raw, "rms_norm_eps", 1e-6, path)?;
        decoder.tie_embeddings = flag(&raw, "tie_word_embeddings", false, path)?;
        decoder.rope = rope(&raw, max_positions, path)?;
        match model_type {
            "qwen2" => {
                decoder.qkv_bias = true;
                if flag(&raw, "use_sliding_window", false, path)? {
                    return Err(problem(
                        path,
                        "Qwen2's sliding window (`use_sliding_window`) is \
                        not supported; set it to false to train with full attention",
                    ));
                }
            }
            _ => {
                let bias = flag(&raw, "attention_bias", false, path)?;
                (decoder.qkv_bias, decoder.out_bias) = (bias, bias);
                decoder.mlp_bias = flag(&raw, "mlp_bias", false, path)?;
            }
        }
        if model_type == "mistral" {
            decoder.sliding_window = match raw.get("sliding_window") {
                Some(Value::Number(n)) => n.as_i64(),
                _ => None,
            };
        }
        decoder
            .validate()
            .map_err(|e| problem(path, format!("config.json describes no valid model: {e}")))?;
        Ok(HfConfig {
            decoder,
            model_type: model_type.to_string(),
            max_positions,
            eos_token_ids: ids(&raw, "eos_token_id"),
            bos_token_id: ids(&raw, "bos_token_id").first().copied(),
            raw,
        })
    }

    /// Reads `DIR/config.json` for sequences of `seq_len` tokens.
    pub fn read(dir: &Path, seq_len: i64) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            problem(
                &path,
                format!("cannot be read ({e}); a model folder holds config.json"),
            )
        })?;
        let raw: Value = serde_json::from_str(&text)
            .map_err(|e| problem(&path, format!("is not valid JSON: {e}")))?;
        let Value::Object(raw) = raw else {
            return Err(problem(&path, "is not a JSON object"));
        };
        Self::from_json(raw, seq_len, &path)
    }

    /// The `config.json` of a Tessera Llama (one trained from scratch): `transformers`'
    /// `LlamaConfig` fields for it.
    pub fn for_decoder(decoder: &DecoderConfig, max_positions: i64) -> Result<Self> {
        if decoder.kind != DecoderKind::Llama {
            return Err(NnError::Config(
                "only Llama-style decoders export to Hugging Face (GPT-2 style ones have \
                 learned positions and LayerNorm, which LlamaForCausalLM does not)"
                    .into(),
            ));
        }
        let d = decoder;
        let raw = json!({
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": d.vocab,
            "hidden_size": d.d_model,
            "intermediate_size": d.ffn,
            "num_hidden_layers": d.layers,
            "num_attention_heads": d.heads,
            "num_key_value_heads": d.kv_heads,
            "head_dim": d.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": max_positions,
            "rms_norm_eps": d.norm_eps,
            "attention_bias": d.qkv_bias,
            "mlp_bias": d.mlp_bias,
            "tie_word_embeddings": d.tie_embeddings,
            "rope_theta": d.rope.theta,
            "rope_scaling": rope_scaling_json(&d.rope.scaling),
            "torch_dtype": "float32",
        });
        let Value::Object(raw) = raw else {
            return Err(NnError::Config("config.json is an object".into()));
        };
        Self::from_json(raw, d.seq_len, Path::new("config.json"))
    }
}

/// The rope settings, from either spelling.
fn rope(raw: &Map<String, Value>, max_positions: i64, path: &Path) -> Result<Rope> {
    let empty = Map::new();
    let (params, theta) = match raw.get("rope_parameters") {
        Some(Value::Object(p)) => (p, float(p, "rope_theta", 10_000.0, path)?),
        _ => match raw.get("rope_scaling") {
            Some(Value::Object(p)) => (p, float(raw, "rope_theta", 10_000.0, path)?),
            _ => (&empty, float(raw, "rope_theta", 10_000.0, path)?),
        },
    };
    let kind = params
        .get("rope_type")
        .or_else(|| params.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let factor = float(params, "factor", 1.0, path)?;
    let original = int(
        params,
        "original_max_position_embeddings",
        Some(max_positions),
        path,
    )?;
    let scaling = match kind {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor },
        "dynamic" => RopeScaling::Dynamic {
            factor,
            max_positions,
        },
        "llama3" => RopeScaling::Llama3 {
            factor,
            low_freq_factor: float(params, "low_freq_factor", 1.0, path)?,
            high_freq_factor: float(params, "high_freq_factor", 4.0, path)?,
            original_max_positions: int(params, "original_max_position_embeddings", None, path)?,
        },
        "yarn" => {
            let mscale = |s: f64, m: f64| {
                if s <= 1.0 {
                    1.0
                } else {
                    0.1 * m * s.ln() + 1.0
                }
            };
            let attention_factor = match params.get("attention_factor").and_then(Value::as_f64) {
                Some(a) => a,
                None => match (
                    params.get("mscale").and_then(Value::as_f64),
                    params.get("mscale_all_dim").and_then(Value::as_f64),
                ) {
                    (Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                        mscale(factor, m) / mscale(factor, all)
                    }
                    _ => mscale(factor, 1.0),
                },
            };
            let beta = |key, default| match params.get(key).and_then(Value::as_f64) {
                Some(b) if b != 0.0 => b,
                _ => default,
            };
            RopeScaling::Yarn {
                factor,
                original_max_positions: original,
                beta_fast: beta("beta_fast", 32.0),
                beta_slow: beta("beta_slow", 1.0),
                attention_factor,
                truncate: flag(params, "truncate", true, path)?,
            }
        }
        other => {
            return Err(problem(
                path,
                format!(
                    "rope type `{other}` is not supported; Tessera computes default, linear, \
                     dynamic, llama3 and yarn"
                ),
            ));
        }
    };
    Ok(Rope { theta, scaling })
}

/// `rope_scaling` as `transformers` 4.x writes it (`null` when unscaled).
fn rope_scaling_json(scaling: &RopeScaling) -> Value {
    match *scaling {
        RopeScaling::None => Value::Null,
        RopeScaling::Linear { factor } => json!({"rope_type": "linear", "factor": factor}),
        RopeScaling::Dynamic { factor, .. } => json!({"rope_type": "dynamic", "factor": factor}),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_positions,
        } => json!({"rope_type": "llama3", "factor": factor, "low_freq_factor": low_freq_factor,
            "high_freq_factor": high_freq_factor,
            "original_max_position_embeddings": original_max_positions}),
        RopeScaling::Yarn {
            factor,
            original_max_positions,
            beta_fast,
            beta_slow,
            attention_factor,
            truncate,
        } => json!({"rope_type": "yarn", "factor": factor,
            "original_max_position_embeddings": original_max_positions, "beta_fast": beta_fast,
            "beta_slow": beta_slow, "attention_factor": attention_factor, "truncate": truncate}),
    }
}
