//! `jax.numpy`-like helpers built from [`Tensor`] operations.

use super::Tensor;
use super::ops::{iota, where_};
use crate::types::DType;

/// Mean over `axes`.
pub fn mean(x: &Tensor, axes: &[isize], keepdims: bool) -> Tensor {
    let n: usize = axes
        .iter()
        .filter_map(|&a| x.axis("mean", a))
        .map(|a| x.shape()[a])
        .product();
    x.sum(axes, keepdims) / n as f64
}

/// `log(sum(exp(x), axis))`, computed stably (the maximum is subtracted under `stop_gradient`).
pub fn logsumexp(x: &Tensor, axis: isize, keepdims: bool) -> Tensor {
    let m = x.max(&[axis], true).stop_gradient();
    let s = (x - &m).exp().sum(&[axis], true).log() + &m;
    if keepdims {
        return s;
    }
    let Some(a) = x.axis("logsumexp", axis) else {
        return s;
    };
    let shape: Vec<usize> = (0..x.ndim())
        .filter(|&d| d != a)
        .map(|d| x.shape()[d])
        .collect();
    s.reshape(&shape)
}

/// `x - logsumexp(x)` along `axis` (JAX's `jax.nn.log_softmax`).
pub fn log_softmax(x: &Tensor, axis: isize) -> Tensor {
    let shifted = x - x.max(&[axis], true).stop_gradient();
    let lse = shifted.exp().sum(&[axis], true).log();
    shifted - lse
}

/// `exp(x) / sum(exp(x))` along `axis`, with the maximum subtracted first (as
/// `jax.nn.softmax`, whose jaxpr has no `stop_gradient`).
pub fn softmax(x: &Tensor, axis: isize) -> Tensor {
    let e = (x - x.max(&[axis], true)).exp();
    &e / e.sum(&[axis], true)
}

/// One-hot encoding of integer `x` into `n` classes along a new last axis.
pub fn one_hot(x: &Tensor, n: usize, dtype: DType) -> Tensor {
    let r = x.ndim();
    let mut shape = x.shape().to_vec();
    shape.push(1);
    let xi = x.broadcast_in_dim(&shape, &(0..r).collect::<Vec<_>>());
    let mut ishape = vec![1; r];
    ishape.push(n);
    let classes = iota(x.dtype(), &[n], 0).broadcast_in_dim(&ishape, &[r]);
    xi.eq(&classes).astype(dtype)
}

/// `jnp.where`.
pub fn where_cond(cond: &Tensor, x: &Tensor, y: &Tensor) -> Tensor {
    where_(cond, x, y)
}
