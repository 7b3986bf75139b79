//! `jax.numpy`-like helpers built from the operations: `mean`, `softmax`, `log_softmax`,
//! `logsumexp`, `one_hot`, `where_`.

use super::Tensor;
use crate::dtype::DType;
use crate::params::{ParamValue, Params};
use crate::prim::Prim;

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

    /// `exp(x) / sum(exp(x))` over `axis`, with the max subtracted first.
    pub fn softmax(&self, axis: i64) -> Tensor {
        let rank = self.rank();
        let m = self.max(&[axis]).keep_dims(&[axis], rank);
        let e = (self - &m).exp();
        let s = e.sum(&[axis]).keep_dims(&[axis], rank);
        e / s
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

    /// Rows of this `[n, d]` table at integer `indices` of shape `[k]` (an embedding lookup,
    /// `gather` with clamped indices): `[k, d]`.
    pub fn take(&self, indices: &Tensor) -> Tensor {
        if self.rank() != 2 || indices.rank() != 1 || !indices.dtype().is_int() {
            return self.fail(
                "take",
                format!(
                    "needs a [n, d] table and [k] integer indices, got {:?} and {:?}",
                    self.shape(),
                    indices.shape()
                ),
            );
        }
        let ints = |v: &[i64]| ParamValue::Tuple(v.iter().map(|&x| ParamValue::Int(x)).collect());
        let dims = ParamValue::Record(
            "GatherDimensionNumbers".into(),
            vec![
                ("offset_dims".into(), ints(&[1])),
                ("collapsed_slice_dims".into(), ints(&[0])),
                ("start_index_map".into(), ints(&[0])),
                ("operand_batching_dims".into(), ints(&[])),
                ("start_indices_batching_dims".into(), ints(&[])),
            ],
        );
        let column = indices.reshape(&[indices.shape()[0], 1]);
        let params = Params::new()
            .with("dimension_numbers", dims)
            .with("fill_value", ParamValue::Name("None".into()))
            .with("indices_are_sorted", ParamValue::Bool(false))
            .with("mode", ParamValue::Name("GatherScatterMode.CLIP".into()))
            .with("slice_sizes", ints(&[1, self.shape()[1]]))
            .with("unique_indices", ParamValue::Bool(false));
        Tensor::bind1(Prim::Gather, params, &[self, &column])
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
