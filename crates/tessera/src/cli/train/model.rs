//! A model ready to train: its loss program with stage markers, where its parameters sit among
//! the loss's arguments, their initial values, and its data for any step.

use std::collections::HashMap;
use std::path::Path;

use tessera_ir::{Array, ClosedJaxpr, ShapedArray};
use tessera_nn::data::{ByteCorpus, Split};
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
    /// Their initial values, in argument order.
    pub init: Vec<Array>,
    /// Tokens per example (1 for the MLP).
    pub tokens_per_example: u64,
    /// Model FLOPs per token of a training step (decoders only).
    pub flops_per_token: Option<f64>,
    /// The layers of each stage, in order (one each for the MLP).
    pub stage_layers: Vec<usize>,
    /// The dtype its matmuls compute in (`--dtype`; float32 for the MLP).
    pub compute_dtype: tessera_ir::DType,
    rows: i64,
    microbatches: usize,
    data: Data,
}

impl Model {
    /// Builds `choice` with stages of `stage_layers` layers each, micro-batches of `rows`
    /// examples.
    pub fn new(
        choice: &ModelChoice,
        stage_layers: &[usize],
        rows: i64,
        microbatches: usize,
        data_file: Option<&Path>,
        seed: u64,
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
                    stage_layers: vec![1; stages],
                    compute_dtype: tessera_ir::DType::F32,
                    rows,
                    microbatches,
                    data: Data::Teacher(mlp),
                })
            }
            ModelChoice::Decoder(config) => {
                let seq = config.seq_len as usize;
                let data = match data_file {
                    Some(path) => ByteCorpus::from_file(path, seq, EVAL_FRACTION)?,
                    None => {
                        let corpus = include_bytes!("../../../../../examples/data/corpus.txt");
                        let source = Path::new("examples/data/corpus.txt");
                        ByteCorpus::from_bytes(source, corpus.to_vec(), seq, EVAL_FRACTION)?
                    }
                };
                let init = config.init(seed)?;
                Ok(Model {
                    loss: config
                        .loss(rows, &StagePlan::from_counts(stage_layers, config.layers)?)?,
                    eval_loss: Some(config.loss(rows, &StagePlan::single())?),
                    params: (1..=init.len()).collect(),
                    param_avals: config.avals(),
                    init: init.flatten(),
                    tokens_per_example: seq as u64,
                    flops_per_token: Some(config.train_flops_per_token()),
                    stage_layers: stage_layers.to_vec(),
                    compute_dtype: config.compute_dtype,
                    rows,
                    microbatches,
                    data: Data::Corpus(data),
                })
            }
        }
    }

    /// The number of parameters.
    pub fn param_count(&self) -> i64 {
        self.init
            .iter()
            .map(|a| a.shape().iter().product::<i64>())
            .sum()
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
