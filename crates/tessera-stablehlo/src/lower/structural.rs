//! Shape rules: iota, broadcasts, reshapes, transposes, slices, concatenation, padding, and
//! `dot_general` (`#stablehlo.dot<...>`).

use melior::ir::Value;
use tessera_ir::prim::StructuralParams;
use tessera_ir::{Params, Prim, ShapedArray};

use super::{Ctx, i64_array, ir};
use crate::context::LowerError;

pub(super) fn lower<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let op = prim
        .structural()
        .ok_or_else(|| LowerError::Build(format!("{} is not structural", prim.name())))?;
    let out = &ctx.out_avals[0];
    let value = match StructuralParams::read(op, params).map_err(ir)? {
        StructuralParams::Iota { dimension, .. } => ctx.op1(
            "stablehlo.iota",
            &[],
            out,
            &[("iota_dimension", format!("{dimension} : i64"))],
        )?,
        StructuralParams::BroadcastInDim {
            broadcast_dimensions,
            ..
        } => ctx.op1(
            "stablehlo.broadcast_in_dim",
            inputs,
            out,
            &[("broadcast_dimensions", i64_array(&broadcast_dimensions))],
        )?,
        StructuralParams::Reshape { .. }
        | StructuralParams::Squeeze { .. }
        | StructuralParams::ExpandDims { .. } => ctx.op1("stablehlo.reshape", inputs, out, &[])?,
        StructuralParams::Transpose { permutation } => ctx.op1(
            "stablehlo.transpose",
            inputs,
            out,
            &[("permutation", i64_array(&permutation))],
        )?,
        StructuralParams::Slice {
            start_indices,
            limit_indices,
            strides,
        } => {
            let attrs = [
                ("start_indices", i64_array(&start_indices)),
                ("limit_indices", i64_array(&limit_indices)),
                ("strides", i64_array(&strides)),
            ];
            ctx.op1("stablehlo.slice", inputs, out, &attrs)?
        }
        StructuralParams::DynamicSlice { slice_sizes } => ctx.op1(
            "stablehlo.dynamic_slice",
            inputs,
            out,
            &[("slice_sizes", i64_array(&slice_sizes))],
        )?,
        StructuralParams::DynamicUpdateSlice => {
            ctx.op1("stablehlo.dynamic_update_slice", inputs, out, &[])?
        }
        StructuralParams::Concatenate { dimension } => {
            let rank = out.rank() as i64;
            let dim = if dimension < 0 {
                dimension + rank
            } else {
                dimension
            };
            ctx.op1(
                "stablehlo.concatenate",
                inputs,
                out,
                &[("dimension", format!("{dim} : i64"))],
            )?
        }
        StructuralParams::Pad { padding_config } => {
            let column = |k: usize| -> Vec<i64> {
                padding_config
                    .iter()
                    .map(|&(lo, hi, int)| [lo, hi, int][k])
                    .collect()
            };
            let attrs = [
                ("edge_padding_low", i64_array(&column(0))),
                ("edge_padding_high", i64_array(&column(1))),
                ("interior_padding", i64_array(&column(2))),
            ];
            ctx.op1("stablehlo.pad", inputs, out, &attrs)?
        }
    };
    Ok(vec![value])
}

/// `dot_general` with `#stablehlo.dot<...>` dimension numbers; operands are first converted to the
/// result type when `preferred_element_type` differs from theirs.
pub(super) fn dot_general<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let dd = tessera_ir::prim::dot_dims(params).map_err(ir)?;
    let (lc, rc, lb, rb) = (
        &dd.lhs_contract,
        &dd.rhs_contract,
        &dd.lhs_batch,
        &dd.rhs_batch,
    );
    let list = |v: &[usize]| {
        format!(
            "[{}]",
            v.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let mut parts = Vec::new();
    if !lb.is_empty() {
        parts.push(format!(
            "lhs_batching_dimensions = {}, rhs_batching_dimensions = {}",
            list(lb),
            list(rb)
        ));
    }
    parts.push(format!(
        "lhs_contracting_dimensions = {}, rhs_contracting_dimensions = {}",
        list(lc),
        list(rc)
    ));
    let out = &ctx.out_avals[0];
    let operands = inputs
        .iter()
        .zip(ctx.in_avals)
        .map(|(&v, a)| {
            if a.dtype == out.dtype {
                Ok(v)
            } else {
                ctx.op1(
                    "stablehlo.convert",
                    &[v],
                    &ShapedArray::new(out.dtype, &a.shape),
                    &[],
                )
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let attr = format!("#stablehlo.dot<{}>", parts.join(", "));
    Ok(vec![ctx.op1(
        "stablehlo.dot_general",
        &operands,
        out,
        &[("dot_dimension_numbers", attr)],
    )?])
}
