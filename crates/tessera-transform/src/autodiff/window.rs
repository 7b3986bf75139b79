//! JVP and VJP of the windowed reductions, as JAX computes them:
//!
//! - `reduce_window_sum` is linear; its transpose pads the cotangent (JAX's
//!   `_conv_general_vjp_lhs_padding`, strides as interior padding) and sums windows again.
//! - `reduce_window_max`/`_min`: the tangent is the tangent at each window's first maximum
//!   (minimum), JAX's `_select_and_gather_add` (here over the window's patches); the cotangent
//!   is `select_and_scatter_add` (operand dilated first for a base dilation; JAX refuses a
//!   window dilation, and so does this rule).
//! - `select_and_scatter_add` is linear in its source; its transpose gathers the cotangent at
//!   each window's selected element.
//! - The generic `reduce_window`: its expansion (the combiner folded over the window's
//!   patches) is differentiated.

use super::windowed::{program_jvp, program_vjp};
use crate::aval::ShapedArray;
use crate::error::{Result, type_error};
use crate::jaxpr::ClosedJaxpr;
use crate::params::{ParamValue, Params};
use crate::prim::{
    Prim, WindowOp, WindowParams, highest, lowest, reduce_window_jaxpr, select_is_ge,
};
use crate::trace::{Tensor, call_closed, trace, where_};

fn dilate(n: i64, d: i64) -> i64 {
    if n == 0 { 0 } else { 1 + d * (n - 1) }
}

fn pad(x: &Tensor, value: &Tensor, config: &[(i64, i64, i64)]) -> Tensor {
    let cfg = ParamValue::Tuple(
        config
            .iter()
            .map(|&(a, b, c)| ParamValue::ints(&[a, b, c]))
            .collect(),
    );
    Tensor::bind1(
        Prim::Pad,
        Params::new().with("padding_config", cfg),
        &[x, value],
    )
}

fn slice(x: &Tensor, start: &[i64], limit: &[i64], strides: &[i64]) -> Tensor {
    let params = Params::new()
        .with("limit_indices", ParamValue::ints(limit))
        .with("start_indices", ParamValue::ints(start))
        .with("strides", ParamValue::ints(strides));
    Tensor::bind1(Prim::Slice, params, &[x])
}

/// The window's offsets in row-major order.
fn offsets(dims: &[i64]) -> Vec<Vec<i64>> {
    let mut out = vec![Vec::new()];
    for &n in dims {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                (0..n).map(move |k| {
                    let mut v = prefix.clone();
                    v.push(k);
                    v
                })
            })
            .collect();
    }
    out
}

/// For each window offset, the array (of the result's shape) of the element at that offset
/// of every window; dilation holes and padding hold `fill`.
pub(crate) fn patches(x: &Tensor, fill: &Tensor, w: &WindowParams, out: &[i64]) -> Vec<Tensor> {
    let config: Vec<(i64, i64, i64)> = w
        .padding
        .iter()
        .zip(&w.base_dilation)
        .map(|(&(lo, hi), &b)| (lo, hi, b - 1))
        .collect();
    let padded = pad(x, fill, &config);
    offsets(&w.dimensions)
        .iter()
        .map(|k| {
            let start: Vec<i64> = (0..k.len()).map(|d| k[d] * w.window_dilation[d]).collect();
            let limit: Vec<i64> = (0..k.len())
                .map(|d| {
                    start[d]
                        + if out[d] == 0 {
                            0
                        } else {
                            (out[d] - 1) * w.strides[d] + 1
                        }
                })
                .collect();
            slice(&padded, &start, &limit, &w.strides)
        })
        .collect()
}

/// JAX's `_select_and_gather_add`: `t` at each window's first maximum (`ge`) or minimum of `x`.
fn select_and_gather(t: &Tensor, x: &Tensor, w: &WindowParams, ge: bool, out: &[i64]) -> Tensor {
    let worst = if ge {
        lowest(x.dtype())
    } else {
        highest(x.dtype())
    };
    let xs = patches(x, &x.literal_strong(worst, x.dtype()), w, out);
    let ts = patches(t, &t.literal_strong(0.0, t.dtype()), w, out);
    let (Some(first_x), Some(first_t)) = (xs.first(), ts.first()) else {
        // A window of no elements (a zero window dimension) has no maximum or minimum to pick.
        return t.fail(
            "select_and_gather",
            format!(
                "its window {:?} holds no elements, so no maximum or minimum picks a tangent; \
                 give every window dimension at least 1",
                w.dimensions
            ),
        );
    };
    let mut best = first_x.clone();
    let mut picked = first_t.clone();
    for (v, tv) in xs.iter().zip(&ts).skip(1) {
        let keep = if ge { best.ge(v) } else { v.ge(&best) };
        best = where_(&keep, &best, v);
        picked = where_(&keep, &picked, tv);
    }
    picked
}

fn window(prim: Prim, params: &Params, x: &Tensor) -> Result<WindowParams> {
    WindowParams::read(prim.name(), params, x.rank())
}

/// The tangent of a windowed primitive's result.
pub(super) fn window_jvp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    ts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let fail =
        |e: crate::error::IrError| vec![Some(y[0].fail(prim.name(), format!("in its JVP: {e}")))];
    let Some(op) = prim.window() else {
        return fail(type_error(prim.name(), "is not a windowed primitive"));
    };
    match op {
        WindowOp::Conv => super::conv::conv_jvp(params, x, y, ts),
        WindowOp::Generic => program_jvp(prim, expansion(params, &x[0], &x[1]), x, ts, y),
        WindowOp::SelectAndScatterAdd => vec![
            ts[0]
                .as_ref()
                .map(|t| Tensor::bind1(prim, params.clone(), &[t, &x[1]])),
        ],
        WindowOp::Sum => vec![
            ts[0]
                .as_ref()
                .map(|t| Tensor::bind1(prim, params.clone(), &[t])),
        ],
        WindowOp::Max | WindowOp::Min => {
            let Some(t) = &ts[0] else { return vec![None] };
            match window(prim, params, &x[0]) {
                Ok(w) => vec![Some(select_and_gather(
                    t,
                    &x[0],
                    &w,
                    op == WindowOp::Max,
                    y[0].shape(),
                ))],
                Err(e) => fail(e),
            }
        }
    }
}

/// The cotangents of a windowed primitive's operands.
pub(super) fn window_vjp(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
    g: &Tensor,
) -> Vec<Option<Tensor>> {
    let fail = |e: crate::error::IrError| {
        vec![Some(g.fail(prim.name(), format!("in its VJP: {e}"))); x.len()]
    };
    let Some(op) = prim.window() else {
        return fail(type_error(prim.name(), "is not a windowed primitive"));
    };
    match op {
        WindowOp::Conv => super::conv::conv_vjp(params, x, g),
        WindowOp::Generic => program_vjp(prim, expansion(params, &x[0], &x[1]), x, y, gs),
        WindowOp::SelectAndScatterAdd => {
            let (w, ge) =
                match window(prim, params, &x[1]).and_then(|w| Ok((w, select_is_ge(params)?))) {
                    Ok(v) => v,
                    Err(e) => return fail(e),
                };
            vec![
                Some(select_and_gather(g, &x[1], &w, ge, x[0].shape())),
                None,
            ]
        }
        WindowOp::Sum => {
            match window(prim, params, &x[0]).and_then(|w| sum_transpose(g, &x[0], &w)) {
                Ok(t) => vec![Some(t)],
                Err(e) => fail(e),
            }
        }
        WindowOp::Max | WindowOp::Min => match window(prim, params, &x[0])
            .and_then(|w| chooser_transpose(g, &x[0], &w, op == WindowOp::Max))
        {
            Ok(t) => vec![Some(t)],
            Err(e) => fail(e),
        },
    }
}

/// JAX's `_reduce_window_sum_transpose_rule`.
fn sum_transpose(g: &Tensor, x: &Tensor, w: &WindowParams) -> Result<Tensor> {
    let n = x.rank();
    let config: Vec<(i64, i64, i64)> = (0..n)
        .map(|d| {
            let in_dilated = dilate(x.shape()[d], w.base_dilation[d]);
            let win_dilated = dilate(w.dimensions[d], w.window_dilation[d]);
            let out_dilated = dilate(g.shape()[d], w.strides[d]);
            let before = win_dilated - w.padding[d].0 - 1;
            let after = in_dilated + win_dilated - 1 - out_dilated - before;
            (before, after, w.strides[d] - 1)
        })
        .collect();
    let padded = pad(g, &g.literal_strong(0.0, g.dtype()), &config);
    let back = WindowParams {
        dimensions: w.dimensions.clone(),
        strides: w.base_dilation.clone(),
        padding: vec![(0, 0); n],
        base_dilation: vec![1; n],
        window_dilation: w.window_dilation.clone(),
    };
    let out = Tensor::bind1(Prim::ReduceWindowSum, back.to_params(), &[&padded]);
    if out.shape() != x.shape() {
        return Err(type_error(
            "reduce_window_sum",
            format!(
                "transpose gave shape {:?} for operand {}",
                out.shape(),
                x.aval()
            ),
        ));
    }
    Ok(out)
}

/// JAX's `_reduce_window_chooser` transpose: `select_and_scatter_add`.
fn chooser_transpose(g: &Tensor, x: &Tensor, w: &WindowParams, ge: bool) -> Result<Tensor> {
    let name = if ge {
        "reduce_window_max"
    } else {
        "reduce_window_min"
    };
    if w.window_dilation.iter().any(|&d| d != 1) {
        return Err(type_error(
            name,
            format!(
                "its VJP with window dilation {:?} is not implemented (as in JAX)",
                w.window_dilation
            ),
        ));
    }
    let dilated = w.base_dilation.iter().any(|&d| d != 1);
    let operand = if dilated {
        let worst = if ge {
            lowest(x.dtype())
        } else {
            highest(x.dtype())
        };
        let config: Vec<(i64, i64, i64)> = w.base_dilation.iter().map(|&b| (0, 0, b - 1)).collect();
        pad(x, &x.literal_strong(worst, x.dtype()), &config)
    } else {
        x.clone()
    };
    let pads = ParamValue::Tuple(
        w.padding
            .iter()
            .map(|&(lo, hi)| ParamValue::ints(&[lo, hi]))
            .collect(),
    );
    let params = Params::new()
        .with("padding", pads)
        .with(
            "select_prim",
            ParamValue::Name(if ge { "ge" } else { "le" }.into()),
        )
        .with("window_dimensions", ParamValue::ints(&w.dimensions))
        .with("window_strides", ParamValue::ints(&w.strides));
    let out = Tensor::bind1(Prim::SelectAndScatterAdd, params, &[g, &operand]);
    Ok(if dilated {
        let zeros = vec![0; x.rank()];
        slice(&out, &zeros, out.shape(), &w.base_dilation)
    } else {
        out
    })
}

/// The generic `reduce_window` as a fold of its combiner over the window's patches, starting
/// from the init value (the combiner mapped over every window with `vmap`).
fn expansion(params: &Params, x: &Tensor, init: &Tensor) -> Result<ClosedJaxpr> {
    let jaxpr = reduce_window_jaxpr(params)?.clone();
    let w = WindowParams::read("reduce_window", params, x.rank())?;
    let out = w.out_shape("reduce_window", x.shape())?;
    let n: i64 = out.iter().product();
    let mapped = crate::batching::vmap(&jaxpr, &[Some(0), Some(0)], &[0], n)?;
    let avals = [
        ShapedArray::new(x.dtype(), x.shape()),
        ShapedArray::new(init.dtype(), init.shape()),
    ];
    trace(&avals, |a| {
        let (x, init) = (&a[0], &a[1]);
        let mut acc = init.broadcast_in_dim(&[n], &[]);
        for p in patches(x, init, &w, &out) {
            acc = call_closed(&mapped, &[&acc, &p.reshape(&[n])]).remove(0);
        }
        vec![acc.reshape(&out)]
    })
}
