//! Layers: each declares its parameters as a [`Tree`] of [`ParamSpec`]s and applies itself to a
//! tree of traced tensors of that structure. Inputs may have any leading dimensions; the last is
//! the feature dimension.

use tessera_ir::trace::{Tensor, dot_product_attention_with_stats};
use tessera_ir::{DType, ShapedArray};

use crate::error::Result;
use crate::init::Init;
pub use crate::rope::{Rope, RopeLen, RopeScaling, rotary};
use crate::tree::Tree;

/// A parameter's shape and how it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamSpec {
    /// Its shape.
    pub shape: Vec<i64>,
    /// Its initializer.
    pub init: Init,
}

impl ParamSpec {
    /// A parameter of `shape` started by `init`.
    pub fn new(shape: &[i64], init: Init) -> Tree<ParamSpec> {
        Tree::Leaf(ParamSpec {
            shape: shape.to_vec(),
            init,
        })
    }

    /// Its float32 type.
    pub fn aval(&self) -> ShapedArray {
        ShapedArray::new(DType::F32, &self.shape)
    }
}

/// `x` with its last dimension multiplied by a `[d_in, d_out]` matrix.
fn matmul_last(x: &Tensor, w: &Tensor) -> Tensor {
    let shape = x.shape().to_vec();
    let (d_in, d_out) = (w.shape()[0], w.shape()[1]);
    let rows: i64 = shape[..shape.len() - 1].iter().product();
    let mut out_shape = shape[..shape.len() - 1].to_vec();
    out_shape.push(d_out);
    x.reshape(&[rows, d_in]).matmul(w).reshape(&out_shape)
}

/// `y = x W (+ b)`.
#[derive(Debug, Clone, Copy)]
pub struct Linear {
    /// Input features.
    pub d_in: i64,
    /// Output features.
    pub d_out: i64,
    /// Whether it adds a bias.
    pub bias: bool,
    /// Standard deviation of the initial weights.
    pub std: f64,
}

impl Linear {
    /// A layer with a bias and weights of standard deviation `1/sqrt(d_in)`.
    pub fn new(d_in: i64, d_out: i64) -> Self {
        Linear {
            d_in,
            d_out,
            bias: true,
            std: 1.0 / (d_in as f64).sqrt(),
        }
    }

    /// The same layer without a bias.
    pub fn no_bias(self) -> Self {
        Linear {
            bias: false,
            ..self
        }
    }

    /// Its parameters: `w` `[d_in, d_out]` and, with a bias, `b` `[d_out]`.
    pub fn spec(&self) -> Tree<ParamSpec> {
        let mut children = vec![(
            "w",
            ParamSpec::new(&[self.d_in, self.d_out], Init::Normal(self.std)),
        )];
        if self.bias {
            children.push(("b", ParamSpec::new(&[self.d_out], Init::Zeros)));
        }
        Tree::node(children)
    }

    /// Applies it to the last dimension of `x`.
    pub fn apply(&self, p: &Tree<Tensor>, x: &Tensor) -> Result<Tensor> {
        let y = matmul_last(x, p.leaf("w")?);
        Ok(if self.bias { y + p.leaf("b")? } else { y })
    }
}

/// A table of `vocab` vectors, looked up by integer ids (a gather, as `jnp.take`).
#[derive(Debug, Clone, Copy)]
pub struct Embedding {
    /// Rows of the table.
    pub vocab: i64,
    /// Width of each row.
    pub d: i64,
    /// Standard deviation of the initial table.
    pub std: f64,
}

impl Embedding {
    /// Its parameter: `table` `[vocab, d]`.
    pub fn spec(&self) -> Tree<ParamSpec> {
        Tree::node([(
            "table",
            ParamSpec::new(&[self.vocab, self.d], Init::Normal(self.std)),
        )])
    }

    /// The rows of `ids` (any shape, integer): the result has shape `ids.shape + [d]`.
    pub fn apply(&self, p: &Tree<Tensor>, ids: &Tensor) -> Result<Tensor> {
        Ok(p.leaf("table")?.take(ids, 0))
    }
}

/// The mean over the last dimension, kept as a dimension of size 1.
fn mean_last(x: &Tensor) -> Tensor {
    let axis = x.rank() as i64 - 1;
    x.mean(&[axis]).keep_dims(&[axis], x.rank())
}

/// Layer normalisation over the last dimension, with a gain and an offset.
#[derive(Debug, Clone, Copy)]
pub struct LayerNorm {
    /// Features.
    pub d: i64,
    /// Added to the variance.
    pub eps: f64,
}

impl LayerNorm {
    /// Its parameters: `gain` (ones) and `bias` (zeros), `[d]`.
    pub fn spec(&self) -> Tree<ParamSpec> {
        Tree::node([
            ("gain", ParamSpec::new(&[self.d], Init::Ones)),
            ("bias", ParamSpec::new(&[self.d], Init::Zeros)),
        ])
    }

    /// Normalises `x` over its last dimension.
    /// Computed in float32 whatever `x`'s dtype, and returned in it.
    pub fn apply(&self, p: &Tree<Tensor>, x: &Tensor) -> Result<Tensor> {
        let dtype = x.dtype();
        let x = x.astype(DType::F32);
        let centred = &x - &mean_last(&x);
        let var = mean_last(&centred.integer_pow(2));
        let normed = &centred * &(var + self.eps).rsqrt();
        Ok((normed * p.leaf("gain")? + p.leaf("bias")?).astype(dtype))
    }
}

/// Root-mean-square normalisation over the last dimension, with a gain (Llama's norm).
#[derive(Debug, Clone, Copy)]
pub struct RmsNorm {
    /// Features.
    pub d: i64,
    /// Added to the mean square.
    pub eps: f64,
}

impl RmsNorm {
    /// Its parameter: `gain` (ones), `[d]`.
    pub fn spec(&self) -> Tree<ParamSpec> {
        Tree::node([("gain", ParamSpec::new(&[self.d], Init::Ones))])
    }

    /// Normalises `x` over its last dimension.
    /// Computed in float32 whatever `x`'s dtype, and returned in it.
    pub fn apply(&self, p: &Tree<Tensor>, x: &Tensor) -> Result<Tensor> {
        let dtype = x.dtype();
        let x = x.astype(DType::F32);
        let ms = mean_last(&x.integer_pow(2));
        Ok((&x * (ms + self.eps).rsqrt() * p.leaf("gain")?).astype(dtype))
    }
}

/// GELU, tanh approximation (GPT-2's).
pub fn gelu(x: &Tensor) -> Tensor {
    let inner = (x + x.integer_pow(3) * 0.044_715) * 0.797_884_560_802_865_4;
    x * 0.5 * (inner.tanh() + 1.0)
}

/// SiLU (swish): `x * sigmoid(x)`.
pub fn silu(x: &Tensor) -> Tensor {
    x * x.logistic()
}

/// The transformer MLP of GPT-2: `fc` to `hidden`, GELU, `proj` back.
#[derive(Debug, Clone, Copy)]
pub struct Mlp {
    /// Model width.
    pub d: i64,
    /// Hidden width.
    pub hidden: i64,
}

impl Mlp {
    fn layers(&self) -> (Linear, Linear) {
        (
            Linear::new(self.d, self.hidden),
            Linear::new(self.hidden, self.d),
        )
    }

    /// Its parameters: `fc` and `proj` (linear layers with biases).
    pub fn spec(&self) -> Tree<ParamSpec> {
        let (fc, proj) = self.layers();
        Tree::node([("fc", fc.spec()), ("proj", proj.spec())])
    }

    /// Applies it to the last dimension of `x`.
    pub fn apply(&self, p: &Tree<Tensor>, x: &Tensor) -> Result<Tensor> {
        let (fc, proj) = self.layers();
        let h = gelu(&fc.apply(p.get("fc")?, x)?);
        proj.apply(p.get("proj")?, &h)
    }
}

/// Llama's gated MLP: `down(silu(gate x) * up x)`, with biases where `bias` (Llama's
/// `mlp_bias`; without them by default).
#[derive(Debug, Clone, Copy)]
pub struct SwiGlu {
    /// Model width.
    pub d: i64,
    /// Hidden width.
    pub hidden: i64,
    /// Whether the three projections have biases.
    pub bias: bool,
}

impl SwiGlu {
    fn layers(&self) -> (Linear, Linear, Linear) {
        let with_bias = |l: Linear| Linear {
            bias: self.bias,
            ..l
        };
        (
            with_bias(Linear::new(self.d, self.hidden)),
            with_bias(Linear::new(self.d, self.hidden)),
            with_bias(Linear::new(self.hidden, self.d)),
        )
    }

    /// Its parameters: `gate`, `up`, `down`.
    pub fn spec(&self) -> Tree<ParamSpec> {
        let (gate, up, down) = self.layers();
        Tree::node([
            ("gate", gate.spec()),
            ("up", up.spec()),
            ("down", down.spec()),
        ])
    }

    /// Applies it to the last dimension of `x`.
    pub fn apply(&self, p: &Tree<Tensor>, x: &Tensor) -> Result<Tensor> {
        let (gate, up, down) = self.layers();
        let h = silu(&gate.apply(p.get("gate")?, x)?) * up.apply(p.get("up")?, x)?;
        down.apply(p.get("down")?, &h)
    }
}

/// Causal self-attention on `[batch, seq, d]` with grouped-query heads (`kv_heads` key/value
/// heads, each shared by `heads / kv_heads` query heads; `kv_heads == heads` is multi-head
/// attention), rotary position embeddings when `rope` is set (Llama) and an optional sliding
/// window (Mistral).
#[derive(Debug, Clone, Copy)]
pub struct Attention {
    /// Model width.
    pub d: i64,
    /// Query heads.
    pub heads: i64,
    /// Key/value heads; they divide `heads`.
    pub kv_heads: i64,
    /// Width of each head (`d / heads` unless a checkpoint says otherwise).
    pub head_dim: i64,
    /// Whether the query, key and value projections have biases.
    pub qkv_bias: bool,
    /// Whether the output projection has a bias.
    pub out_bias: bool,
    /// The rotary embedding, or `None` (GPT-2).
    pub rope: Option<Rope>,
    /// Each position attends to at most this many positions (itself included), or all before it.
    pub window: Option<i64>,
    /// The sequence length the rope's frequencies are computed for (only dynamic scaling
    /// depends on it), or the input's when `None`.
    pub rope_len: Option<i64>,
    /// The kernel `dot_product_attention` asks for.
    pub implementation: tessera_ir::prim::AttentionImpl,
}

impl Attention {
    /// Query heads per key/value head.
    fn group(&self) -> i64 {
        self.heads / self.kv_heads.max(1)
    }

    fn projections(&self) -> (Linear, Linear) {
        let qkv_width = self.kv_heads.saturating_mul(self.group() + 2);
        let qkv = Linear::new(self.d, qkv_width.saturating_mul(self.head_dim));
        let out = Linear::new(self.heads.saturating_mul(self.head_dim), self.d);
        (
            Linear {
                bias: self.qkv_bias,
                ..qkv
            },
            Linear {
                bias: self.out_bias,
                ..out
            },
        )
    }

    /// Its parameters: `qkv` (`[d, kv_heads × (group + 2) × head_dim]`) and `out`
    /// (`[heads × head_dim, d]`). The columns of `qkv` are grouped by key/value head: for each,
    /// its `group = heads / kv_heads` query heads, then its key, then its value, each
    /// `head_dim` wide (with `kv_heads == heads`: `[heads, 3, head_dim]`, head `i`'s query, key
    /// and value side by side). Splitting them evenly over a tensor-parallel axis gives each
    /// device whole groups (Megatron's layout), and the rows of `out` follow the same heads.
    pub fn spec(&self) -> Tree<ParamSpec> {
        let (qkv, out) = self.projections();
        Tree::node([("qkv", qkv.spec()), ("out", out.spec())])
    }

    /// Attends causally over the sequence dimension of `x` (`[batch, seq, d]`): one
    /// `dot_product_attention`, causal (and masked by the sliding window where there is one).
    pub fn apply(&self, p: &Tree<Tensor>, x: &Tensor) -> Result<Tensor> {
        let t = x.shape()[1];
        let positions = x.iota_along(&[t], 0);
        let len = RopeLen::Fixed(self.rope_len.unwrap_or(t));
        let (q, k, v) = self.project(p, x, &positions, len)?;
        let window = self.window.map(|_| self.visible(&positions, &positions));
        let out = self.attention(&q, &k, &v, window.as_ref(), true);
        self.output(p, &out)
    }

    /// `dot_product_attention` with this layer's scale (`1 / sqrt(head_dim)`) and kernel.
    fn attention(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        is_causal: bool,
    ) -> Tensor {
        let params = tessera_ir::prim::AttentionParams {
            scale: 1.0 / (self.head_dim as f64).sqrt(),
            is_causal,
            implementation: self.implementation,
        };
        dot_product_attention_with_stats(q, k, v, mask, params).0
    }

    /// The queries (`[b, heads, t, dh]`; head `kv × group + i` is query `i` of key/value head
    /// `kv`, as in `transformers`), keys and values (`[b, kv_heads, t, dh]`) of `x`
    /// (`[b, t, d]`), rotated by `positions` (`[t]`, integer) with the rope's frequencies for
    /// `rope_len` positions.
    pub fn project(
        &self,
        p: &Tree<Tensor>,
        x: &Tensor,
        positions: &Tensor,
        rope_len: RopeLen<'_>,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let (qkv_layer, _) = self.projections();
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let (h, kv, g, dh) = (self.heads, self.kv_heads, self.group(), self.head_dim);
        let qkv = qkv_layer
            .apply(p.get("qkv")?, x)?
            .reshape(&[b, t, kv, g + 2, dh]);
        let mut q = Tensor::slice_axis(&qkv, 3, 0, g)
            .reshape(&[b, t, h, dh])
            .transpose(&[0, 2, 1, 3]);
        let part = |i: i64| {
            Tensor::slice_axis(&qkv, 3, i, i + 1)
                .reshape(&[b, t, kv, dh])
                .transpose(&[0, 2, 1, 3])
        };
        let (mut k, v) = (part(g), part(g + 1));
        if let Some(rope) = &self.rope {
            q = rope.apply_with(&q, positions, rope_len);
            k = rope.apply_with(&k, positions, rope_len);
        }
        Ok((q, k, v))
    }

    /// Which keys each query sees (`[tq, tk]`, boolean) from their positions (`[tq]`, `[tk]`):
    /// those at or before it, and within the sliding window where there is one.
    pub fn visible(&self, query_positions: &Tensor, key_positions: &Tensor) -> Tensor {
        let (tq, tk) = (query_positions.shape()[0], key_positions.shape()[0]);
        let rows = query_positions.broadcast_in_dim(&[tq, tk], &[0]);
        let cols = key_positions.broadcast_in_dim(&[tq, tk], &[1]);
        let mut visible = rows.ge(&cols);
        if let Some(window) = self.window {
            let near = (&rows - &cols).lt(&rows.full_like_scalar(window as f64));
            visible = visible.binary(tessera_ir::Prim::And, &near);
        }
        visible
    }

    /// The output projection of attended values `out` (`[b, heads, t, dh]`): `[b, t, d]`.
    pub fn output(&self, p: &Tree<Tensor>, out: &Tensor) -> Result<Tensor> {
        let (_, out_layer) = self.projections();
        let (b, t) = (out.shape()[0], out.shape()[2]);
        let out = out
            .transpose(&[0, 2, 1, 3])
            .reshape(&[b, t, self.heads * self.head_dim]);
        out_layer.apply(p.get("out")?, &out)
    }

    /// Attention of queries `q` (`[b, heads, tq, dh]`) over keys and values
    /// (`[b, kv_heads, tk, dh]`) where `visible` (`[tq, tk]`): `[b, heads, tq, dh]`.
    pub fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor, visible: &Tensor) -> Tensor {
        self.attention(q, k, v, Some(visible), false)
    }
}
