//! A model ready to train: its loss program with stage markers, where its parameters sit among
//! the loss's arguments, their initial values, and its data for any step.

use std::collections::HashMap;
use std::path::Path;

use anyhow::bail;
use tessera_ir::{Array, ClosedJaxpr, ShapedArray};
use tessera_nn::data::token_files::{self, TokenWidth};
use tessera_nn::data::{ByteCorpus, Split};
use tessera_nn::hf::HfTokenizer;
use tessera_nn::toy::TanhMlp;
use tessera_nn::{StagePlan, Tree};

use super::config::ModelChoice;

/// The toy MLP's width.
pub(super) const MLP_WIDTH: i64 = 16;
/// The share of a data file held out for the eval loss.
const EVAL_FRACTION: f64 = 0.1;
/// Eval batches of one micro-batch's rows each, averaged for the eval loss.
const EVAL_BATCHES: u64 = 4;

/// Where a model's data comes from.
enum Data {
    /// The toy network's teacher data, the same micro-batches every step.
    Teacher(TanhMlp),
    /// Windows of a byte corpus, advancing by the step's batch each step.
    Corpus(ByteCorpus),
}

/// Where a decoder's data comes from: `--data` (or the bundled corpus), encoded by the model's
/// tokenizer where it has one (else as bytes), a `.bin` file's ids read as they are.
pub struct DataSource<'a> {
    /// `--data`.
    pub file: Option<&'a Path>,
    /// The tokenizer of `--model-dir`.
    pub tokenizer: Option<&'a HfTokenizer>,
    /// `--data-dtype`.
    pub width: Option<TokenWidth>,
}

/// The corpus of `source` for sequences of `seq` tokens: a `.bin` file's ids; a `.jsonl` file's
/// documents, each encoded alone and joined; any other file's text (its bytes, for a byte
/// model). Refused: ids the model's `vocab` does not have.
fn corpus(source: &DataSource, seq: usize, vocab: i64) -> anyhow::Result<ByteCorpus> {
    let Some(path) = source.file else {
        let corpus = include_bytes!("../../../../../examples/data/corpus.txt");
        let name = Path::new("examples/data/corpus.txt");
        return Ok(match source.tokenizer {
            Some(tok) => {
                let text = String::from_utf8_lossy(corpus);
                ByteCorpus::from_tokens(name, tok.encode(&text)?, seq, EVAL_FRACTION)?
            }
            None => ByteCorpus::from_bytes(name, corpus.to_vec(), seq, EVAL_FRACTION)?,
        });
    };
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let encode = |text: &str| -> anyhow::Result<Vec<u32>> {
        Ok(match source.tokenizer {
            Some(tok) => tok.encode(text)?,
            None => text.bytes().map(u32::from).collect(),
        })
    };
    let corpus = match extension {
        "bin" => ByteCorpus::from_tokens(
            path,
            token_files::read_bin(path, source.width)?,
            seq,
            EVAL_FRACTION,
        )?,
        "jsonl" => {
            let mut ids = Vec::new();
            for text in token_files::read_jsonl_texts(path)? {
                ids.extend(encode(&text)?);
            }
            ByteCorpus::from_tokens(path, ids, seq, EVAL_FRACTION)?
        }
        _ if source.width.is_some() => {
            bail!(
                "--data-dtype reads a .bin token file; {} is not one",
                path.display()
            )
        }
        _ => match source.tokenizer {
            Some(_) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    anyhow::anyhow!(
                        "--data {}: not UTF-8 text for the tokenizer ({e})",
                        path.display()
                    )
                })?;
                ByteCorpus::from_tokens(path, encode(&text)?, seq, EVAL_FRACTION)?
            }
            None => ByteCorpus::from_file(path, seq, EVAL_FRACTION)?,
        },
    };
    if let Some(max) = corpus.max_token().filter(|&m| i64::from(m) >= vocab) {
        bail!(
            "--data {}: token id {max} is beyond the model's vocabulary of {vocab} ids; the data \
             was tokenized for another model",
            path.display()
        );
    }
    Ok(corpus)
}

/// A model ready to train.
pub struct Model {
    /// The loss with a stage marker at each stage boundary: `(data_in, params..., data_out)`.
    pub loss: ClosedJaxpr,
    /// The same loss unstaged, for checking the eval loss on one device (decoders only).
    pub eval_loss: Option<ClosedJaxpr>,
    /// The loss's argument positions of the parameters (1..=n).
    pub params: Vec<usize>,
    /// The parameters' names and types.
    pub param_avals: Tree<ShapedArray>,
    /// Their initial values, in argument order; empty for a model imported with --model-dir,
    /// whose parameters each process reads from the folder (`hf_import.rs`).
    pub init: Vec<Array>,
    /// Tokens per example (1 for the MLP).
    pub tokens_per_example: u64,
    /// Model FLOPs per token of a training step (decoders only).
    pub flops_per_token: Option<f64>,
    /// The same as MaxText counts it (causal attention at half; decoders only).
    pub flops_per_token_maxtext: Option<f64>,
    /// The layers of each stage, in order (one each for the MLP).
    pub stage_layers: Vec<usize>,
    /// The dtype its matmuls compute in (`--dtype`; float32 for the MLP).
    pub compute_dtype: tessera_ir::DType,
    /// The kernel its attention asks for (`xla`, `cudnn`; none for the MLP).
    pub attention: Option<&'static str>,
    rows: i64,
    microbatches: usize,
    data: Data,
}

impl Model {
    /// Builds `choice` with stages of `stage_layers` layers each, micro-batches of `rows`
    /// examples.
    /// With `block_remat`, each decoder block is a `checkpoint` region under that policy (for a
    /// step run as one program).
    pub fn new(
        choice: &ModelChoice,
        stage_layers: &[usize],
        rows: i64,
        microbatches: usize,
        data: &DataSource,
        seed: Option<u64>,
        block_remat: Option<tessera_mpmd::RematPolicy>,
    ) -> anyhow::Result<Model> {
        let stages = stage_layers.len();
        match choice {
            ModelChoice::Mlp => {
                let mlp = TanhMlp {
                    layers: stages,
                    width: MLP_WIDTH,
                };
                let init = mlp.init()?;
                Ok(Model {
                    loss: mlp.loss(rows, true)?,
                    eval_loss: None,
                    params: (1..=stages).collect(),
                    param_avals: mlp.avals(),
                    init: init.flatten(),
                    tokens_per_example: 1,
                    flops_per_token: None,
                    flops_per_token_maxtext: None,
                    stage_layers: vec![1; stages],
                    compute_dtype: tessera_ir::DType::F32,
                    attention: None,
                    rows,
                    microbatches,
                    data: Data::Teacher(mlp),
                })
            }
            ModelChoice::Decoder(config) => {
                let seq = config.seq_len as usize;
                let data = corpus(data, seq, config.vocab)?;
                let init = match seed {
                    Some(seed) => config.init(seed)?.flatten(),
                    None => Vec::new(),
                };
                Ok(Model {
                    loss: config.loss(rows, &{
                        let plan = StagePlan::from_counts(stage_layers, config.layers)?;
                        match block_remat {
                            Some(policy) => plan.with_block_remat(policy),
                            None => plan,
                        }
                    })?,
                    eval_loss: Some(config.loss(rows, &StagePlan::single())?),
                    params: (1..=config.avals().len()).collect(),
                    param_avals: config.avals(),
                    init,
                    tokens_per_example: seq as u64,
                    flops_per_token: Some(config.train_flops_per_token()),
                    flops_per_token_maxtext: Some(config.train_flops_per_token_maxtext()),
                    stage_layers: stage_layers.to_vec(),
                    compute_dtype: config.compute_dtype,
                    attention: Some(config.attention.name()),
                    rows,
                    microbatches,
                    data: Data::Corpus(data),
                })
            }
        }
    }

    /// The number of parameters.
    pub fn param_count(&self) -> i64 {
        self.param_avals
            .leaves()
            .iter()
            .map(|a| a.shape.iter().product::<i64>())
            .sum()
    }

    /// The number of parameter arrays.
    pub fn n_params(&self) -> usize {
        self.param_avals.len()
    }

    /// Where the data of step `step` (counted from 0) begins: the number of windows read
    /// before it. Recorded in checkpoints.
    pub fn data_position(&self, step: u64) -> u64 {
        match self.data {
            Data::Teacher(_) => 0,
            Data::Corpus(_) => step * self.rows as u64 * self.microbatches as u64,
        }
    }

    /// The micro-batches of step `step`, each mapping the loss's data argument positions to
    /// arrays.
    pub fn batches(&self, step: u64) -> anyhow::Result<Vec<HashMap<usize, Array>>> {
        let last = self.params.len() + 1;
        (0..self.microbatches as u64)
            .map(|m| {
                let (input, target) = match &self.data {
                    Data::Teacher(mlp) => mlp.batch(m, self.rows)?,
                    Data::Corpus(corpus) => {
                        let position = self.data_position(step) + m * self.rows as u64;
                        corpus.batch(Split::Train, position, self.rows as usize)?
                    }
                };
                Ok(HashMap::from([(0, input), (last, target)]))
            })
            .collect()
    }

    /// The held-out batches the eval loss averages over (none for the MLP).
    pub fn eval_batches(&self) -> anyhow::Result<Vec<(Array, Array)>> {
        match &self.data {
            Data::Teacher(_) => Ok(Vec::new()),
            Data::Corpus(corpus) => (0..EVAL_BATCHES)
                .map(|b| Ok(corpus.batch(Split::Eval, b * self.rows as u64, self.rows as usize)?))
                .collect(),
        }
    }
}
