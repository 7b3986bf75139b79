//! Derivatives of `conv_general_dilated`, as JAX computes them: bilinear forward mode, and the
//! transposes `_conv_general_dilated_transpose_lhs` (a convolution of the cotangent with the
//! spatially reversed kernel, strides and input dilation swapped) and `_rhs` (a convolution of
//! the input with the cotangent), with feature and batch groups moved between dimensions by
//! reshapes.

use crate::params::Params;
use crate::prim::{ConvParams, Prim};
use crate::programs::conv::{axis_into, axis_out_of, conv};
use crate::trace::Tensor;

fn dilate(n: i64, d: i64) -> i64 {
    if n == 0 { 0 } else { 1 + d * (n - 1) }
}

fn transposed(spec: &[usize]) -> Vec<usize> {
    let mut t = spec.to_vec();
    t.swap(0, 1);
    t
}

/// The tangent of a convolution: `conv(dl, r) + conv(l, dr)`.
pub(super) fn conv_jvp(
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    ts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let bind = |l: &Tensor, r: &Tensor| {
        Tensor::bind_typed(
            Prim::ConvGeneralDilated,
            params.clone(),
            &[l, r],
            Some(y[0].aval().clone()),
        )
        .remove(0)
    };
    let a = ts[0].as_ref().map(|t| bind(t, &x[1]));
    let b = ts[1].as_ref().map(|t| bind(&x[0], t));
    vec![match (a, b) {
        (Some(a), Some(b)) => Some(&a + &b),
        (a, None) => a,
        (None, b) => b,
    }]
}

/// The cotangents of a convolution's input and kernel.
pub(super) fn conv_vjp(params: &Params, x: &[Tensor], g: &Tensor) -> Vec<Option<Tensor>> {
    let c = match ConvParams::read(params, x[0].rank()) {
        Ok(c) => c,
        Err(e) => return vec![Some(g.fail("conv_general_dilated", format!("in its VJP: {e}"))); 2],
    };
    let (lhs, rhs) = (&x[0], &x[1]);
    let dl = lhs
        .dtype()
        .is_float()
        .then(|| transpose_lhs(params, &c, g, lhs, rhs).astype(lhs.dtype()));
    let dr = rhs
        .dtype()
        .is_float()
        .then(|| transpose_rhs(params, &c, g, lhs, rhs).astype(rhs.dtype()));
    vec![dl, dr]
}

fn spatial(spec: &[usize], shape: &[i64]) -> Vec<i64> {
    spec[2..].iter().map(|&d| shape[d]).collect()
}

/// JAX's `_conv_general_dilated_transpose_lhs`.
fn transpose_lhs(base: &Params, c: &ConvParams, g: &Tensor, lhs: &Tensor, rhs: &Tensor) -> Tensor {
    let (rs, ls) = (&c.rhs_spec, &c.lhs_spec);
    let mut groups = c.feature_group_count;
    let mut kernel = rhs.clone();
    if c.feature_group_count > 1 || c.batch_group_count > 1 {
        let count = c.feature_group_count.max(c.batch_group_count);
        kernel = axis_out_of(rs[0], count, &kernel);
        kernel = axis_into(rs[0], rs[1], &kernel);
        groups = count;
    }
    let in_s = spatial(ls, lhs.shape());
    let k_s = spatial(rs, kernel.shape());
    let out_s = spatial(&c.out_spec, g.shape());
    let padding: Vec<(i64, i64)> = (0..in_s.len())
        .map(|s| {
            let lhs_d = dilate(in_s[s], c.lhs_dilation[s]);
            let rhs_d = dilate(k_s[s], c.rhs_dilation[s]);
            let out_d = dilate(out_s[s], c.window_strides[s]);
            let before = rhs_d - c.padding[s].0 - 1;
            (before, lhs_d + rhs_d - 1 - out_d - before)
        })
        .collect();
    for &d in &rs[2..] {
        kernel = crate::programs::flip(&kernel, d);
    }
    let t = ConvParams {
        window_strides: c.lhs_dilation.clone(),
        padding,
        lhs_dilation: c.window_strides.clone(),
        rhs_dilation: c.rhs_dilation.clone(),
        lhs_spec: c.out_spec.clone(),
        rhs_spec: transposed(rs),
        out_spec: ls.clone(),
        feature_group_count: groups,
        batch_group_count: 1,
        preferred_element_type: c.preferred_element_type,
    };
    let mut out = conv(base, &t, g, &kernel);
    if c.batch_group_count > 1 {
        out = axis_out_of(ls[1], c.batch_group_count, &out);
        out = axis_into(ls[1], ls[0], &out);
    }
    out
}

/// JAX's `_conv_general_dilated_transpose_rhs`.
fn transpose_rhs(base: &Params, c: &ConvParams, g: &Tensor, lhs: &Tensor, rhs: &Tensor) -> Tensor {
    let (mut groups, mut batch_groups) = (c.feature_group_count, c.batch_group_count);
    if batch_groups > 1 {
        (groups, batch_groups) = (batch_groups, 1);
    } else if groups > 1 {
        (groups, batch_groups) = (1, groups);
    }
    let in_s = spatial(&c.lhs_spec, lhs.shape());
    let k_s = spatial(&c.rhs_spec, rhs.shape());
    let out_s = spatial(&c.out_spec, g.shape());
    let padding: Vec<(i64, i64)> = (0..in_s.len())
        .map(|s| {
            let lhs_d = dilate(in_s[s], c.lhs_dilation[s]);
            let rhs_d = dilate(k_s[s], c.rhs_dilation[s]);
            let out_d = dilate(out_s[s], c.window_strides[s]);
            let lo = c.padding[s].0;
            (lo, (out_d - lhs_d) + (rhs_d - lo - 1))
        })
        .collect();
    let t = ConvParams {
        window_strides: c.rhs_dilation.clone(),
        padding,
        lhs_dilation: c.lhs_dilation.clone(),
        rhs_dilation: c.window_strides.clone(),
        lhs_spec: transposed(&c.lhs_spec),
        rhs_spec: transposed(&c.out_spec),
        out_spec: transposed(&c.rhs_spec),
        feature_group_count: groups,
        batch_group_count: batch_groups,
        preferred_element_type: c.preferred_element_type,
    };
    conv(base, &t, lhs, g)
}
