//! `dot_product_attention` and its backward on host arrays, in float64: per batch row and query
//! head, the scaled scores against the head's key/value head, masked (causally and/or by the
//! mask operand) with -1e9 as the decomposition masks them, softmax, then the weighted values;
//! the backward from the softmax's gradient (`dS = P ⊙ (dP − rowsum(P ⊙ dP))`), the weights
//! computed again (the statistics operand is not read).

use ndarray::{ArrayD, IxDyn};

use crate::array::Array;
use crate::aval::ShapedArray;
use crate::error::{Result, type_error};
use crate::params::Params;
use crate::prim::attention::{AttentionParams, operands};
use crate::prim::{AttentionOp, Prim};

/// What a masked score becomes (as `tessera_nn`'s attention and the decomposition mask).
const MASKED: f64 = -1e9;

pub(super) fn eval(
    prim: Prim,
    op: AttentionOp,
    params: &Params,
    inputs: &[Array],
    outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    let p = AttentionParams::read(prim, params)?;
    let (q, k, v, mask) = operands(op, inputs)
        .ok_or_else(|| type_error(prim.name(), format!("{} operands", inputs.len())))?;
    let (q, k, v) = (q.values(), k.values(), v.values());
    let mask = mask.map(Array::values);
    let probs = Probabilities::new(&q, &k, mask.as_ref(), p);
    let out_dtype = |i: usize| outputs.get(i).map_or(inputs[0].dtype(), |o| o.dtype);
    match op {
        AttentionOp::Forward => Ok(vec![
            Array::from_values(out_dtype(0), probs.apply(&v)),
            Array::from_values(out_dtype(1), probs.lse.clone()),
        ]),
        AttentionOp::Backward => {
            let ct = inputs[inputs.len() - 1].values();
            let (dq, dk, dv) = probs.backward(&q, &k, &v, &ct);
            Ok(vec![
                Array::from_values(out_dtype(0), dq),
                Array::from_values(out_dtype(1), dk),
                Array::from_values(out_dtype(2), dv),
            ])
        }
    }
}

/// The softmax weights `[b, heads, tq, tk]`, their log-sum-exp, and what the rules need of the
/// shapes.
struct Probabilities {
    p: ArrayD<f64>,
    lse: ArrayD<f64>,
    group: usize,
    scale: f64,
}

impl Probabilities {
    fn new(
        q: &ArrayD<f64>,
        k: &ArrayD<f64>,
        mask: Option<&ArrayD<f64>>,
        params: AttentionParams,
    ) -> Probabilities {
        let (b, h, tq, dh) = (q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]);
        let (kv, tk) = (k.shape()[1], k.shape()[2]);
        let group = h / kv.max(1);
        let mut p = ArrayD::zeros(IxDyn(&[b, h, tq, tk]));
        let mut lse = ArrayD::zeros(IxDyn(&[b, h, tq]));
        for (bi, hi, i) in iproduct(b, h, tq) {
            let kvh = hi / group.max(1);
            let mut row: Vec<f64> = (0..tk)
                .map(|j| {
                    let seen =
                        (!params.is_causal || j <= i) && mask.is_none_or(|m| m[[i, j]] != 0.0);
                    let dot: f64 = (0..dh)
                        .map(|d| q[[bi, hi, i, d]] * k[[bi, kvh, j, d]])
                        .sum();
                    if seen { dot * params.scale } else { MASKED }
                })
                .collect();
            let top = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            row.iter_mut().for_each(|s| *s = (*s - top).exp());
            let total: f64 = row.iter().sum();
            lse[[bi, hi, i]] = top + total.ln();
            for (j, e) in row.into_iter().enumerate() {
                p[[bi, hi, i, j]] = e / total;
            }
        }
        Probabilities {
            p,
            lse,
            group,
            scale: params.scale,
        }
    }

    /// The weighted values `[b, heads, tq, dv]`.
    fn apply(&self, v: &ArrayD<f64>) -> ArrayD<f64> {
        let s = self.p.shape();
        let (b, h, tq, tk) = (s[0], s[1], s[2], s[3]);
        let dv = v.shape()[3];
        let mut out = ArrayD::zeros(IxDyn(&[b, h, tq, dv]));
        for (bi, hi, i) in iproduct(b, h, tq) {
            let kvh = hi / self.group.max(1);
            for e in 0..dv {
                out[[bi, hi, i, e]] = (0..tk)
                    .map(|j| self.p[[bi, hi, i, j]] * v[[bi, kvh, j, e]])
                    .sum();
            }
        }
        out
    }

    /// The cotangents of `q`, `k` and `v` from the result's cotangent `g`.
    fn backward(
        &self,
        q: &ArrayD<f64>,
        k: &ArrayD<f64>,
        v: &ArrayD<f64>,
        g: &ArrayD<f64>,
    ) -> (ArrayD<f64>, ArrayD<f64>, ArrayD<f64>) {
        let s = self.p.shape();
        let (b, h, tq, tk) = (s[0], s[1], s[2], s[3]);
        let (dh, dv) = (q.shape()[3], v.shape()[3]);
        let mut dq = ArrayD::zeros(q.raw_dim());
        let mut dk = ArrayD::zeros(k.raw_dim());
        let mut dvs = ArrayD::zeros(v.raw_dim());
        for (bi, hi, i) in iproduct(b, h, tq) {
            let kvh = hi / self.group.max(1);
            let p = |j: usize| self.p[[bi, hi, i, j]];
            let dp: Vec<f64> = (0..tk)
                .map(|j| {
                    (0..dv)
                        .map(|e| g[[bi, hi, i, e]] * v[[bi, kvh, j, e]])
                        .sum()
                })
                .collect();
            let mean: f64 = (0..tk).map(|j| p(j) * dp[j]).sum();
            for j in 0..tk {
                for e in 0..dv {
                    dvs[[bi, kvh, j, e]] += p(j) * g[[bi, hi, i, e]];
                }
                let ds = p(j) * (dp[j] - mean) * self.scale;
                for d in 0..dh {
                    dq[[bi, hi, i, d]] += ds * k[[bi, kvh, j, d]];
                    dk[[bi, kvh, j, d]] += ds * q[[bi, hi, i, d]];
                }
            }
        }
        (dq, dk, dvs)
    }
}

/// Every `(batch, head, query)` index.
fn iproduct(b: usize, h: usize, t: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    (0..b).flat_map(move |bi| (0..h).flat_map(move |hi| (0..t).map(move |i| (bi, hi, i))))
}
