//! Sorting in the tracing API, named as in JAX: [`sort`] (`lax.sort`: several
//! operands sorted together by their first `num_keys`), and `Tensor::sort`, `Tensor::argsort`
//! (`jnp.argsort`: the stable sort of the array with an `iota`), `Tensor::top_k`.

use super::Tensor;
use crate::params::{ParamValue, Params};
use crate::prim::Prim;

/// `lax.sort`: `operands` (one shape) sorted along `dimension` by the first `num_keys` of them,
/// compared lexicographically (floats ascending, NaN last).
pub fn sort(operands: &[&Tensor], dimension: i64, num_keys: usize, is_stable: bool) -> Vec<Tensor> {
    let params = Params::new()
        .with("dimension", ParamValue::Int(dimension))
        .with("is_stable", ParamValue::Bool(is_stable))
        .with("num_keys", ParamValue::Int(num_keys as i64));
    Tensor::bind(Prim::Sort, params, operands)
}

impl Tensor {
    /// This array sorted along `axis` (`jnp.sort`).
    pub fn sort(&self, axis: i64) -> Tensor {
        sort(&[self], self.normal_axis(axis), 1, true).remove(0)
    }

    /// The `int32` indices that sort this array along `axis`, ties in order (`jnp.argsort`).
    pub fn argsort(&self, axis: i64) -> Tensor {
        let axis = self.normal_axis(axis);
        let iota = self.iota_along(self.shape(), axis);
        sort(&[self, &iota], axis, 1, true).remove(1)
    }

    /// The `k` largest values along the last axis and their `int32` indices, ties to the lower
    /// index (`lax.top_k`).
    pub fn top_k(&self, k: i64) -> (Tensor, Tensor) {
        let params = Params::new()
            .with("axis", ParamValue::Int(self.rank() as i64 - 1))
            .with("k", ParamValue::Int(k));
        let mut outs = Tensor::bind(Prim::TopK, params, &[self]);
        let indices = outs.pop().unwrap_or_else(|| self.clone());
        let values = outs.pop().unwrap_or_else(|| self.clone());
        (values, indices)
    }

    fn normal_axis(&self, axis: i64) -> i64 {
        if axis < 0 {
            axis + self.rank() as i64
        } else {
            axis
        }
    }
}
