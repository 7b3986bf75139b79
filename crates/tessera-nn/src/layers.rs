//! Layers: each declares its parameters as a [`Tree`] of [`ParamSpec`]s and applies itself to a
//! tree of traced tensors of that structure. Inputs may have any leading dimensions; the last is
//! the feature dimension.

use tessera_ir::trace::{Tensor, where_};
use tessera_ir::{DType, ShapedArray};

use crate::error::Result;
use crate::init::Init;
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

/// Llama's gated MLP: `down(silu(gate x) * up x)`, without biases.
#[derive(Debug, Clone, Copy)]
pub struct SwiGlu {
    /// Model width.
    pub d: i64,
    /// Hidden width.
    pub hidden: i64,
}

impl SwiGlu {
    fn layers(&self) -> (Linear, Linear, Linear) {
        (
            Linear::new(self.d, self.hidden).no_bias(),
            Linear::new(self.d, self.hidden).no_bias(),
            Linear::new(self.hidden, self.d).no_bias(),
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

/// Causal multi-head self-attention on `[batch, seq, d]`, with rotary position embeddings when
/// `rope_base` is set (Llama) and biases when `bias` is (GPT-2).
#[derive(Debug, Clone, Copy)]
pub struct Attention {
    /// Model width.
    pub d: i64,
    /// Heads; they divide `d`.
    pub heads: i64,
    /// Whether the projections have biases.
    pub bias: bool,
    /// The base of the rotary embedding's frequencies (10000 in Llama), or `None`.
    pub rope_base: Option<f64>,
}

impl Attention {
    fn projections(&self) -> (Linear, Linear) {
        let (qkv, out) = (
            Linear::new(self.d, self.d.saturating_mul(3)),
            Linear::new(self.d, self.d),
        );
        if self.bias {
            (qkv, out)
        } else {
            (qkv.no_bias(), out.no_bias())
        }
    }

    /// Its parameters: `qkv` (`[d, 3d]`) and `out` (`[d, d]`). The columns of `qkv` are grouped
    /// by head (head-major: head `i`'s query, key and value columns side by side, `[heads, 3,
    /// d / heads]`), so splitting them evenly over a tensor-parallel axis gives each device
    /// whole heads (Megatron's layout), and the rows of `out` follow the same heads.
    pub fn spec(&self) -> Tree<ParamSpec> {
        let (qkv, out) = self.projections();
        Tree::node([("qkv", qkv.spec()), ("out", out.spec())])
    }

    /// Attends causally over the sequence dimension of `x` (`[batch, seq, d]`).
    pub fn apply(&self, p: &Tree<Tensor>, x: &Tensor) -> Result<Tensor> {
        let (qkv_layer, out_layer) = self.projections();
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let (h, dh) = (self.heads, self.d / self.heads);
        let qkv = qkv_layer
            .apply(p.get("qkv")?, x)?
            .reshape(&[b, t, h, 3, dh]);
        let part = |i: i64| {
            Tensor::slice_axis(&qkv, 3, i, i + 1)
                .reshape(&[b, t, h, dh])
                .transpose(&[0, 2, 1, 3])
        };
        let (mut q, mut k, v) = (part(0), part(1), part(2));
        if let Some(base) = self.rope_base {
            q = rotary(&q, base);
            k = rotary(&k, base);
        }
        let scores = q.dot_general(&k, (&[3], &[3]), (&[0, 1], &[0, 1])) / (dh as f64).sqrt();
        let rows = scores.iota_along(&[t, t], 0);
        let cols = scores.iota_along(&[t, t], 1);
        // The softmax in float32 whatever the compute dtype.
        let scores = scores.astype(DType::F32);
        let masked = where_(&rows.ge(&cols), &scores, &scores.full_like_scalar(-1e9));
        let weights = masked.softmax(3).astype(v.dtype());
        let out = weights
            .dot_general(&v, (&[3], &[2]), (&[0, 1], &[0, 1]))
            .transpose(&[0, 2, 1, 3])
            .reshape(&[b, t, self.d]);
        out_layer.apply(p.get("out")?, &out)
    }
}

/// Rotary position embedding of `x` (`[batch, heads, seq, head_dim]`), rotating the two halves
/// of each head (the GPT-NeoX / Llama-in-JAX layout): `x cos + rotate_half(x) sin`.
pub fn rotary(x: &Tensor, base: f64) -> Tensor {
    let (t, dh) = (x.shape()[2], x.shape()[3]);
    let half = dh / 2;
    let position = x.iota_along(&[t, dh], 0).astype(DType::F32);
    let column = x.iota_along(&[t, dh], 1);
    let pair = column
        .binary(tessera_ir::Prim::Rem, &column.full_like_scalar(half as f64))
        .astype(DType::F32);
    let inv_freq = (pair * (-2.0 * base.ln() / dh as f64)).exp();
    let angle = position * inv_freq;
    // rotate_half(x) = concat(-x2, x1) along the head dimension.
    let (x1, x2) = (
        Tensor::slice_axis(x, 3, 0, half),
        Tensor::slice_axis(x, 3, half, dh),
    );
    let rotated = (-&x2).concatenate(&[&x1], 3);
    x * angle.cos().astype(x.dtype()) + rotated * angle.sin().astype(x.dtype())
}
