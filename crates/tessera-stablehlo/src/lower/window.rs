//! Windowed primitives: `reduce_window_sum/max/min` and the generic `reduce_window` as
//! `stablehlo.reduce_window` (the generic one's region lowered from its `jaxpr`), and
//! `select_and_scatter_add` as `stablehlo.select_and_scatter` (a `GE`/`LE` select region and an
//! add scatter region).

use melior::ir::Value;
use tessera_ir::prim::{
    WindowOp, WindowParams, highest, lowest, reduce_window_jaxpr, select_is_ge,
};
use tessera_ir::{DType, Params, Prim, ShapedArray};

use super::control::constant_scalar;
use super::elementwise::compare_values;
use super::{Ctx, i64_array, ir, lower_flat, mlir_type};
use crate::context::LowerError;

fn padding_attr(w: &WindowParams) -> String {
    let pairs: Vec<String> = w
        .padding
        .iter()
        .map(|(lo, hi)| format!("[{lo}, {hi}]"))
        .collect();
    format!(
        "dense<[{}]> : tensor<{}x2xi64>",
        pairs.join(", "),
        w.padding.len()
    )
}

/// Every windowed primitive.
pub(super) fn lower<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let op = prim
        .window()
        .ok_or_else(|| LowerError::Build(format!("{} is not windowed", prim.name())))?;
    let operand = match op {
        WindowOp::Conv => return super::conv::conv(ctx, params, inputs),
        WindowOp::SelectAndScatterAdd => &ctx.in_avals[1],
        WindowOp::Sum | WindowOp::Max | WindowOp::Min | WindowOp::Generic => &ctx.in_avals[0],
    };
    let w = WindowParams::read(prim.name(), params, operand.rank()).map_err(ir)?;
    let dtype = operand.dtype;
    let scalar = ShapedArray::scalar(dtype);
    let st = mlir_type(&scalar);
    let (init, region) = match op {
        WindowOp::Sum | WindowOp::Max | WindowOp::Min => {
            let (value, combiner) = match op {
                WindowOp::Max => (lowest(dtype), "stablehlo.maximum"),
                WindowOp::Min => (highest(dtype), "stablehlo.minimum"),
                WindowOp::Sum
                | WindowOp::Generic
                | WindowOp::SelectAndScatterAdd
                | WindowOp::Conv => (0.0, "stablehlo.add"),
            };
            let init = constant_scalar(ctx.body, value, &scalar)?;
            let region = ctx.body.region(&[&st, &st], "stablehlo.return", |b, xs| {
                b.op(combiner, xs, &[&st], &[])
            })?;
            (init, region)
        }
        WindowOp::Generic => {
            let jaxpr = reduce_window_jaxpr(params).map_err(ir)?;
            let region = ctx.body.region(&[&st, &st], "stablehlo.return", |b, xs| {
                lower_flat(b, jaxpr, xs)
            })?;
            (inputs[1], region)
        }
        WindowOp::SelectAndScatterAdd => return select_and_scatter(ctx, params, &w, inputs, dtype),
        WindowOp::Conv => return super::conv::conv(ctx, params, inputs),
    };
    let attrs = [
        ("window_dimensions", i64_array(&w.dimensions)),
        ("window_strides", i64_array(&w.strides)),
        ("base_dilations", i64_array(&w.base_dilation)),
        ("window_dilations", i64_array(&w.window_dilation)),
        ("padding", padding_attr(&w)),
    ];
    Ok(vec![
        ctx.body
            .op_with_regions(
                "stablehlo.reduce_window",
                &[inputs[0], init],
                &[&mlir_type(&ctx.out_avals[0])],
                &attrs,
                vec![region],
            )?
            .remove(0),
    ])
}

fn select_and_scatter<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    params: &Params,
    w: &WindowParams,
    inputs: &[Value<'c, 'b>],
    dtype: DType,
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let ge = select_is_ge(params).map_err(ir)?;
    let scalar = ShapedArray::scalar(dtype);
    let st = mlir_type(&scalar);
    let boolean = ShapedArray::scalar(DType::Bool);
    let select = ctx.body.region(&[&st, &st], "stablehlo.return", |b, xs| {
        let inner = Ctx {
            body: b,
            in_avals: &[],
            out_avals: &[],
        };
        let direction = if ge { "GE" } else { "LE" };
        Ok(vec![compare_values(
            &inner, xs[0], xs[1], dtype, direction, &boolean,
        )?])
    })?;
    let scatter = ctx.body.region(&[&st, &st], "stablehlo.return", |b, xs| {
        b.op("stablehlo.add", xs, &[&st], &[])
    })?;
    let init = constant_scalar(ctx.body, 0.0, &scalar)?;
    let attrs = [
        ("window_dimensions", i64_array(&w.dimensions)),
        ("window_strides", i64_array(&w.strides)),
        ("padding", padding_attr(w)),
    ];
    Ok(vec![
        ctx.body
            .op_with_regions(
                "stablehlo.select_and_scatter",
                &[inputs[1], inputs[0], init],
                &[&mlir_type(&ctx.out_avals[0])],
                &attrs,
                vec![select, scatter],
            )?
            .remove(0),
    ])
}
