//! `jax.numpy`-like helpers built from the operations: `mean`, `softmax`, `log_softmax`,
//! `logsumexp`, `one_hot`, `take`, `where_`, `dot_product_attention`.

use super::Tensor;
use crate::dtype::DType;
use crate::params::{ParamValue, Params};
use crate::prim::{GatherDims, GatherParams, GatherScatterMode, Prim};

impl Tensor {
    /// Mean over `axes`.
    pub fn mean(&self, axes: &[i64]) -> Tensor {
        let rank = self.rank() as i64;
        let count: i64 = axes
            .iter()
            .map(|&a| {
                self.shape()
                    .get(((a + rank) % rank.max(1)) as usize)
                    .copied()
                    .unwrap_or(1)
            })
            .product();
        self.sum(axes) / count as f64
    }

    /// `log(sum(exp(x)))` over `axis`, computed stably (the max is subtracted under
    /// `stop_gradient`, as JAX does).
    pub fn logsumexp(&self, axis: i64) -> Tensor {
        let rank = self.rank();
        let m = self.max(&[axis]).keep_dims(&[axis], rank).stop_gradient();
        let shifted = self - &m;
        shifted.exp().sum(&[axis]).keep_dims(&[axis], rank).log() + m
    }

    /// `x - logsumexp(x)` over `axis`.
    pub fn log_softmax(&self, axis: i64) -> Tensor {
        let rank = self.rank();
        let m = self.max(&[axis]).keep_dims(&[axis], rank).stop_gradient();
        let shifted = self - &m;
        let lse = shifted.exp().sum(&[axis]).keep_dims(&[axis], rank).log();
        shifted - lse
    }

    /// `exp(x) / sum(exp(x))` over `axis`, with the max subtracted first. The max is a
    /// constant to differentiation (as in `jax.nn.softmax`): softmax does not change when its
    /// inputs shift, so its gradient is the same, without the max's own backward pass (an
    /// argmax mask over the whole input).
    ///
    /// The exponentials are scaled by the sum's reciprocal rather than divided by the sum: the
    /// gradient then reads the exponentials (which XLA recomputes from the input and the max)
    /// and the reciprocal (one value per row), never the softmax itself, so the result has no
    /// user but the caller. In mixed precision XLA then writes it once, in the caller's
    /// dtype, as `jax.nn.softmax`'s gradient lets it (a division's gradient reads its result,
    /// which kept a float32 copy of the whole softmax alive for the backward pass).
    pub fn softmax(&self, axis: i64) -> Tensor {
        let rank = self.rank();
        let m = self.max(&[axis]).keep_dims(&[axis], rank).stop_gradient();
        let e = (self - &m).exp();
        let s = e.sum(&[axis]).keep_dims(&[axis], rank);
        e * (1.0 / s)
    }

    /// One-hot vectors of length `n` for integer class indices, as `dtype`.
    pub fn one_hot(&self, n: i64, dtype: DType) -> Tensor {
        let mut shape = self.shape().to_vec();
        shape.push(n);
        let iota = self.iota(n);
        let mut expanded = self.shape().to_vec();
        expanded.push(1);
        let labels = self.reshape(&expanded);
        labels.eq(&iota).astype(dtype)
    }

    /// An `int32` array of `shape` counting along `dimension`, in this tensor's trace.
    pub fn iota_along(&self, shape: &[i64], dimension: i64) -> Tensor {
        let params = Params::new()
            .with("dimension", ParamValue::Int(dimension))
            .with("dtype", ParamValue::Name("int32".into()))
            .with("shape", ParamValue::ints(shape))
            .with("sharding", ParamValue::Name("None".into()));
        Tensor::bind_nullary(Prim::Iota, params, self)
    }

    /// `jnp.take(self, indices, axis)` in JAX's default mode ("fill"): the slices of this array
    /// at integer `indices` (any shape) along `axis`, of shape
    /// `shape[..axis] ++ indices.shape ++ shape[axis + 1..]`. Negative indices count from the
    /// end; indices still out of range give the dtype's fill value (NaN for floats) and pass no
    /// gradient back.
    pub fn take(&self, indices: &Tensor, axis: i64) -> Tensor {
        self.take_with(indices, axis, GatherScatterMode::FillOrDrop)
    }

    /// [`Tensor::take`] with an explicit mode: `FillOrDrop` (JAX's "fill", negative indices
    /// wrapped once), `Clip` (JAX's "clip": clamped into range) or `PromiseInBounds`.
    pub fn take_with(&self, indices: &Tensor, axis: i64, mode: GatherScatterMode) -> Tensor {
        let rank = self.rank() as i64;
        if !indices.dtype().is_int() || !(-rank..rank).contains(&axis) {
            return self.fail(
                "take",
                format!(
                    "needs integer indices and an axis of the array, got an array {:?}, indices \
                     {} and axis {axis}",
                    self.shape(),
                    indices.aval()
                ),
            );
        }
        let axis = if axis < 0 { axis + rank } else { axis };
        let n = self.shape()[axis as usize];
        let index_dtype = indices.dtype();
        let indices = match mode {
            GatherScatterMode::FillOrDrop => {
                let negative = indices.lt(&indices.literal(0.0, index_dtype));
                let wrapped = indices.binary(Prim::Add, &indices.literal(n as f64, index_dtype));
                where_(&negative, &wrapped, indices)
            }
            GatherScatterMode::Clip | GatherScatterMode::PromiseInBounds => indices.clone(),
        };
        let k = indices.rank() as i64;
        let offset: Vec<i64> = (0..axis).chain(axis + k..rank + k - 1).collect();
        let mut column_shape = indices.shape().to_vec();
        column_shape.push(1);
        let mut sizes = self.shape().to_vec();
        sizes[axis as usize] = 1;
        let params = GatherParams {
            dims: GatherDims {
                offset_dims: offset,
                collapsed_slice_dims: vec![axis],
                start_index_map: vec![axis],
                operand_batching_dims: Vec::new(),
                start_indices_batching_dims: Vec::new(),
            },
            slice_sizes: sizes,
            mode,
            fill_value: None,
            indices_are_sorted: false,
            unique_indices: false,
        }
        .to_params();
        Tensor::bind1(
            Prim::Gather,
            params,
            &[self, &indices.reshape(&column_shape)],
        )
    }

    /// `iota(n)` in this tensor's trace and integer dtype.
    fn iota(&self, n: i64) -> Tensor {
        let params = Params::new()
            .with("dimension", ParamValue::Int(0))
            .with("dtype", ParamValue::Name(self.dtype().numpy_name().into()))
            .with("shape", ParamValue::ints(&[n]))
            .with("sharding", ParamValue::Name("None".into()));
        Tensor::bind_nullary(Prim::Iota, params, self)
    }
}

/// `where(cond, a, b)`: `a` where `cond` holds, else `b` (`select_n(cond, b, a)`).
pub fn where_(cond: &Tensor, a: &Tensor, b: &Tensor) -> Tensor {
    let shape = broadcast_shape(&[cond.shape(), a.shape(), b.shape()]);
    let Some(shape) = shape else {
        return cond.fail(
            "where",
            format!(
                "shapes {:?}, {:?} and {:?} do not broadcast",
                cond.shape(),
                a.shape(),
                b.shape()
            ),
        );
    };
    let dtype = if a.aval().weak_type {
        b.dtype()
    } else {
        a.dtype()
    };
    let (c, x, y) = (
        cond.broadcast_to(&shape),
        a.astype(dtype).broadcast_to(&shape),
        b.astype(dtype).broadcast_to(&shape),
    );
    Tensor::bind1(Prim::SelectN, Params::new(), &[&c, &y, &x])
}

fn broadcast_shape(shapes: &[&[i64]]) -> Option<Vec<i64>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1i64; rank];
    for s in shapes {
        for (i, &d) in s.iter().enumerate() {
            let slot = &mut out[rank - s.len() + i];
            if *slot == 1 {
                *slot = d;
            } else if d != 1 && d != *slot {
                return None;
            }
        }
    }
    Some(out)
}

/// `dot_product_attention`: softmax attention of `q` (`[batch, heads, tq, dh]`) over `k` and
/// `v` (`[batch, kv_heads, tk, dh|dv]`, `heads` a multiple of `kv_heads`), the scores scaled by
/// `scale`, masked causally when `is_causal` and where `mask` (`bool[tq, tk]`) is false:
/// `[batch, heads, tq, dv]` (JAX's `jax.nn.dot_product_attention` with heads before the
/// sequence). One operation, so that a back end with a fused kernel can run it as one.
pub fn dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
    is_causal: bool,
) -> Tensor {
    let params = crate::prim::AttentionParams {
        scale,
        is_causal,
        implementation: crate::prim::AttentionImpl::Xla,
    };
    dot_product_attention_with_stats(q, k, v, mask, params).0
}

/// [`dot_product_attention`] with all its parameters (the kernel to run it with too), and its
/// softmax statistics: each query's log-sum-exp of its masked, scaled scores
/// (`float32[batch, heads, tq]`), what combining attention over blocks of keys needs.
pub fn dot_product_attention_with_stats(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    params: crate::prim::AttentionParams,
) -> (Tensor, Tensor) {
    let params = params.to_params();
    let operands: Vec<&Tensor> = [q, k, v].into_iter().chain(mask).collect();
    let mut results = Tensor::bind(Prim::DotProductAttention, params, &operands).into_iter();
    let out = results.next().unwrap_or_else(|| q.clone());
    let stats = results.next().unwrap_or_else(|| q.clone());
    (out, stats)
}
