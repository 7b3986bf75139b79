//! Shape rules: iota, broadcasts, reshapes, transposes, slices, concatenation, padding, and
//! `dot_general` (`#stablehlo.dot<...>`).

use melior::ir::Value;
use tessera_ir::{ParamValue, Params, Prim, ShapedArray};

use super::{Ctx, i64_array, ir};
use crate::context::LowerError;

pub(super) fn lower<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let name = prim.name();
    let out = &ctx.out_avals[0];
    let value = match prim {
        Prim::Iota => {
            let dim = params.int(name, "dimension").map_err(ir)?;
            ctx.op1(
                "stablehlo.iota",
                &[],
                out,
                &[("iota_dimension", format!("{dim} : i64"))],
            )?
        }
        Prim::BroadcastInDim => {
            // Absent when empty, as JAX prints it.
            let dims = params
                .opt_ints(name, "broadcast_dimensions")
                .map_err(ir)?
                .unwrap_or_default();
            ctx.op1(
                "stablehlo.broadcast_in_dim",
                inputs,
                out,
                &[("broadcast_dimensions", i64_array(&dims))],
            )?
        }
        Prim::Reshape | Prim::Squeeze | Prim::ExpandDims => {
            ctx.op1("stablehlo.reshape", inputs, out, &[])?
        }
        Prim::Transpose => {
            let perm = params.ints(name, "permutation").map_err(ir)?;
            ctx.op1(
                "stablehlo.transpose",
                inputs,
                out,
                &[("permutation", i64_array(&perm))],
            )?
        }
        Prim::Slice => {
            let start = params.ints(name, "start_indices").map_err(ir)?;
            let limit = params.ints(name, "limit_indices").map_err(ir)?;
            let strides = params
                .opt_ints(name, "strides")
                .map_err(ir)?
                .unwrap_or_else(|| vec![1; start.len()]);
            let attrs = [
                ("start_indices", i64_array(&start)),
                ("limit_indices", i64_array(&limit)),
                ("strides", i64_array(&strides)),
            ];
            ctx.op1("stablehlo.slice", inputs, out, &attrs)?
        }
        Prim::DynamicSlice => {
            let sizes = params.ints(name, "slice_sizes").map_err(ir)?;
            ctx.op1(
                "stablehlo.dynamic_slice",
                inputs,
                out,
                &[("slice_sizes", i64_array(&sizes))],
            )?
        }
        Prim::DynamicUpdateSlice => ctx.op1("stablehlo.dynamic_update_slice", inputs, out, &[])?,
        Prim::Concatenate => {
            let rank = out.rank() as i64;
            let dim = params.int(name, "dimension").map_err(ir)?;
            let dim = if dim < 0 { dim + rank } else { dim };
            ctx.op1(
                "stablehlo.concatenate",
                inputs,
                out,
                &[("dimension", format!("{dim} : i64"))],
            )?
        }
        Prim::Pad => {
            let (lo, hi, interior) = padding(params)?;
            let attrs = [
                ("edge_padding_low", i64_array(&lo)),
                ("edge_padding_high", i64_array(&hi)),
                ("interior_padding", i64_array(&interior)),
            ];
            ctx.op1("stablehlo.pad", inputs, out, &attrs)?
        }
        other => {
            return Err(LowerError::Build(format!(
                "{} is not structural",
                other.name()
            )));
        }
    };
    Ok(vec![value])
}

/// Low, high and interior padding per dimension.
type Padding = (Vec<i64>, Vec<i64>, Vec<i64>);

fn padding(params: &Params) -> Result<Padding, LowerError> {
    let bad =
        || LowerError::Build("pad: padding_config must hold (low, high, interior) triples".into());
    let seq = params
        .get("padding_config")
        .and_then(ParamValue::as_seq)
        .ok_or_else(bad)?;
    let (mut lo, mut hi, mut interior) = (Vec::new(), Vec::new(), Vec::new());
    for t in seq {
        let Some(&[l, h, i]) = t.as_ints().as_deref() else {
            return Err(bad());
        };
        lo.push(l);
        hi.push(h);
        interior.push(i);
    }
    Ok((lo, hi, interior))
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
