//! The tracing API of the cumulative reductions (`jax.lax.cumsum`, `cumprod`, `cummax`,
//! `cummin`, `cumlogsumexp`), the scatters, the windowed reductions and the convolution.

use super::Tensor;
use crate::params::{ParamValue, Params};
use crate::prim::Prim;

impl Tensor {
    fn cumulative(&self, prim: Prim, axis: i64, reverse: bool) -> Tensor {
        let params = Params::new()
            .with("axis", ParamValue::Int(axis))
            .with("reverse", ParamValue::Bool(reverse));
        Tensor::bind1(prim, params, &[self])
    }

    /// `lax.cumsum(x, axis, reverse)`: running sums along `axis` (from the end when `reverse`).
    pub fn cumsum(&self, axis: i64, reverse: bool) -> Tensor {
        self.cumulative(Prim::Cumsum, axis, reverse)
    }

    /// `lax.cumprod(x, axis, reverse)`: running products.
    pub fn cumprod(&self, axis: i64, reverse: bool) -> Tensor {
        self.cumulative(Prim::Cumprod, axis, reverse)
    }

    /// `lax.cummax(x, axis, reverse)`: running maxima.
    pub fn cummax(&self, axis: i64, reverse: bool) -> Tensor {
        self.cumulative(Prim::Cummax, axis, reverse)
    }

    /// `lax.cummin(x, axis, reverse)`: running minima.
    pub fn cummin(&self, axis: i64, reverse: bool) -> Tensor {
        self.cumulative(Prim::Cummin, axis, reverse)
    }

    /// `lax.cumlogsumexp(x, axis, reverse)`: running `log(sum(exp(x)))`.
    pub fn cumlogsumexp(&self, axis: i64, reverse: bool) -> Tensor {
        self.cumulative(Prim::Cumlogsumexp, axis, reverse)
    }
}
