//! Checks that a plugin's cuDNN attention computes what the decomposition computes: for each of
//! [`SHAPES`] (bfloat16 and float16, grouped-query, multi-query and plain heads, causal or not,
//! with a sliding-window or padding mask, head widths 32 to 128, sequences 64 to 2048), the
//! attention's values and the gradients of `sum(attention(q, k, v) * w)` with respect to `q`,
//! `k` and `v`, compiled once with `implementation=cudnn` and once decomposed, on device 0 of the
//! plugin, agree within bfloat16's tolerance ([`TOLERANCE`] of each result's largest magnitude).
//! Only a CUDA plugin runs cuDNN: elsewhere the decomposed programs still run (a failure there
//! is reported) and each shape's cuDNN side is `unsupported`. `tessera check attention` and
//! the GPU bundle's `run.sh` run it.

use tessera_ir::autodiff::value_and_grad_with_aux;
use tessera_ir::prim::{AttentionImpl, AttentionParams};
use tessera_ir::trace::{Tensor, dot_product_attention_with_stats, trace};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_pjrt::Client;

use crate::selfcheck::{Check, Outcome};

/// Results agree when they differ by at most this fraction of the decomposition's largest
/// magnitude (bfloat16 keeps 8 bits of mantissa; the two sides round at different places).
pub const TOLERANCE: f64 = 2e-2;

/// Which keys a query sees beyond `is_causal`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mask {
    /// No mask operand.
    None,
    /// A sliding window: a query sees the keys fewer than this many positions before it.
    Window(i64),
    /// Padding: only the first this many keys are seen.
    Valid(i64),
}

/// One attention to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// What it exercises.
    pub name: &'static str,
    /// Rows.
    pub batch: i64,
    /// Query heads.
    pub heads: i64,
    /// Key/value heads (they divide `heads`).
    pub kv_heads: i64,
    /// Queries.
    pub q_len: i64,
    /// Keys and values.
    pub kv_len: i64,
    /// Width of a head.
    pub head_dim: i64,
    /// Whether a query sees only the keys at or before its position.
    pub causal: bool,
    /// The mask operand.
    pub mask: Mask,
    /// The operands' dtype.
    pub dtype: DType,
}

const fn shape(
    name: &'static str,
    [batch, heads, kv_heads, q_len, kv_len, head_dim]: [i64; 6],
    causal: bool,
    mask: Mask,
    dtype: DType,
) -> Shape {
    Shape {
        name,
        batch,
        heads,
        kv_heads,
        q_len,
        kv_len,
        head_dim,
        causal,
        mask,
        dtype,
    }
}

/// The shapes checked, in order.
pub const SHAPES: [Shape; 12] = [
    shape(
        "bf16 grouped causal 128",
        [2, 8, 2, 128, 128, 64],
        true,
        Mask::None,
        DType::BF16,
    ),
    shape(
        "bf16 causal dh128 256",
        [1, 4, 4, 256, 256, 128],
        true,
        Mask::None,
        DType::BF16,
    ),
    shape(
        "f16 non-causal 64",
        [2, 8, 8, 64, 64, 64],
        false,
        Mask::None,
        DType::F16,
    ),
    shape(
        "bf16 32 heads / 8 causal 512",
        [1, 32, 8, 512, 512, 64],
        true,
        Mask::None,
        DType::BF16,
    ),
    shape(
        "bf16 window 16 causal 64",
        [2, 4, 2, 64, 64, 64],
        true,
        Mask::Window(16),
        DType::BF16,
    ),
    shape(
        "f16 padding 100 of 128",
        [1, 8, 8, 128, 128, 64],
        false,
        Mask::Valid(100),
        DType::F16,
    ),
    shape(
        "bf16 grouped causal 1024",
        [4, 16, 4, 1024, 1024, 64],
        true,
        Mask::None,
        DType::BF16,
    ),
    shape(
        "bf16 1B layer causal 2048",
        [1, 32, 8, 2048, 2048, 64],
        true,
        Mask::None,
        DType::BF16,
    ),
    shape(
        "f16 causal dh128 256",
        [2, 16, 16, 256, 256, 128],
        true,
        Mask::None,
        DType::F16,
    ),
    shape(
        "bf16 dh32 causal 96",
        [2, 6, 2, 96, 96, 32],
        true,
        Mask::None,
        DType::BF16,
    ),
    shape(
        "bf16 cross 128 over 256",
        [1, 4, 4, 128, 256, 64],
        false,
        Mask::None,
        DType::BF16,
    ),
    shape(
        "bf16 multi-query window",
        [2, 8, 1, 64, 64, 128],
        true,
        Mask::Window(8),
        DType::BF16,
    ),
];

impl Shape {
    fn operands(&self) -> Vec<ShapedArray> {
        let q = ShapedArray::new(
            self.dtype,
            &[self.batch, self.heads, self.q_len, self.head_dim],
        );
        let kv = [self.batch, self.kv_heads, self.kv_len, self.head_dim];
        let kv = ShapedArray::new(self.dtype, &kv);
        vec![q.clone(), kv.clone(), kv, q]
    }

    /// The boolean mask operand, if any, built from positions.
    fn mask(&self, anchor: &Tensor) -> Option<Tensor> {
        let dims = [self.q_len, self.kv_len];
        let rows = anchor.iota_along(&dims, 0);
        let cols = anchor.iota_along(&dims, 1);
        match self.mask {
            Mask::None => None,
            Mask::Window(w) => Some((&rows - &cols).lt(&rows.full_like_scalar(w as f64))),
            Mask::Valid(n) => Some(cols.lt(&cols.full_like_scalar(n as f64))),
        }
    }

    /// `(q, k, v, w) -> (attention, sum(attention * w))` with `implementation`.
    fn forward(&self, implementation: AttentionImpl) -> Result<ClosedJaxpr, String> {
        let params = AttentionParams {
            scale: 1.0 / (self.head_dim as f64).sqrt(),
            is_causal: self.causal,
            implementation,
        };
        trace(&self.operands(), |a| {
            let mask = self.mask(&a[0]);
            let (out, _) =
                dot_product_attention_with_stats(&a[0], &a[1], &a[2], mask.as_ref(), params);
            let loss = (out.astype(DType::F32) * a[3].astype(DType::F32)).sum(&[0, 1, 2, 3]);
            vec![loss, out]
        })
        .map_err(|e| e.to_string())
    }

    /// The values and the gradients with respect to `q`, `k` and `v`: `[loss, out, dq, dk, dv]`
    /// (the values an auxiliary result, not differentiated).
    fn program(&self, implementation: AttentionImpl) -> Result<ClosedJaxpr, String> {
        let forward = self.forward(implementation)?;
        value_and_grad_with_aux(&forward, &[0, 1, 2]).map_err(|e| e.to_string())
    }

    /// Inputs in [-1, 1], different in every operand.
    pub fn inputs(&self) -> Result<Vec<Array>, String> {
        self.operands()
            .iter()
            .enumerate()
            .map(|(k, a)| {
                let n: i64 = a.shape.iter().product();
                let v = (0..n).map(|i| ((i as f64) * 0.618 + k as f64 * 2.3).sin());
                Array::new(a.dtype, &a.shape, v.collect()).map_err(|e| e.to_string())
            })
            .collect()
    }
}

/// The largest difference between `got` and `want` as a fraction of `want`'s largest magnitude
/// (at least 1e-30), over every result.
pub fn relative_difference(got: &[Array], want: &[Array]) -> Result<f64, String> {
    if got.len() != want.len() {
        return Err(format!("{} results, want {}", got.len(), want.len()));
    }
    let mut worst: f64 = 0.0;
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        if g.shape() != w.shape() {
            return Err(format!(
                "result {k} has shape {:?}, want {:?}",
                g.shape(),
                w.shape()
            ));
        }
        let (g, w) = (g.to_vec(), w.to_vec());
        let scale = w.iter().fold(1e-30_f64, |m, x| m.max(x.abs()));
        for (a, b) in g.iter().zip(&w) {
            let d = (a - b).abs() / scale;
            if !d.is_finite() {
                return Err(format!(
                    "result {k} holds {a} where the decomposition has {b}"
                ));
            }
            worst = worst.max(d);
        }
    }
    Ok(worst)
}

/// Runs each shape `wanted` accepts on device 0 of `client`; `cuda` says whether the plugin runs
/// cuDNN. The outcome's message gives the largest relative difference.
pub fn attention(client: &Client, cuda: bool, wanted: impl Fn(&str) -> bool) -> Vec<Check> {
    SHAPES
        .iter()
        .filter(|s| wanted(s.name))
        .map(|s| Check {
            name: s.name,
            outcome: check(client, cuda, s),
        })
        .collect()
}

fn check(client: &Client, cuda: bool, shape: &Shape) -> Outcome {
    let inputs = match shape.inputs() {
        Ok(inputs) => inputs,
        Err(e) => return Outcome::Failed(format!("the inputs: {e}")),
    };
    let run = |implementation| -> Result<Vec<Array>, String> {
        let program = shape.program(implementation)?;
        crate::jit::run_on_device(client, &program, &inputs, 0).map_err(|e| e.to_string())
    };
    let want = match run(AttentionImpl::Xla) {
        Ok(want) => want,
        Err(e) => return Outcome::Failed(format!("the decomposition: {e}")),
    };
    if !cuda {
        return Outcome::Unsupported(
            "cuDNN runs on CUDA plugins only (the decomposition ran)".into(),
        );
    }
    match run(AttentionImpl::Cudnn).and_then(|got| relative_difference(&got, &want)) {
        Ok(d) if d <= TOLERANCE => Outcome::Passed,
        Ok(d) => Outcome::Failed(format!(
            "cuDNN differs from the decomposition by {d:.3e} of the largest value (at most \
             {TOLERANCE:e})"
        )),
        Err(e) => Outcome::Failed(format!("cuDNN: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shapes_are_valid_attentions_with_gradients() {
        assert!(SHAPES.len() >= 10);
        for s in &SHAPES {
            let p = s.program(AttentionImpl::Cudnn).unwrap();
            // loss, the values, three gradients.
            assert_eq!(p.jaxpr.outvars.len(), 5, "{}", s.name);
        }
    }

    #[test]
    fn the_difference_is_relative_to_the_largest_value() {
        let a = |v: &[f64]| Array::new(DType::F32, &[v.len() as i64], v.to_vec()).unwrap();
        let d = relative_difference(&[a(&[10.0, 0.0])], &[a(&[10.0, 0.1])]).unwrap();
        assert!((d - 0.01).abs() < 1e-9, "{d}");
        assert!(relative_difference(&[a(&[1.0])], &[a(&[1.0, 2.0])]).is_err());
        assert!(relative_difference(&[a(&[f64::NAN])], &[a(&[1.0])]).is_err());
    }
}
