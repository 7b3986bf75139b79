//! `dot_product_attention` and its backward `dot_product_attention_bwd`: softmax attention of
//! queries `q` (`[batch, heads, tq, dh]`) over keys `k` and values `v` (`[batch, kv_heads, tk,
//! dh]` and `[batch, kv_heads, tk, dv]`, grouped-query heads: each key/value head serves
//! `heads / kv_heads` consecutive query heads), the scores scaled by `scale`, masked causally
//! (`is_causal`: a query at position `i` sees the keys up to `i`) and/or by a boolean `mask`
//! operand (`[tq, tk]`, true where a query sees a key), softmax in float32: the results are
//! the attended values `[batch, heads, tq, dv]` in `q`'s dtype and the softmax statistics, the
//! log-sum-exp of each query's masked, scaled scores (`float32[batch, heads, tq]`; float64 for
//! float64 operands), which a
//! fused backward reads instead of computing the scores' normaliser again (JAX's
//! `jax.nn.dot_product_attention`, in the heads-before-sequence layout the model library uses).
//! The backward takes the forward's operands, its two results and the values' cotangent and
//! gives the cotangents of `q`, `k`, `v` (what cuDNN's fused backward computes; elsewhere the
//! decomposition's gradient).
//!
//! This file holds the parameters' one reader and the shape rule; the interpretation is in
//! `tessera-interp`, the decomposition every other rule and the CPU lowering use is
//! `tessera_transform::programs::attention_program`.

use super::{AttentionOp, Prim};
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{IrError, Result, type_error};
use crate::program::params::{ParamValue, Params};

/// Which kernel runs the attention (JAX's `implementation`): the decomposition XLA compiles
/// (`xla`, the default), or cuDNN's fused flash attention where a CUDA plugin and the shapes
/// allow (`cudnn`; the decomposition elsewhere).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AttentionImpl {
    /// The decomposition.
    #[default]
    Xla,
    /// cuDNN's fused kernels.
    Cudnn,
}

impl AttentionImpl {
    /// The parameter's text.
    pub fn name(self) -> &'static str {
        match self {
            AttentionImpl::Xla => "xla",
            AttentionImpl::Cudnn => "cudnn",
        }
    }
}

/// The parameters of both primitives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionParams {
    /// The scores' scale (usually `1 / sqrt(dh)`).
    pub scale: f64,
    /// Whether a query sees only the keys at or before its position.
    pub is_causal: bool,
    /// The kernel asked for.
    pub implementation: AttentionImpl,
}

impl AttentionParams {
    /// The one reader of `scale` and `is_causal`.
    pub fn read(prim: Prim, params: &Params) -> Result<AttentionParams> {
        let scale = match params.get("scale") {
            Some(ParamValue::Float(v, _)) => Some(*v),
            Some(ParamValue::Int(v)) => Some(*v as f64),
            Some(_) | None => None,
        }
        .ok_or_else(|| {
            type_error(
                prim.name(),
                "needs a float parameter `scale` (e.g. 0.125 = 1/sqrt(64))".to_string(),
            )
        })?;
        if !scale.is_finite() {
            return Err(type_error(
                prim.name(),
                format!("scale {scale} is not finite"),
            ));
        }
        let implementation = match params.get("implementation") {
            None => AttentionImpl::Xla,
            Some(ParamValue::Name(n)) if n == "xla" || n == "None" => AttentionImpl::Xla,
            Some(ParamValue::Name(n)) if n == "cudnn" => AttentionImpl::Cudnn,
            Some(other) => {
                return Err(type_error(
                    prim.name(),
                    format!("implementation {other} is neither xla nor cudnn"),
                ));
            }
        };
        Ok(AttentionParams {
            scale,
            is_causal: params.bool(prim.name(), "is_causal")?,
            implementation,
        })
    }

    /// The parameters as the primitives carry them.
    pub fn to_params(self) -> Params {
        Params::new()
            .with(
                "scale",
                ParamValue::Float(self.scale, crate::program::print::python_float(self.scale)),
            )
            .with("is_causal", ParamValue::Bool(self.is_causal))
            .with(
                "implementation",
                ParamValue::Name(self.implementation.name().to_string()),
            )
    }
}

impl AttentionOp {
    /// The primitive of this member of the family.
    pub fn prim(self) -> Prim {
        match self {
            AttentionOp::Forward => Prim::DotProductAttention,
            AttentionOp::Backward => Prim::DotProductAttentionBwd,
        }
    }

    /// The member `prim` is: the backward for `dot_product_attention_bwd`, else the forward.
    pub fn of(prim: Prim) -> AttentionOp {
        if prim == Prim::DotProductAttentionBwd {
            AttentionOp::Backward
        } else {
            AttentionOp::Forward
        }
    }
}

/// Operands the backward takes after the forward's: its values, its statistics and the
/// values' cotangent.
pub const BACKWARD_EXTRA: usize = 3;

/// The forward's operands in an operand list: `(q, k, v, mask)`; the backward's list goes on
/// with the forward's two results and the values' cotangent.
pub fn operands<T>(op: AttentionOp, inputs: &[T]) -> Option<(&T, &T, &T, Option<&T>)> {
    let forward = match op {
        AttentionOp::Forward => inputs,
        AttentionOp::Backward => inputs.get(..inputs.len().checked_sub(BACKWARD_EXTRA)?)?,
    };
    if let [q, k, v] = forward {
        return Some((q, k, v, None));
    }
    if let [q, k, v, mask] = forward {
        return Some((q, k, v, Some(mask)));
    }
    None
}

/// The softmax's dtype, and the statistics': float32, or float64 for float64 operands.
pub fn stats_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

pub(super) fn abstract_eval(
    prim: Prim,
    op: AttentionOp,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    AttentionParams::read(prim, params)?;
    let fail = |message: String| -> IrError { type_error(prim.name(), message) };
    let (q, k, v, mask) = operands(op, inputs).ok_or_else(|| {
        fail(format!(
            "takes q, k, v and an optional boolean mask{}, got {} operands",
            match op {
                AttentionOp::Forward => "",
                AttentionOp::Backward => {
                    ", then the forward's values and statistics and the values' cotangent"
                }
            },
            inputs.len()
        ))
    })?;
    if q.rank() != 4 || k.rank() != 4 || v.rank() != 4 {
        return Err(fail(format!(
            "q, k and v are [batch, heads, seq, head_dim]; got {q}, {k}, {v}"
        )));
    }
    let (b, h, tq, dh) = (q.shape[0], q.shape[1], q.shape[2], q.shape[3]);
    let (kv, tk) = (k.shape[1], k.shape[2]);
    let dv = v.shape[3];
    if !q.dtype.is_float() || k.dtype != q.dtype || v.dtype != q.dtype {
        return Err(fail(format!(
            "q, k and v need one float dtype; got {q}, {k}, {v}"
        )));
    }
    if k.shape[0] != b
        || v.shape[0] != b
        || k.shape[3] != dh
        || v.shape[1] != kv
        || v.shape[2] != tk
    {
        return Err(fail(format!(
            "k must be [{b}, kv_heads, tk, {dh}] and v [{b}, kv_heads, tk, dv] with k's heads \
             and length; got {q}, {k}, {v}"
        )));
    }
    if kv == 0 || h % kv != 0 {
        return Err(fail(format!(
            "the {kv} key/value heads must divide the {h} query heads"
        )));
    }
    if let Some(mask) = mask
        && (mask.dtype != DType::Bool || mask.shape != [tq, tk])
    {
        return Err(fail(format!(
            "the mask must be bool[{tq},{tk}]; got {mask}"
        )));
    }
    if let Some(shards) = super::AttentionShards::read(prim, params)? {
        shards.check_sizes(prim, b, h, kv)?;
    }
    let out = ShapedArray::new(q.dtype, &[b, h, tq, dv]);
    let stats = ShapedArray::new(stats_dtype(q.dtype), &[b, h, tq]);
    match op {
        AttentionOp::Forward => Ok(vec![out, stats]),
        AttentionOp::Backward => {
            let n = inputs.len();
            let (result, lse, ct) = (&inputs[n - 3], &inputs[n - 2], &inputs[n - 1]);
            if !result.same_type(&out) || !lse.same_type(&stats) || !ct.same_type(&out) {
                return Err(fail(format!(
                    "the forward's values, statistics and the values' cotangent must be {out}, \
                     {stats} and {out}; got {result}, {lse}, {ct}"
                )));
            }
            Ok(vec![
                ShapedArray::new(q.dtype, &q.shape),
                ShapedArray::new(k.dtype, &k.shape),
                ShapedArray::new(v.dtype, &v.shape),
            ])
        }
    }
}
