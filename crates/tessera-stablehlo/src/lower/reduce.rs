//! Reductions: `stablehlo.reduce` with a region per combiner, `argmax`/`argmin` as a two-operand
//! reduce over (value, index), `cumsum` as a `stablehlo.reduce_window`, and the other cumulative
//! reductions as JAX's associative scan (`tessera_ir::prim::cumulative_program`).

use melior::ir::Value;
use tessera_ir::prim::{ReduceKind, ReductionOp, ReductionParams};
use tessera_ir::{DType, Params, Prim, ShapedArray};

use super::control::constant_scalar;
use super::elementwise::compare_values;
use super::{Ctx, i64_array, ir, mlir_type};
use crate::context::LowerError;

/// The scalar combiner of a reduction (or of the all-reduce of `psum`/`pmax`/`pmin`).
pub(super) fn combiner(kind: ReduceKind) -> &'static str {
    match kind {
        ReduceKind::Sum => "stablehlo.add",
        ReduceKind::Prod => "stablehlo.multiply",
        ReduceKind::Max => "stablehlo.maximum",
        ReduceKind::Min => "stablehlo.minimum",
        ReduceKind::And => "stablehlo.and",
        ReduceKind::Or => "stablehlo.or",
    }
}

/// Every reduction, by its kind.
pub(super) fn lower<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let op = prim
        .reduction()
        .ok_or_else(|| LowerError::Build(format!("{} is not a reduction", prim.name())))?;
    match op {
        ReductionOp::Reduce(kind) => reduce(ctx, prim, kind, params, inputs),
        ReductionOp::Argmax => arg_reduce(ctx, prim, true, params, inputs),
        ReductionOp::Argmin => arg_reduce(ctx, prim, false, params, inputs),
        ReductionOp::Cumsum => cumsum(ctx, params, inputs),
        ReductionOp::Cumulative(op) => {
            // JAX's lowering on CPU and GPU: the associative scan.
            let program =
                tessera_ir::prim::cumulative_program(op, params, &ctx.in_avals[0]).map_err(ir)?;
            super::lower_flat(ctx.body, &program, inputs)
        }
    }
}

/// The identity of a reduction of `dtype` values.
pub(super) fn identity(kind: ReduceKind, dtype: DType) -> f64 {
    let (lowest, highest) = if dtype.is_float() {
        (f64::NEG_INFINITY, f64::INFINITY)
    } else if dtype == DType::Bool {
        (0.0, 1.0)
    } else {
        let bits = dtype.size_in_bytes() as u32 * 8;
        if dtype.is_unsigned() {
            (0.0, 2f64.powi(bits as i32) - 1.0)
        } else {
            (
                -(2f64.powi(bits as i32 - 1)),
                2f64.powi(bits as i32 - 1) - 1.0,
            )
        }
    };
    match kind {
        ReduceKind::Sum | ReduceKind::Or => 0.0,
        ReduceKind::Prod => 1.0,
        ReduceKind::Max => lowest,
        ReduceKind::Min => highest,
        // All bits set.
        ReduceKind::And if dtype == DType::Bool => 1.0,
        ReduceKind::And => -1.0,
    }
}

/// The axes `prim` reduces, from its typed parameters.
fn axes(params: &Params, prim: Prim, rank: usize) -> Result<Vec<i64>, LowerError> {
    Ok(ReductionParams::read(prim, params, rank)
        .map_err(ir)?
        .axes_i64())
}

fn reduce<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    kind: ReduceKind,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let x = &ctx.in_avals[0];
    let out = &ctx.out_avals[0];
    let axes = axes(params, prim, x.rank())?;
    let scalar = ShapedArray::scalar(x.dtype);
    let init = constant_scalar(ctx.body, identity(kind, x.dtype), &scalar)?;
    let st = mlir_type(&scalar);
    let region = ctx.body.region(&[&st, &st], "stablehlo.return", |b, xs| {
        b.op(combiner(kind), xs, &[&st], &[])
    })?;
    let attrs = [("dimensions", i64_array(&axes))];
    Ok(vec![
        ctx.body
            .op_with_regions(
                "stablehlo.reduce",
                &[inputs[0], init],
                &[&mlir_type(out)],
                &attrs,
                vec![region],
            )?
            .remove(0),
    ])
}

/// `argmax`/`argmin`: reduces (value, iota) pairs; ties and NaNs pick the lowest index, a NaN
/// wins over numbers (XLA's semantics).
fn arg_reduce<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    is_max: bool,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let x = &ctx.in_avals[0];
    let out = &ctx.out_avals[0];
    let axes = axes(params, prim, x.rank())?;
    let axis = axes.first().copied().unwrap_or(0);
    let index_dtype = out.dtype;
    let iota_aval = ShapedArray::new(index_dtype, &x.shape);
    let iota = ctx.op1(
        "stablehlo.iota",
        &[],
        &iota_aval,
        &[("iota_dimension", format!("{axis} : i64"))],
    )?;
    let (vs, is) = (
        ShapedArray::scalar(x.dtype),
        ShapedArray::scalar(index_dtype),
    );
    let kind = if is_max {
        ReduceKind::Max
    } else {
        ReduceKind::Min
    };
    let worst = identity(kind, x.dtype);
    let init_v = constant_scalar(ctx.body, worst, &vs)?;
    let init_i = constant_scalar(ctx.body, 0.0, &is)?;
    let (vt, it) = (mlir_type(&vs), mlir_type(&is));
    let direction = if is_max { "GT" } else { "LT" };
    let float = x.dtype.is_float();
    let region = ctx
        .body
        .region(&[&vt, &it, &vt, &it], "stablehlo.return", |b, a| {
            let inner = Ctx {
                body: b,
                in_avals: &[],
                out_avals: &[],
            };
            let boolean = ShapedArray::scalar(DType::Bool);
            let better = compare_values(&inner, a[0], a[2], vs.dtype, direction, &boolean)?;
            let better = if float {
                let nan = compare_values(&inner, a[0], a[0], vs.dtype, "NE", &boolean)?;
                inner.op1("stablehlo.or", &[better, nan], &boolean, &[])?
            } else {
                better
            };
            let equal = compare_values(&inner, a[0], a[2], vs.dtype, "EQ", &boolean)?;
            let lower = compare_values(&inner, a[1], a[3], is.dtype, "LT", &boolean)?;
            let tie = inner.op1("stablehlo.and", &[equal, lower], &boolean, &[])?;
            let take = inner.op1("stablehlo.or", &[better, tie], &boolean, &[])?;
            let v = inner.op1("stablehlo.select", &[take, a[0], a[2]], &vs, &[])?;
            let i = inner.op1("stablehlo.select", &[take, a[1], a[3]], &is, &[])?;
            Ok(vec![v, i])
        })?;
    let results = [
        mlir_type(&ShapedArray::new(x.dtype, &out.shape)),
        mlir_type(out),
    ];
    let refs: Vec<&str> = results.iter().map(String::as_str).collect();
    let outs = ctx.body.op_with_regions(
        "stablehlo.reduce",
        &[inputs[0], iota, init_v, init_i],
        &refs,
        &[("dimensions", i64_array(&[axis]))],
        vec![region],
    )?;
    Ok(vec![outs[1]])
}

/// `cumsum` as a window sum over the axis with `n - 1` padding before (after when reversed).
fn cumsum<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let x = &ctx.in_avals[0];
    let ReductionParams::Scan { axis, reverse } =
        ReductionParams::read(Prim::Cumsum, params, x.rank()).map_err(ir)?
    else {
        return Err(ir(tessera_ir::IrError::Eval(
            "cumsum without a scan's parameters".into(),
        )));
    };
    let n = x.shape[axis];
    let mut window = vec![1i64; x.rank()];
    window[axis] = n;
    let padding: Vec<String> = (0..x.rank())
        .map(|d| {
            if d == axis {
                if reverse {
                    format!("[0, {}]", n - 1)
                } else {
                    format!("[{}, 0]", n - 1)
                }
            } else {
                "[0, 0]".into()
            }
        })
        .collect();
    let scalar = ShapedArray::scalar(x.dtype);
    let init = constant_scalar(ctx.body, 0.0, &scalar)?;
    let st = mlir_type(&scalar);
    let region = ctx.body.region(&[&st, &st], "stablehlo.return", |b, xs| {
        b.op("stablehlo.add", xs, &[&st], &[])
    })?;
    let attrs = [
        ("window_dimensions", i64_array(&window)),
        (
            "padding",
            format!(
                "dense<[{}]> : tensor<{}x2xi64>",
                padding.join(", "),
                x.rank()
            ),
        ),
    ];
    Ok(vec![
        ctx.body
            .op_with_regions(
                "stablehlo.reduce_window",
                &[inputs[0], init],
                &[&mlir_type(x)],
                &attrs,
                vec![region],
            )?
            .remove(0),
    ])
}
