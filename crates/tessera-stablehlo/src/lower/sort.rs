//! `sort` and `top_k`. `sort` is `stablehlo.sort` with JAX's comparator region:
//! float keys canonicalised (`-0.0` to `0.0`, every NaN to one positive NaN) and compared in
//! total order, keys compared lexicographically. `top_k` is `chlo.top_k` on the last
//! dimension (transposed there and back for another axis), as JAX lowers it.

use melior::ir::Value;
use tessera_ir::prim::{SortParams, top_k_params};
use tessera_ir::{DType, Params, ShapedArray};

use super::control::splat;
use super::elementwise::compare_type;
use super::{Ctx, i64_array, ir, mlir_type};
use crate::context::LowerError;

type V<'c, 'b> = Value<'c, 'b>;

/// `sort`.
pub(super) fn sort<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    params: &Params,
    inputs: &[V<'c, 'b>],
) -> Result<Vec<V<'c, 'b>>, LowerError> {
    let SortParams {
        dimension: dim,
        num_keys: keys,
        is_stable: stable,
    } = SortParams::read(params, ctx.in_avals[0].rank()).map_err(ir)?;
    let scalars: Vec<ShapedArray> = ctx
        .in_avals
        .iter()
        .map(|a| ShapedArray::scalar(a.dtype))
        .collect();
    let arg_types: Vec<String> = scalars
        .iter()
        .flat_map(|s| [mlir_type(s), mlir_type(s)])
        .collect();
    let arg_refs: Vec<&str> = arg_types.iter().map(String::as_str).collect();
    let region = ctx.body.region(&arg_refs, "stablehlo.return", |b, a| {
        let inner = Ctx {
            body: b,
            in_avals: &[],
            out_avals: &[],
        };
        let mut less: Option<V<'c, '_>> = None;
        for k in (0..keys).rev() {
            let s = &scalars[k];
            let x = canonical(&inner, a[2 * k], s)?;
            let y = canonical(&inner, a[2 * k + 1], s)?;
            let lt = compare(&inner, x, y, s.dtype, "LT")?;
            less = Some(match less {
                None => lt,
                Some(rest) => {
                    let boolean = ShapedArray::scalar(DType::Bool);
                    let eq = compare(&inner, x, y, s.dtype, "EQ")?;
                    let tie = inner.op1("stablehlo.and", &[eq, rest], &boolean, &[])?;
                    inner.op1("stablehlo.or", &[lt, tie], &boolean, &[])?
                }
            });
        }
        less.map(|l| vec![l])
            .ok_or_else(|| LowerError::Build("sort: no keys".into()))
    })?;
    let results: Vec<String> = ctx.out_avals.iter().map(mlir_type).collect();
    let refs: Vec<&str> = results.iter().map(String::as_str).collect();
    ctx.body.op_with_regions(
        "stablehlo.sort",
        inputs,
        &refs,
        &[
            ("dimension", format!("{dim} : i64")),
            ("is_stable", stable.to_string()),
        ],
        vec![region],
    )
}

/// JAX's sort key of a float scalar: `-0.0` as `0.0`, every NaN as one positive NaN.
fn canonical<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    x: V<'c, 'b>,
    s: &ShapedArray,
) -> Result<V<'c, 'b>, LowerError> {
    if !s.dtype.is_float() {
        return Ok(x);
    }
    let zero = splat(ctx.body, 0.0, s)?;
    let nan = splat(ctx.body, f64::NAN, s)?;
    let is_zero = compare(ctx, x, zero, s.dtype, "EQ")?;
    let x = ctx.op1("stablehlo.select", &[is_zero, zero, x], s, &[])?;
    let is_nan = compare(ctx, x, x, s.dtype, "NE")?;
    ctx.op1("stablehlo.select", &[is_nan, nan, x], s, &[])
}

/// A scalar comparison, in total order for floats.
fn compare<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    a: V<'c, 'b>,
    b: V<'c, 'b>,
    dtype: DType,
    direction: &str,
) -> Result<V<'c, 'b>, LowerError> {
    let kind = if dtype.is_float() && direction != "NE" {
        "TOTALORDER"
    } else {
        compare_type(dtype)
    };
    let attrs = [
        (
            "comparison_direction",
            format!("#stablehlo<comparison_direction {direction}>"),
        ),
        (
            "compare_type",
            format!("#stablehlo<comparison_type {kind}>"),
        ),
    ];
    ctx.op1(
        "stablehlo.compare",
        &[a, b],
        &ShapedArray::scalar(DType::Bool),
        &attrs,
    )
}

/// `top_k`.
pub(super) fn top_k<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    params: &Params,
    inputs: &[V<'c, 'b>],
) -> Result<Vec<V<'c, 'b>>, LowerError> {
    let x = &ctx.in_avals[0];
    let rank = x.rank();
    let (k, axis) = top_k_params(params, rank).map_err(ir)?;
    let last = rank - 1;
    // The permutation swapping `axis` and the last dimension (its own inverse).
    let mut perm: Vec<i64> = (0..rank as i64).collect();
    perm.swap(axis, last);
    let swap = |v: V<'c, 'b>, aval: &ShapedArray| -> Result<V<'c, 'b>, LowerError> {
        if axis == last {
            return Ok(v);
        }
        let mut shape = aval.shape.clone();
        shape.swap(axis, last);
        let out = ShapedArray::new(aval.dtype, &shape);
        ctx.op1(
            "stablehlo.transpose",
            &[v],
            &out,
            &[("permutation", i64_array(&perm))],
        )
    };
    let operand = swap(inputs[0], x)?;
    let mut shape = x.shape.clone();
    shape.swap(axis, last);
    shape[last] = k;
    let values = ShapedArray::new(x.dtype, &shape);
    let indices = ShapedArray::new(DType::I32, &shape);
    let outs = ctx.op(
        "chlo.top_k",
        &[operand],
        &[&values, &indices],
        &[("k", format!("{k} : i64"))],
    )?;
    Ok(vec![swap(outs[0], &values)?, swap(outs[1], &indices)?])
}
