//! The byte-level GPT `tessera train --model gpt` trains: token and position embeddings,
//! pre-LayerNorm transformer blocks (multi-head causal attention and a tanh-GELU MLP), a final
//! LayerNorm and an untied head over 256 bytes, with softmax cross-entropy. Stage `s` holds
//! `layers / stages` blocks; stage 0 also the embeddings, the last stage the head and the loss.

use tessera_ir::trace::{Tensor, trace, where_};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};

/// The model's sizes.
#[derive(Debug, Clone, Copy)]
pub struct GptConfig {
    /// Transformer blocks.
    pub layers: usize,
    /// Model width.
    pub d: i64,
    /// Attention heads.
    pub heads: i64,
    /// Tokens per sequence.
    pub seq: i64,
    /// Sequences per microbatch.
    pub rows: i64,
}

const VOCAB: i64 = 256;

/// Parameter shapes in argument order (after the token argument): per block 10 tensors, then
/// the embeddings are placed first and the head last.
pub fn param_shapes(c: &GptConfig) -> Vec<Vec<i64>> {
    let d = c.d;
    let mut shapes = vec![vec![VOCAB, d], vec![c.seq, d]];
    for _ in 0..c.layers {
        shapes.extend([
            vec![d],
            vec![d],
            vec![d, 3 * d],
            vec![d, d],
            vec![d],
            vec![d],
            vec![d, 4 * d],
            vec![4 * d],
            vec![4 * d, d],
            vec![d],
        ]);
    }
    shapes.extend([vec![d], vec![d], vec![d, VOCAB]]);
    shapes
}

fn layer_norm(x: &Tensor, g: &Tensor, b: &Tensor) -> Tensor {
    let rank = x.rank() as i64;
    let axis = rank - 1;
    let mean = x.mean(&[axis]).keep_dims(&[axis], x.rank());
    let centred = x - &mean;
    let var = centred
        .integer_pow(2)
        .mean(&[axis])
        .keep_dims(&[axis], x.rank());
    let normed = &centred * &(var + 1e-5).rsqrt();
    &(&normed * g) + b
}

fn gelu(x: &Tensor) -> Tensor {
    let inner = (x + &(x.integer_pow(3) * 0.044715)) * 0.797_884_560_802_865_4;
    &(x * 0.5) * &(inner.tanh() + 1.0)
}

/// Multi-head causal self-attention on `[rows, seq, d]`.
fn attention(x: &Tensor, wqkv: &Tensor, wo: &Tensor, c: &GptConfig) -> Tensor {
    let (r, t, d, h) = (c.rows, c.seq, c.d, c.heads);
    let dh = d / h;
    let qkv = x
        .reshape(&[r * t, d])
        .matmul(wqkv)
        .reshape(&[r, t, 3, h, dh]);
    let part = |i: i64| {
        let p = Tensor::slice_axis(&qkv, 2, i, i + 1).reshape(&[r, t, h, dh]);
        p.transpose(&[0, 2, 1, 3])
    };
    let (q, k, v) = (part(0), part(1), part(2));
    let scores = q.dot_general(&k, (&[3], &[3]), (&[0, 1], &[0, 1])) / (dh as f64).sqrt();
    let rows = scores.iota_along(&[t, t], 0);
    let cols = scores.iota_along(&[t, t], 1);
    let mask = rows.ge(&cols);
    let masked = where_(&mask, &scores, &scores.full_like_scalar(-1e9));
    let weights = masked.softmax(3);
    let out = weights.dot_general(&v, (&[3], &[2]), (&[0, 1], &[0, 1]));
    out.transpose(&[0, 2, 1, 3])
        .reshape(&[r * t, d])
        .matmul(wo)
        .reshape(&[r, t, d])
}

/// The loss program: `tokens, params..., targets -> mean cross-entropy`, with a stage marker
/// before each stage's first block.
pub fn loss(c: &GptConfig, stages: usize) -> Result<ClosedJaxpr, tessera_ir::IrError> {
    let f = |s: &[i64]| ShapedArray::new(DType::F32, s);
    let tokens = ShapedArray::new(DType::I32, &[c.rows, c.seq]);
    let mut avals = vec![tokens.clone()];
    avals.extend(param_shapes(c).iter().map(|s| f(s)));
    avals.push(tokens);
    let per_stage = c.layers.div_ceil(stages.max(1));
    trace(&avals, |a| {
        let n = a.len();
        let (tok, p, targets) = (&a[0], &a[1..n - 1], &a[n - 1]);
        let (r, t, d) = (c.rows, c.seq, c.d);
        let emb = p[0].take(tok, 0);
        let mut h = &emb + &p[1];
        for l in 0..c.layers {
            if l > 0 && l % per_stage == 0 {
                h = h.enter_stage((l / per_stage) as i64);
            }
            let w = &p[2 + 10 * l..12 + 10 * l];
            let a1 = attention(&layer_norm(&h, &w[0], &w[1]), &w[2], &w[3], c);
            h = &h + &a1;
            let m = layer_norm(&h, &w[4], &w[5]).reshape(&[r * t, d]);
            let m = gelu(&(m.matmul(&w[6]) + &w[7])).matmul(&w[8]) + &w[9];
            h = &h + &m.reshape(&[r, t, d]);
        }
        let k = 2 + 10 * c.layers;
        let logits = layer_norm(&h, &p[k], &p[k + 1])
            .reshape(&[r * t, d])
            .matmul(&p[k + 2]);
        let picked = (logits.log_softmax(1) * targets.reshape(&[r * t]).one_hot(VOCAB, DType::F32))
            .sum(&[1]);
        vec![-picked.mean(&[0])]
    })
}

/// Initial parameters: scaled pseudo-random weights, LayerNorm gains 1, biases 0.
pub fn init(c: &GptConfig) -> Result<Vec<Array>, tessera_ir::IrError> {
    param_shapes(c)
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n: i64 = s.iter().product();
            let is_gain = s.len() == 1 && s[0] == c.d && matches!((i + 8) % 10, 0 | 4) && i >= 2;
            let values: Vec<f64> = if s.len() == 1 {
                vec![if is_gain { 1.0 } else { 0.0 }; n as usize]
            } else {
                let scale = 0.5 / (s[0] as f64).sqrt();
                (0..n)
                    .map(|j| ((j as f64 + 1.0) * 0.754_877_666 + i as f64 * 1.3).sin() * scale)
                    .collect()
            };
            Array::new(DType::F32, s, values)
        })
        .collect()
}
