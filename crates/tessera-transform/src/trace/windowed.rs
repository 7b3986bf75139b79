//! The tracing API of the cumulative reductions (`jax.lax.cumsum`, `cumprod`, `cummax`,
//! `cummin`, `cumlogsumexp`), the scatters, the windowed reductions and the convolution.

use super::Tensor;
use crate::params::{ParamValue, Params};
use crate::prim::{ConvParams, Prim, ScatterParams, WindowParams};

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

impl Tensor {
    fn scatter_with(
        &self,
        prim: Prim,
        indices: &Tensor,
        updates: &Tensor,
        params: &ScatterParams,
    ) -> Tensor {
        Tensor::bind1(prim, params.to_params(), &[self, indices, updates])
    }

    /// `lax.scatter`: this array with `updates` written at `indices` (dimension numbers and
    /// mode in `params`; with duplicate indices one of the updates wins).
    pub fn scatter(&self, indices: &Tensor, updates: &Tensor, params: &ScatterParams) -> Tensor {
        self.scatter_with(Prim::Scatter, indices, updates, params)
    }

    /// `lax.scatter_add`: `updates` added at `indices`.
    pub fn scatter_add(
        &self,
        indices: &Tensor,
        updates: &Tensor,
        params: &ScatterParams,
    ) -> Tensor {
        self.scatter_with(Prim::ScatterAdd, indices, updates, params)
    }

    /// `lax.scatter_mul`: multiplied by `updates` at `indices`.
    pub fn scatter_mul(
        &self,
        indices: &Tensor,
        updates: &Tensor,
        params: &ScatterParams,
    ) -> Tensor {
        self.scatter_with(Prim::ScatterMul, indices, updates, params)
    }

    /// `lax.scatter_min`: the minimum with `updates` at `indices`.
    pub fn scatter_min(
        &self,
        indices: &Tensor,
        updates: &Tensor,
        params: &ScatterParams,
    ) -> Tensor {
        self.scatter_with(Prim::ScatterMin, indices, updates, params)
    }

    /// `lax.scatter_max`: the maximum with `updates` at `indices`.
    pub fn scatter_max(
        &self,
        indices: &Tensor,
        updates: &Tensor,
        params: &ScatterParams,
    ) -> Tensor {
        self.scatter_with(Prim::ScatterMax, indices, updates, params)
    }
}

impl Tensor {
    /// `lax.reduce_window` with `add`: the sum of each window.
    pub fn reduce_window_sum(&self, window: &WindowParams) -> Tensor {
        Tensor::bind1(Prim::ReduceWindowSum, window.to_params(), &[self])
    }

    /// `lax.reduce_window` with `max` (max pooling).
    pub fn reduce_window_max(&self, window: &WindowParams) -> Tensor {
        Tensor::bind1(Prim::ReduceWindowMax, window.to_params(), &[self])
    }

    /// `lax.reduce_window` with `min`.
    pub fn reduce_window_min(&self, window: &WindowParams) -> Tensor {
        Tensor::bind1(Prim::ReduceWindowMin, window.to_params(), &[self])
    }

    /// `lax.reduce_window(x, init, computation, ...)`: each window folded with `computation`
    /// (traced on two scalars of this dtype) from the scalar `init`.
    pub fn reduce_window(
        &self,
        init: &Tensor,
        computation: impl FnOnce(&Tensor, &Tensor) -> Tensor,
        window: &WindowParams,
    ) -> Tensor {
        let scalar = crate::aval::ShapedArray::scalar(self.dtype());
        let traced = super::trace(&[scalar.clone(), scalar], |a| {
            vec![computation(&a[0], &a[1])]
        });
        let jaxpr = match traced {
            Ok(j) => j,
            Err(e) => return self.fail("reduce_window", format!("in its computation: {e}")),
        };
        let params = window
            .to_params()
            .with("consts", ParamValue::Tuple(Vec::new()))
            .with("jaxpr", ParamValue::Jaxpr(Box::new(jaxpr)));
        let mut sorted = params.into_entries();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        Tensor::bind1(
            Prim::ReduceWindow,
            Params::from_entries(sorted),
            &[self, init],
        )
    }
}

impl Tensor {
    /// `lax.conv_general_dilated(lhs, rhs, ...)` with every parameter in `params` (JAX's
    /// printed defaults: no precision, no output sharding).
    pub fn conv_general_dilated(&self, rhs: &Tensor, params: &ConvParams) -> Tensor {
        let base = Params::new()
            .with("out_sharding", ParamValue::Name("None".into()))
            .with("precision", ParamValue::Name("None".into()));
        let mut sorted = params.write(&base).into_entries();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        Tensor::bind1(
            Prim::ConvGeneralDilated,
            Params::from_entries(sorted),
            &[self, rhs],
        )
    }

    /// `lax.conv(lhs, rhs, window_strides, padding)`: an `NCHW` input and an `OIHW` kernel
    /// (any number of spatial dimensions), no dilation, one group.
    pub fn conv(&self, rhs: &Tensor, window_strides: &[i64], padding: &[(i64, i64)]) -> Tensor {
        let rank = self.rank();
        let spatial = rank.saturating_sub(2);
        let spec: Vec<usize> = (0..rank).collect();
        let params = ConvParams {
            window_strides: window_strides.to_vec(),
            padding: padding.to_vec(),
            lhs_dilation: vec![1; spatial],
            rhs_dilation: vec![1; spatial],
            lhs_spec: spec.clone(),
            rhs_spec: spec.clone(),
            out_spec: spec,
            feature_group_count: 1,
            batch_group_count: 1,
            preferred_element_type: None,
        };
        self.conv_general_dilated(rhs, &params)
    }
}
