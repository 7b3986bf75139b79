//! The command line of `tessera train`.

use std::path::PathBuf;

/// Arguments of `tessera train`.
#[derive(Debug, clap::Args, serde::Serialize)]
pub struct Args {
    /// The model: `mlp` (a toy teacher-student tanh network, one layer per stage), or the model
    /// library's decoders `llama` and `gpt2` (`gpt` is `gpt2`), byte-level on
    /// examples/data/corpus.txt or --data. Default: the config file's `model`, else `mlp`.
    #[arg(long)]
    pub model: Option<String>,
    /// A TOML file with the decoder's sizes: `model`, `layers`, `d_model`, `heads`, `seq_len`
    /// and optionally `ffn` and `stage_layers` (see docs/training.md). Flags given as well
    /// override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Decoder layers (default 4).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Decoder width (default 64).
    #[arg(long)]
    pub d_model: Option<i64>,
    /// Attention heads (default 4); they must divide --d-model.
    #[arg(long)]
    pub heads: Option<i64>,
    /// Tokens per sequence (default 32).
    #[arg(long)]
    pub seq_len: Option<i64>,
    /// The decoders' compute dtype: `f32`, or `bf16` for mixed precision (bfloat16 matmuls and
    /// activations; float32 parameters, gradients, optimizer state, norms, softmax and loss).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Tie the decoder's output head to its token embedding (one table, read by the first and
    /// the last stage; its gradient is the sum of both uses).
    #[arg(long)]
    pub tie_embeddings: bool,
    /// Clip the mean gradients to this global norm (over every stage's gradients) before the
    /// optimizer's update.
    #[arg(long, value_name = "NORM")]
    pub clip_grad_norm: Option<f64>,
    /// The schedule (any name `tessera schedule --list` shows).
    #[arg(long, default_value = "1f1b")]
    pub schedule: String,
    /// Pipeline stages (the model gets one stage marker per stage boundary).
    #[arg(long, default_value_t = 4)]
    pub stages: u32,
    /// The decoder layers of each stage, in order, e.g. `3,3,2,1` (one count per --stages,
    /// summing to --layers; default: evenly spaced, stage s beginning at layer
    /// ceil(s × layers / stages)). The first stage also holds the embedding and the last the
    /// final norm, the head and the loss, so either may have 0 layers (`4,4,0`: the head and
    /// the loss alone on the last stage). Also `stage_layers = [3, 3, 2, 1]` in --config.
    #[arg(long, value_delimiter = ',', value_name = "COUNTS")]
    pub stage_layers: Option<Vec<usize>>,
    /// MPMD groups (defaults to the number of stages).
    #[arg(long)]
    pub mpmd_dim: Option<u32>,
    /// The whole device mesh, e.g. `stage=2,data=2,model=2`: the MPMD axis (--mpmd-axis) makes
    /// the groups; inside a group `data` splits each micro-batch's rows (data parallelism; FSDP
    /// with --fsdp) and `model` splits the decoders' layers Megatron style (tensor parallelism).
    /// Default: `stage=G,data=--devices/G`.
    #[arg(long, value_name = "AXES")]
    pub mesh: Option<String>,
    /// The axis of --mesh whose positions are the MPMD groups (pipeline stages run on them).
    #[arg(long, default_value = "stage", value_name = "AXIS")]
    pub mpmd_axis: String,
    /// Also shard every decoder parameter over the `data` axis (fully sharded data parallelism):
    /// each parameter's first dimension that tensor parallelism leaves whole and `data` divides.
    #[arg(long)]
    pub fsdp: bool,
    /// Microbatches per step.
    #[arg(long, default_value_t = 8)]
    pub microbatches: u32,
    /// Devices of the CPU plugin; each group gets devices / mpmd-dim of them.
    #[arg(long, default_value_t = 8)]
    pub devices: u32,
    /// Training steps of the whole run (a resumed run stops at the same step as an
    /// uninterrupted one).
    #[arg(long, default_value_t = 10)]
    pub steps: u32,
    /// End this invocation after step N, as if interrupted there (the learning-rate schedule
    /// still spans --steps); continue later with --resume.
    #[arg(long, value_name = "N")]
    pub stop_after: Option<u32>,
    /// Examples (sequences) per step, divided among the microbatches.
    #[arg(long, default_value_t = 64)]
    pub batch: u32,
    /// Peak learning rate (default: 0.2 for the MLP, 0.1 for the decoders).
    #[arg(long)]
    pub lr: Option<f64>,
    /// The optimizer: `sgd` (plain) or `adamw` (optax's defaults: b1 0.9, b2 0.999, eps 1e-8,
    /// weight decay 1e-4), from the model library.
    #[arg(long, default_value = "sgd")]
    pub optimizer: String,
    /// Warm the learning rate up linearly from 0 to --lr over this many steps, then decay it
    /// along a cosine to --lr / 10 at the last step (default: a constant --lr).
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Start from a Hugging Face model folder (config.json, safetensors weights, tokenizer.json;
    /// `llama`, `mistral` or `qwen2`) in place of --model, --config and the size flags;
    /// --seq-len, --dtype and the training flags still apply, and --data is encoded with the
    /// folder's tokenizer. Each process reads only the weights its groups hold.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["model", "config", "layers", "d_model", "heads", "tie_embeddings"])]
    pub model_dir: Option<PathBuf>,
    /// Train the decoders on this file instead of examples/data/corpus.txt: text (its bytes, or
    /// the --model-dir tokenizer's ids), JSON Lines of {"text": ...} documents (`.jsonl`), or
    /// token ids (`.bin`: little-endian u16 or u32, see --data-dtype). Its last tenth is held
    /// out for the eval loss.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// The width of a `.bin` --data file's ids when it has no Tessera header: u16 (nanoGPT's)
    /// or u32.
    #[arg(long, value_name = "u16|u32")]
    pub data_dtype: Option<String>,
    /// At the end of the run, write the trained Llama-family model as a Hugging Face folder
    /// (config.json, model.safetensors, tokenizer.json) that transformers loads; one process
    /// only (under MPI, save --checkpoint-dir and run `tessera export`).
    #[arg(long, value_name = "DIR")]
    pub export_hf: Option<PathBuf>,
    /// Compute the eval loss on the held-out data every N steps and at the last step (0: never).
    #[arg(long, default_value_t = 10)]
    pub eval_every: u64,
    /// Save parameters and optimizer state here (safetensors and a manifest per checkpoint;
    /// under MPI each rank writes the blocks its devices hold, on a shared filesystem).
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// How long any wait of the run may last, in seconds: a pipeline task waiting for its
    /// input or running, and under MPI each collective between the ranks. It takes precedence
    /// over TESSERA_TIMEOUT_S (the pipeline's waits) and TESSERA_MPI_TIMEOUT_S (the
    /// collectives'), which library users set; without any of the three, 600. When it passes,
    /// every rank says which rank holds the job up and what it waits for, and the job ends.
    #[arg(long, value_name = "SECONDS", value_parser = positive_seconds)]
    pub timeout: Option<f64>,
    /// An XLA compiler option for every program of the step, as NAME=VALUE (JAX's
    /// `compiler_options`; e.g. --xla-option xla_cpu_enable_fast_math=false); repeatable.
    #[arg(long = "xla-option", value_name = "NAME=VALUE")]
    pub xla_options: Vec<String>,
    /// A named set of XLA compiler options for every program of the step: `xla` (XLA's
    /// defaults) or `maxtext-gpu` (MaxText's H100 settings: latency-hiding scheduler, Triton
    /// GEMMs and command buffers off, combined and pipelined collectives, no rematerialization
    /// pass; a CPU plugin ignores them). --xla-option wins over it, option by option.
    #[arg(long, default_value = "xla", value_name = "NAME")]
    pub xla_profile: String,
    /// Write checkpoints on a background thread while training goes on (the state is copied to
    /// the host first; the next save, and the end of the run, wait for the write).
    #[arg(long)]
    pub checkpoint_async: bool,
    /// Save a checkpoint every N steps (and always after the last step); needs
    /// --checkpoint-dir or --resume.
    #[arg(long, value_name = "N")]
    pub checkpoint_every: Option<u64>,
    /// Continue the run from the newest checkpoint in DIR (and keep saving there unless
    /// --checkpoint-dir names another directory).
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Write the loss curve (train and eval) as SVG here (default: loss.svg in the checkpoint
    /// directory when there is one).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Write the run's scalars (train and eval loss, learning rate, tokens per second, step
    /// time, peak bytes per group) as TensorBoard event files here; a resumed run adds a new
    /// file, so `tensorboard --logdir DIR` shows the whole run.
    #[arg(long, value_name = "DIR")]
    pub tensorboard: Option<PathBuf>,
    /// The seed of the initial parameters.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Skip the unpipelined reference step that checks every pipelined step (about halves the
    /// time of a step).
    #[arg(long)]
    pub no_reference: bool,
    /// Go on when the loss becomes NaN or infinite (by default the run stops with an error).
    #[arg(long)]
    pub allow_nonfinite: bool,
    /// Write a Chrome / Perfetto trace of the last step's tasks here.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Run the schedule's pipeline tasks and the update programs even on one MPMD group (where
    /// the step otherwise compiles into one program, as `jax.jit` of the whole step does): for
    /// the schedule's task table, trace, bubble and memory figures on one group.
    #[arg(long)]
    pub no_fuse: bool,
    /// Which forward values each pipeline stage's backward reads saved, and which it
    /// recomputes (JAX's `checkpoint_policies` names): `everything_saveable` (the default: the
    /// backward computes no forward value again), `dots_saveable`,
    /// `dots_with_no_batch_dims_saveable`, `nothing_saveable` (the backward recomputes its
    /// stage's forward: least memory). A step run as one program applies it as a checkpoint
    /// region around each decoder block
    #[arg(long, value_name = "POLICY", default_value = "everything_saveable")]
    #[serde(serialize_with = "policy_name")]
    pub remat: tessera_mpmd::RematPolicy,
    /// The kernel attention runs with: `auto` (cuDNN's fused flash attention on a CUDA plugin
    /// in bf16, XLA's decomposition elsewhere), `xla`, or `cudnn` (needs a CUDA plugin; shapes
    /// cuDNN does not take stay decomposed)
    #[arg(long, value_name = "KIND", default_value = "auto")]
    pub attention: String,
    /// The memory the saved residuals wait in between their forward and backward tasks
    /// (`pinned_host`: JAX's offloading; the plugin's devices must have it), not the device's
    #[arg(long, value_name = "KIND")]
    pub remat_offload: Option<String>,
    /// When a data-parallel stage sums its gradients, losses and metrics over its data axes:
    /// `per-step` (the default: every backward adds to a partial sum on each device, and one
    /// reduction per group runs after the step's last backward) or `per-microbatch` (every
    /// backward reduces its own gradient, as before)
    #[arg(long, value_name = "WHEN", default_value = "per-step")]
    pub grad_reduce: tessera_mpmd::GradReduce,
    /// When an FSDP stage (`--fsdp`) gathers its parameters: `per-step` (the default: once
    /// before the group's first task, kept whole over the data axes until the step ends) or
    /// `per-microbatch` (in every task that reads them: least memory)
    #[arg(long, value_name = "WHEN", default_value = "per-step")]
    pub fsdp_gather: tessera_mpmd::FsdpGather,
    /// Print a JSON summary as the last line.
    #[arg(long)]
    pub json: bool,
    /// Train with the configuration `tessera plan --out FILE` chose (its stages, stage layers,
    /// MPMD groups, micro-batches, schedule, devices, batch and model sizes), or `auto`: plan
    /// first (measuring or reusing the cached costs), then train with the first choice. The
    /// run reports the plan's predicted step time and peak bytes next to the measured.
    #[arg(long, value_name = "FILE|auto")]
    pub plan: Option<String>,
    /// With `--plan auto`: the most bytes a device may hold (`2GiB`, `512MiB`, ...).
    #[arg(long, value_name = "BYTES", requires = "plan")]
    pub device_memory: Option<String>,
    /// What `--plan` predicted (set by it).
    #[arg(skip)]
    #[serde(skip)]
    pub plan_prediction: Option<super::plan_use::Prediction>,
    /// The flags among [`DEFAULTED_FLAGS`] given on the command line (not left at their
    /// defaults): a `--plan` refuses one that disagrees with it rather than overriding it, and
    /// the mlp model one that it would ignore.
    #[arg(skip)]
    #[serde(skip)]
    pub given: Vec<String>,
}

/// The ids of the flags with defaults whose being given matters: those a `--plan` sets,
/// `--eval-every` (which the mlp model, without held-out data, cannot honour) and `--seed`
/// (which a resumed run, whose parameters are its checkpoint's, cannot).
pub const DEFAULTED_FLAGS: [&str; 10] = [
    "seed",
    "remat",
    "fsdp_gather",
    "stages",
    "microbatches",
    "devices",
    "batch",
    "schedule",
    "dtype",
    "eval_every",
];

impl Args {
    /// Whether flag `id` (one of [`DEFAULTED_FLAGS`]) was given on the command line.
    pub fn was_given(&self, id: &str) -> bool {
        self.given.iter().any(|g| g == id)
    }
}

/// A remat policy as its JAX name.
fn policy_name<S: serde::Serializer>(
    policy: &tessera_mpmd::RematPolicy,
    to: S,
) -> Result<S::Ok, S::Error> {
    to.serialize_str(policy.name())
}

/// A positive, finite number of seconds (`--timeout`).
fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && std::time::Duration::try_from_secs_f64(s).is_ok() => {
            Ok(s)
        }
        _ => Err(format!(
            "'{text}' is not a positive number of seconds; give e.g. --timeout 600"
        )),
    }
}
