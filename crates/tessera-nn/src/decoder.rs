//! Decoder-only transformers in two styles, their parameters and their loss program.
//!
//! - GPT-2: learned token and position embeddings, pre-LayerNorm blocks (attention with biases,
//!   a GELU MLP of width `4 d`), a final LayerNorm and an untied head.
//! - Llama: token embeddings only, pre-RMSNorm blocks (attention with rotary position
//!   embeddings and no biases, a SwiGLU MLP), a final RMSNorm and an untied head.
//!
//! The loss program takes `(tokens, parameters..., targets)` and returns the mean cross-entropy of
//! predicting each target; it marks a pipeline stage boundary before each layer a [`StagePlan`]
//! names, so any depth is pipelined without hand-placed markers.

use tessera_ir::prim::AttentionImpl;
use tessera_ir::trace::{Tensor, trace};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};

use crate::error::{NnError, Result};
use crate::init::{Init, Rng};
use crate::layers::{Attention, Embedding, LayerNorm, Linear, Mlp, ParamSpec, RmsNorm, SwiGlu};
use crate::rope::Rope;
use crate::stage_plan::StagePlan;
use crate::tree::Tree;

/// The most transformer blocks [`DecoderConfig::validate`] accepts (the parameter tree has a
/// node per block).
pub const MAX_LAYERS: usize = 1 << 16;

/// Which decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoderKind {
    /// GPT-2 style.
    Gpt2,
    /// Llama style.
    Llama,
}

/// A decoder's sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecoderConfig {
    /// The style.
    pub kind: DecoderKind,
    /// Vocabulary size (256 for bytes).
    pub vocab: i64,
    /// Transformer blocks.
    pub layers: usize,
    /// Model width.
    pub d_model: i64,
    /// Attention heads.
    pub heads: i64,
    /// Tokens per sequence.
    pub seq_len: i64,
    /// MLP hidden width (GPT-2: `4 d`; Llama: about `8 d / 3`, rounded up to a multiple of 8).
    pub ffn: i64,
    /// Whether the output head is the token embedding's table, transposed (no `head`
    /// parameter). Pipelined, the table is then read by the first and the last stage.
    pub tie_embeddings: bool,
    /// The dtype the loss computes in (mixed precision): `F32`, or `BF16`/`F16` with float32
    /// parameters (cast where each is used, so their gradients are float32), norms, softmax and
    /// loss.
    pub compute_dtype: DType,
    /// Key/value heads (grouped-query attention); `heads` for multi-head attention.
    pub kv_heads: i64,
    /// Width of each attention head (`d_model / heads` unless a checkpoint says otherwise).
    pub head_dim: i64,
    /// Llama's rotary embedding (base and scaling); GPT-2 has none.
    pub rope: Rope,
    /// Biases on the query, key and value projections (GPT-2, Qwen2, Llama's `attention_bias`).
    pub qkv_bias: bool,
    /// A bias on the attention's output projection (GPT-2, Llama's `attention_bias`).
    pub out_bias: bool,
    /// Biases in the MLP (GPT-2, Llama's `mlp_bias`).
    pub mlp_bias: bool,
    /// Added to the variance (LayerNorm) or the mean square (RMSNorm).
    pub norm_eps: f64,
    /// Mistral's sliding window: each position attends to at most this many, itself included.
    pub sliding_window: Option<i64>,
    /// The kernel the attention asks for: XLA's decomposition (the default) or cuDNN's fused
    /// flash attention (on CUDA plugins, where the shapes allow; the decomposition elsewhere).
    /// The same function either way, so checkpoints do not record it.
    pub attention: AttentionImpl,
}

impl DecoderConfig {
    /// A GPT-2 style decoder.
    pub fn gpt2(vocab: i64, layers: usize, d_model: i64, heads: i64, seq_len: i64) -> Self {
        DecoderConfig {
            kind: DecoderKind::Gpt2,
            vocab,
            layers,
            d_model,
            heads,
            seq_len,
            ffn: d_model.saturating_mul(4),
            tie_embeddings: false,
            compute_dtype: DType::F32,
            kv_heads: heads,
            head_dim: d_model / heads.max(1),
            rope: Rope::new(10_000.0),
            qkv_bias: true,
            out_bias: true,
            mlp_bias: true,
            norm_eps: 1e-5,
            sliding_window: None,
            attention: AttentionImpl::Xla,
        }
    }

    /// A Llama style decoder.
    pub fn llama(vocab: i64, layers: usize, d_model: i64, heads: i64, seq_len: i64) -> Self {
        DecoderConfig {
            kind: DecoderKind::Llama,
            vocab,
            layers,
            d_model,
            heads,
            seq_len,
            ffn: (d_model.saturating_mul(8).saturating_add(2) / 3 + 7) / 8 * 8,
            tie_embeddings: false,
            compute_dtype: DType::F32,
            kv_heads: heads,
            head_dim: d_model / heads.max(1),
            rope: Rope::new(10_000.0),
            qkv_bias: false,
            out_bias: false,
            mlp_bias: false,
            norm_eps: 1e-5,
            sliding_window: None,
            attention: AttentionImpl::Xla,
        }
    }

    /// The same decoder with its head tied to the token embedding.
    pub fn tied(self) -> Self {
        DecoderConfig {
            tie_embeddings: true,
            ..self
        }
    }

    /// The same decoder running its attention with `implementation` (see
    /// its `attention` field).
    pub fn with_attention(self, implementation: AttentionImpl) -> Self {
        DecoderConfig {
            attention: implementation,
            ..self
        }
    }

    /// The same decoder computing in `dtype` (see [`DecoderConfig::compute_dtype`]).
    pub fn with_compute_dtype(self, dtype: DType) -> Self {
        DecoderConfig {
            compute_dtype: dtype,
            ..self
        }
    }

    /// Checks the sizes, saying which is wrong and how to fix it.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(NnError::Config(what));
        if self.vocab < 1 || self.d_model < 1 || self.heads < 1 || self.seq_len < 1 || self.ffn < 1
        {
            return bad(format!("every size must be at least 1 (got {self:?})"));
        }
        if self.layers == 0 {
            return bad("layers must be at least 1".into());
        }
        if self.layers > MAX_LAYERS {
            return bad(format!(
                "{} layers is more than the {MAX_LAYERS} a decoder may have; use fewer layers",
                self.layers
            ));
        }
        if self.checked_param_count().is_none() {
            return bad(format!(
                "the parameter count of {self:?} does not fit in 64 bits; use a smaller d_model, \
                 ffn, vocab or fewer layers"
            ));
        }
        let scores = self
            .seq_len
            .checked_mul(self.seq_len)
            .and_then(|s| s.checked_mul(self.heads));
        let rows = self
            .seq_len
            .checked_mul(self.d_model.max(self.ffn).max(self.vocab));
        if scores.is_none() || rows.is_none() {
            return bad(format!(
                "seq_len {} is too long for one example's activations (seq_len² × heads and \
                 seq_len × width must fit in 64 bits); use a shorter seq_len",
                self.seq_len
            ));
        }
        if !matches!(self.compute_dtype, DType::F32 | DType::BF16 | DType::F16) {
            return bad(format!(
                "the compute dtype must be float32, bfloat16 or float16, not {}",
                self.compute_dtype
            ));
        }
        // Without an explicit head width, it is d_model / heads.
        if self.head_dim == self.d_model / self.heads && self.d_model % self.heads != 0 {
            return bad(format!(
                "heads ({}) must divide d_model ({}); pick heads among the divisors of d_model",
                self.heads, self.d_model
            ));
        }
        if self.head_dim < 1 || self.kv_heads < 1 || self.heads % self.kv_heads != 0 {
            return bad(format!(
                "{} key/value heads of width {} do not fit {} query heads: the key/value heads \
                 must divide the heads and the width must be at least 1",
                self.kv_heads, self.head_dim, self.heads
            ));
        }
        if self.kind == DecoderKind::Llama && self.head_dim % 2 != 0 {
            return bad(format!(
                "rotary embeddings need an even head width, but the heads are {} wide",
                self.head_dim
            ));
        }
        if self.sliding_window.is_some_and(|w| w < 1) {
            return bad("a sliding window must hold at least 1 position".into());
        }
        Ok(())
    }

    /// The attention of each block, its rope's frequencies those of `rope_len` positions.
    pub(crate) fn attention(&self, rope_len: i64) -> Attention {
        Attention {
            d: self.d_model,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            qkv_bias: self.qkv_bias,
            out_bias: self.out_bias,
            rope: (self.kind == DecoderKind::Llama).then_some(self.rope),
            window: self.sliding_window,
            rope_len: Some(rope_len),
            implementation: self.attention,
        }
    }

    pub(crate) fn embedding(&self) -> Embedding {
        Embedding {
            vocab: self.vocab,
            d: self.d_model,
            std: 0.02,
        }
    }

    fn norm_spec(&self) -> Tree<ParamSpec> {
        match self.kind {
            DecoderKind::Gpt2 => LayerNorm {
                d: self.d_model,
                eps: self.norm_eps,
            }
            .spec(),
            DecoderKind::Llama => RmsNorm {
                d: self.d_model,
                eps: self.norm_eps,
            }
            .spec(),
        }
    }

    pub(crate) fn norm(&self, p: &Tree<Tensor>, x: &Tensor) -> Result<Tensor> {
        match self.kind {
            DecoderKind::Gpt2 => LayerNorm {
                d: self.d_model,
                eps: self.norm_eps,
            }
            .apply(p, x),
            DecoderKind::Llama => RmsNorm {
                d: self.d_model,
                eps: self.norm_eps,
            }
            .apply(p, x),
        }
    }

    fn mlp_spec(&self) -> Tree<ParamSpec> {
        match self.kind {
            DecoderKind::Gpt2 => Mlp {
                d: self.d_model,
                hidden: self.ffn,
            }
            .spec(),
            DecoderKind::Llama => SwiGlu {
                d: self.d_model,
                hidden: self.ffn,
                bias: self.mlp_bias,
            }
            .spec(),
        }
    }

    pub(crate) fn mlp(&self, p: &Tree<Tensor>, x: &Tensor) -> Result<Tensor> {
        match self.kind {
            DecoderKind::Gpt2 => Mlp {
                d: self.d_model,
                hidden: self.ffn,
            }
            .apply(p, x),
            DecoderKind::Llama => SwiGlu {
                d: self.d_model,
                hidden: self.ffn,
                bias: self.mlp_bias,
            }
            .apply(p, x),
        }
    }

    /// The output head starts small (standard deviation 0.02, as GPT-2's weights), so the
    /// initial prediction is near uniform and the loss near `ln(vocab)`.
    pub(crate) fn head(&self) -> Linear {
        Linear {
            std: 0.02,
            ..Linear::new(self.d_model, self.vocab).no_bias()
        }
    }

    /// The parameters: `embed` (`tokens`, and `positions` for GPT-2), `blocks.<i>` (`norm1`,
    /// `attn`, `norm2`, `mlp`), `final_norm`, and `head` unless the embeddings are tied.
    pub fn spec(&self) -> Tree<ParamSpec> {
        let mut embed = vec![("tokens", self.embedding().spec())];
        if self.kind == DecoderKind::Gpt2 {
            let positions = ParamSpec::new(&[self.seq_len, self.d_model], Init::Normal(0.01));
            embed.push(("positions", positions));
        }
        let block = Tree::node([
            ("norm1", self.norm_spec()),
            ("attn", self.attention(self.seq_len).spec()),
            ("norm2", self.norm_spec()),
            ("mlp", self.mlp_spec()),
        ]);
        let blocks = Tree::node((0..self.layers).map(|i| (i.to_string(), block.clone())));
        let mut parts = vec![
            ("embed", Tree::node(embed)),
            ("blocks", blocks),
            ("final_norm", self.norm_spec()),
        ];
        if !self.tie_embeddings {
            parts.push(("head", self.head().spec()));
        }
        Tree::node(parts)
    }

    /// The number of parameters (`i64::MAX` where that overflows; [`DecoderConfig::validate`]
    /// refuses such a model). Counted from the sizes, without building the parameter tree.
    pub fn param_count(&self) -> i64 {
        self.checked_param_count().unwrap_or(i64::MAX)
    }

    /// The number of parameters, `None` where it overflows or a size is negative: the same
    /// count as the leaves of [`DecoderConfig::spec`].
    fn checked_param_count(&self) -> Option<i64> {
        let (v, d, t, h) = (self.vocab, self.d_model, self.seq_len, self.ffn);
        if v < 0 || d < 0 || t < 0 || h < 0 {
            return None;
        }
        let gpt = self.kind == DecoderKind::Gpt2;
        // LayerNorm has a gain and a bias, RMSNorm a gain.
        let norm = if gpt { d.checked_mul(2)? } else { d };
        // qkv [d, kv (group + 2) dh] and out [heads dh, d], with their biases.
        let group = self.heads.checked_div(self.kv_heads)?;
        let qkv = self
            .kv_heads
            .checked_mul(group.checked_add(2)?)?
            .checked_mul(self.head_dim)?;
        let inner = self.heads.checked_mul(self.head_dim)?;
        let attn = d
            .checked_mul(qkv)?
            .checked_add(inner.checked_mul(d)?)?
            .checked_add(if self.qkv_bias { qkv } else { 0 })?
            .checked_add(if self.out_bias { d } else { 0 })?;
        // GPT-2: fc [d, h] + h and proj [h, d] + d; Llama: gate, up [d, h] and down [h, d],
        // with biases h, h, d when it has them.
        let mlp = if gpt {
            d.checked_mul(h)?
                .checked_mul(2)?
                .checked_add(h)?
                .checked_add(d)?
        } else {
            let bias = if self.mlp_bias {
                h.checked_mul(2)?.checked_add(d)?
            } else {
                0
            };
            d.checked_mul(h)?.checked_mul(3)?.checked_add(bias)?
        };
        let block = norm.checked_mul(2)?.checked_add(attn)?.checked_add(mlp)?;
        let blocks = block.checked_mul(i64::try_from(self.layers).ok()?)?;
        let positions = if gpt { t.checked_mul(d)? } else { 0 };
        let embed = v.checked_mul(d)?.checked_add(positions)?;
        let head = if self.tie_embeddings {
            0
        } else {
            d.checked_mul(v)?
        };
        embed
            .checked_add(blocks)?
            .checked_add(norm)?
            .checked_add(head)
    }

    /// The parameters' types, in argument order.
    pub fn avals(&self) -> Tree<ShapedArray> {
        self.spec().map(&mut |_, p| p.aval())
    }

    /// Initial parameters from `seed`.
    pub fn init(&self, seed: u64) -> Result<Tree<Array>> {
        self.validate()?;
        let mut rng = Rng::new(seed);
        self.spec()
            .try_map(&mut |_, p| p.init.array(&p.shape, &mut rng))
    }

    /// Model FLOPs per token of a training step as MaxText counts them
    /// (`calculate_tflops_training_per_device`): [`DecoderConfig::train_flops_per_token`] with
    /// causal attention's scores and values at half, as a causal mask leaves half of them.
    pub fn train_flops_per_token_maxtext(&self) -> f64 {
        let width = self.heads.saturating_mul(self.head_dim) as f64;
        let full_attention = 12.0 * self.layers as f64 * width * self.seq_len as f64;
        self.train_flops_per_token() - full_attention / 2.0
    }

    /// Model FLOPs per token of a training step (forward and backward): `6 N` for the weights
    /// plus the attention scores and values, as in the PaLM paper's appendix.
    pub fn train_flops_per_token(&self) -> f64 {
        // The embedding lookup costs no FLOPs; a tied table still does the head's work.
        let lookup = if self.tie_embeddings {
            0
        } else {
            self.vocab.saturating_mul(self.d_model)
        };
        let weights = self.param_count().saturating_sub(lookup) as f64;
        let width = self.heads.saturating_mul(self.head_dim) as f64;
        let attention = 12.0 * self.layers as f64 * width * self.seq_len as f64;
        6.0 * weights + attention
    }

    /// The loss program for `rows` sequences: `(tokens [rows, seq] i32, parameters...,
    /// targets [rows, seq] i32) -> mean cross-entropy`, with a stage marker before each layer
    /// where `plan` starts a stage.
    pub fn loss(&self, rows: i64, plan: &StagePlan) -> Result<ClosedJaxpr> {
        self.validate()?;
        plan.check(self.layers)?;
        let tokens = ShapedArray::new(DType::I32, &[rows, self.seq_len]);
        let spec = self.avals();
        let mut avals = vec![tokens.clone()];
        avals.extend(spec.flatten());
        avals.push(tokens);
        trace_fallible(&avals, |args| {
            let n = args.len();
            let params = spec.unflatten(args[1..n - 1].to_vec())?;
            Ok(vec![self.loss_body(
                &args[0],
                &params,
                &args[n - 1],
                plan,
            )?])
        })
    }

    fn loss_body(
        &self,
        tokens: &Tensor,
        p: &Tree<Tensor>,
        targets: &Tensor,
        plan: &StagePlan,
    ) -> Result<Tensor> {
        let rows_t = tokens.shape()[0] * tokens.shape()[1];
        // The rope's frequencies are those of the whole example, inputs and the last target, as
        // `transformers` computes its loss from `labels` (only dynamic scaling depends on it).
        let logits = self.logits_body(tokens, p, plan, tokens.shape()[1] + 1)?;
        // Softmax and loss in float32.
        let logits = logits.reshape(&[rows_t, self.vocab]).astype(DType::F32);
        let onehot = targets.reshape(&[rows_t]).one_hot(self.vocab, DType::F32);
        let picked = (logits.log_softmax(1) * onehot).sum(&[1]);
        Ok(-picked.mean(&[0]))
    }

    /// The logits program for `rows` sequences of `seq` tokens: `(tokens [rows, seq] i32,
    /// parameters...) -> logits [rows, seq, vocab] f32`, what `transformers`' `logits` holds.
    pub fn logits(&self, rows: i64, seq: i64) -> Result<ClosedJaxpr> {
        self.validate()?;
        let tokens = ShapedArray::new(DType::I32, &[rows, seq]);
        let spec = self.avals();
        let mut avals = vec![tokens];
        avals.extend(spec.flatten());
        trace_fallible(&avals, |args| {
            let params = spec.unflatten(args[1..].to_vec())?;
            let logits = self.logits_body(&args[0], &params, &StagePlan::single(), seq)?;
            Ok(vec![logits.astype(DType::F32)])
        })
    }

    /// The logits (`[rows, seq, vocab]`, in the compute dtype) of `tokens` (`[rows, seq]`), the
    /// rope's frequencies those of `rope_len` positions.
    fn logits_body(
        &self,
        tokens: &Tensor,
        p: &Tree<Tensor>,
        plan: &StagePlan,
        rope_len: i64,
    ) -> Result<Tensor> {
        let (rows, t) = (tokens.shape()[0], tokens.shape()[1]);
        // Each parameter is cast to the compute dtype where it is used (in its own stage).
        let cast = |tree: &Tree<Tensor>| tree.map(&mut |_, x| x.astype(self.compute_dtype));
        let embed = cast(p.get("embed")?);
        let mut h = self.embedding().apply(embed.get("tokens")?, tokens)?;
        if self.kind == DecoderKind::Gpt2 {
            h = &h + embed.leaf("positions")?;
        }
        for layer in 0..self.layers {
            if let Some(stage) = plan.stage_starting_at(layer) {
                h = h.enter_stage(stage as i64);
            }
            let block = cast(p.get(&format!("blocks.{layer}"))?);
            h = match plan.block_remat() {
                None => self.block_body(&block, &h, rope_len)?,
                Some(policy) => self.checkpointed_block(policy, &block, &h, rope_len)?,
            };
        }
        // A stage of no layers at the end: the final norm, the head and the loss alone.
        if let Some(stage) = plan.stage_starting_at(self.layers) {
            h = h.enter_stage(stage as i64);
        }
        Ok(self.final_logits(p, &h)?.reshape(&[rows, t, self.vocab]))
    }

    /// One decoder block on `h`: attention and MLP, each after its norm, each added back.
    fn block_body(&self, block: &Tree<Tensor>, h: &Tensor, rope_len: i64) -> Result<Tensor> {
        let normed = self.norm(block.get("norm1")?, h)?;
        let h = h + &self
            .attention(rope_len)
            .apply(block.get("attn")?, &normed)?;
        let normed = self.norm(block.get("norm2")?, &h)?;
        Ok(&h + &self.mlp(block.get("mlp")?, &normed)?)
    }

    /// [`Self::block_body`] in a `checkpoint` region under `policy` (`jax.checkpoint` of the
    /// block), its operands the hidden state and the block's parameters.
    fn checkpointed_block(
        &self,
        policy: tessera_ir::autodiff::RematPolicy,
        block: &Tree<Tensor>,
        h: &Tensor,
        rope_len: i64,
    ) -> Result<Tensor> {
        let leaves = block.flatten();
        let operands: Vec<&Tensor> = std::iter::once(h).chain(&leaves).collect();
        let mut failure = None;
        let mut out = tessera_ir::trace::checkpoint_with(&operands, policy, |args| {
            let body = block
                .unflatten(args[1..].to_vec())
                .and_then(|inner| self.block_body(&inner, &args[0], rope_len));
            match body {
                Ok(result) => vec![result],
                Err(err) => {
                    failure = Some(err);
                    vec![args[0].clone()]
                }
            }
        });
        match (failure, out.pop()) {
            (Some(err), _) => Err(err),
            (None, Some(result)) => Ok(result),
            (None, None) => Err(NnError::Config(
                "a checkpointed block returned nothing".into(),
            )),
        }
    }

    /// The final norm and the head (the embedding table, transposed, when tied) of `h`
    /// (`[rows, t, d]`): `[rows × t, vocab]` in the compute dtype.
    pub(crate) fn final_logits(&self, p: &Tree<Tensor>, h: &Tensor) -> Result<Tensor> {
        let cast = |tree: &Tree<Tensor>| tree.map(&mut |_, x| x.astype(self.compute_dtype));
        let rows_t = h.shape()[0] * h.shape()[1];
        let h = self.norm(&cast(p.get("final_norm")?), h)?;
        Ok(if self.tie_embeddings {
            let table = p.leaf("embed.tokens.table")?.astype(self.compute_dtype);
            h.reshape(&[rows_t, self.d_model])
                .matmul(&table.transpose(&[1, 0]))
        } else {
            self.head()
                .apply(&cast(p.get("head")?), &h)?
                .reshape(&[rows_t, self.vocab])
        })
    }
}

/// Traces `f` on arguments of types `avals`; an error `f` returns (a parameter missing from a
/// tree, a bad size) is the result, not a program.
pub(crate) fn trace_fallible(
    avals: &[ShapedArray],
    f: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Result<ClosedJaxpr> {
    let mut failure = None;
    let program = trace(avals, |args| match f(args) {
        Ok(outs) => outs,
        Err(err) => {
            failure = Some(err);
            vec![args[0].clone()]
        }
    });
    match failure {
        Some(err) => Err(err),
        None => Ok(program?),
    }
}
