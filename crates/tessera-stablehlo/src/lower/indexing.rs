//! `gather` and the scatters as `stablehlo.gather` / `stablehlo.scatter` (with a region that adds,
//! replaces, multiplies, or takes the minimum or maximum);
//! the index vector is the last dimension of the indices, as in JAX. Out-of-bounds modes as JAX
//! lowers them: XLA's gather clamps (CLIP, PROMISE_IN_BOUNDS) and its scatter drops windows that
//! do not fit (FILL_OR_DROP, PROMISE_IN_BOUNDS); a FILL_OR_DROP gather and a CLIP scatter are
//! lowered from their expansion programs (`tessera_ir::prim::gather_fill_program`,
//! `scatter_clip_program`).

use melior::ir::Value;
use tessera_ir::prim::{
    GatherParams, GatherScatterMode, ScatterKind, ScatterParams, gather_fill_program,
    scatter_clip_program_for,
};
use tessera_ir::{Params, Prim, ShapedArray};

use super::{Ctx, i64_array, ir, lower_flat, mlir_type};
use crate::context::LowerError;

fn list(values: &[i64]) -> String {
    format!(
        "[{}]",
        values
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The batching dimensions of a gather or scatter attribute (StableHLO prints them only when
/// there are any, after the collapsed / inserted dimensions).
fn batching(keys: [&str; 2], operand: &[i64], indices: &[i64]) -> String {
    if operand.is_empty() {
        return String::new();
    }
    let [operand_key, indices_key] = keys;
    format!(
        ", {operand_key} = {}, {indices_key} = {}",
        list(operand),
        list(indices)
    )
}

pub(super) fn gather<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let typed = GatherParams::read(params).map_err(ir)?;
    match typed.mode {
        GatherScatterMode::Clip | GatherScatterMode::PromiseInBounds => {}
        GatherScatterMode::FillOrDrop => {
            let (operand, indices) = (&ctx.in_avals[0], &ctx.in_avals[1]);
            let program =
                gather_fill_program(params, operand, indices, &ctx.out_avals[0]).map_err(ir)?;
            return lower_flat(ctx.body, &program, inputs);
        }
    }
    let (dn, sizes) = (&typed.dims, &typed.slice_sizes);
    let index_vector_dim = ctx.in_avals[1].rank() as i64 - 1;
    let attr = format!(
        "#stablehlo.gather<offset_dims = {}, collapsed_slice_dims = {}{}, start_index_map = {}, index_vector_dim = {index_vector_dim}>",
        list(&dn.offset_dims),
        list(&dn.collapsed_slice_dims),
        batching(
            ["operand_batching_dims", "start_indices_batching_dims"],
            &dn.operand_batching_dims,
            &dn.start_indices_batching_dims
        ),
        list(&dn.start_index_map)
    );
    let attrs = [
        ("dimension_numbers", attr),
        ("slice_sizes", i64_array(sizes)),
        ("indices_are_sorted", "false".into()),
    ];
    Ok(vec![ctx.op1(
        "stablehlo.gather",
        inputs,
        &ctx.out_avals[0],
        &attrs,
    )?])
}

/// Every scatter (`scatter-add`, `scatter`, `scatter-mul`, `scatter-min`, `scatter-max`): a
/// `stablehlo.scatter` whose region combines the operand's value with the update.
pub(super) fn scatter<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let typed = ScatterParams::read(params).map_err(ir)?;
    match typed.mode {
        GatherScatterMode::FillOrDrop | GatherScatterMode::PromiseInBounds => {}
        GatherScatterMode::Clip => {
            let [operand, indices, updates] = ctx.in_avals else {
                return Err(LowerError::Build(format!(
                    "{} takes 3 operands",
                    prim.name()
                )));
            };
            let program =
                scatter_clip_program_for(prim, params, operand, indices, updates).map_err(ir)?;
            return lower_flat(ctx.body, &program, inputs);
        }
    }
    let combiner = match ScatterKind::of(prim) {
        None => Some("stablehlo.add"),
        Some(ScatterKind::Replace) => None,
        Some(ScatterKind::Mul) => Some("stablehlo.multiply"),
        Some(ScatterKind::Min) => Some("stablehlo.minimum"),
        Some(ScatterKind::Max) => Some("stablehlo.maximum"),
    };
    let dn = &typed.dims;
    let index_vector_dim = ctx.in_avals[1].rank() as i64 - 1;
    let attr = format!(
        "#stablehlo.scatter<update_window_dims = {}, inserted_window_dims = {}{}, scatter_dims_to_operand_dims = {}, index_vector_dim = {index_vector_dim}>",
        list(&dn.update_window_dims),
        list(&dn.inserted_window_dims),
        batching(
            ["input_batching_dims", "scatter_indices_batching_dims"],
            &dn.operand_batching_dims,
            &dn.scatter_indices_batching_dims
        ),
        list(&dn.scatter_dims_to_operand_dims)
    );
    let scalar = mlir_type(&ShapedArray::scalar(ctx.out_avals[0].dtype));
    let region = ctx.body.region(
        &[&scalar, &scalar],
        "stablehlo.return",
        |b, xs| match combiner {
            Some(name) => b.op(name, xs, &[&scalar], &[]),
            None => Ok(vec![xs[1]]),
        },
    )?;
    let attrs = [
        ("scatter_dimension_numbers", attr),
        ("indices_are_sorted", "false".into()),
        ("unique_indices", "false".into()),
    ];
    let out = mlir_type(&ctx.out_avals[0]);
    Ok(vec![
        ctx.body
            .op_with_regions("stablehlo.scatter", inputs, &[&out], &attrs, vec![region])?
            .remove(0),
    ])
}
