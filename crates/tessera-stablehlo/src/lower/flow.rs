//! Control flow and custom derivatives. A custom call (`custom_jvp_call`,
//! `custom_vjp_call`) computes its body: the body is lowered in place (its rule matters only to
//! differentiation, which happened before lowering). `scan` and `while` become a
//! `stablehlo.while`, `cond` a `stablehlo.case`.

use melior::ir::Value;
use tessera_ir::prim::{ScanParams, WhileParams, cond_branches, unstacked};
use tessera_ir::{DType, Params, ShapedArray};

use super::control::{constant_array, constant_scalar, splat};
use super::{Ctx, Functions, i64_array, ir, lower_body, mlir_type};
use crate::context::LowerError;
use crate::emit::Body;

/// Lowers a custom call to its body's operations.
pub(super) fn custom_call<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: tessera_ir::Prim,
    params: &Params,
    inputs: &[Value<'c, 'b>],
    functions: &mut Functions<'_, 'c>,
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let body = params.jaxpr(prim.name(), "call_jaxpr").map_err(ir)?;
    let consts = body
        .consts
        .iter()
        .map(|c| constant_array(ctx.body, c))
        .collect::<Result<Vec<_>, _>>()?;
    lower_body(ctx.body, &body.jaxpr, &consts, inputs, functions)
}

/// Lowers `scan` to one `stablehlo.while` (so module size does not grow with the trip count).
/// The loop state is the counter `i`, the constants, the carries, the scanned operands and one
/// stacked accumulator per `ys` result (from zeros); step `i` works on index `k = i` (`length -
/// 1 - i` when `reverse`): it slices `xs[k]` (`dynamic_slice` + `reshape`), lowers the body in
/// place and writes its `ys` at `k` (`dynamic_update_slice`).
pub(super) fn scan<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    params: &Params,
    inputs: &[Value<'c, 'b>],
    functions: &mut Functions<'_, 'c>,
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let p = ScanParams::read(params).map_err(ir)?;
    let counter = ShapedArray::scalar(DType::I32);
    let n_ys = ctx.out_avals.len() - p.num_carry;
    let mut state_avals = vec![counter.clone()];
    state_avals.extend(ctx.in_avals.iter().cloned());
    state_avals.extend(ctx.out_avals[p.num_carry..].iter().cloned());
    let types: Vec<String> = state_avals.iter().map(mlir_type).collect();
    let type_refs: Vec<&str> = types.iter().map(String::as_str).collect();
    let mut init = vec![constant_scalar(ctx.body, 0.0, &counter)?];
    init.extend_from_slice(inputs);
    for aval in &ctx.out_avals[p.num_carry..] {
        init.push(splat(ctx.body, 0.0, aval)?);
    }
    let results = super::loops::counted_while(ctx, &type_refs, &init, p.length, |b, state| {
        scan_step(b, &p, ctx.in_avals, ctx.out_avals, state, functions)
    })?;
    let carries = &results[1 + p.num_consts..1 + p.num_consts + p.num_carry];
    let ys = &results[results.len() - n_ys..];
    Ok(carries.iter().chain(ys).copied().collect())
}

/// One step of a lowered `scan`: returns the next loop state.
fn scan_step<'c, 'r>(
    b: &Body<'c, 'r>,
    p: &ScanParams<'_>,
    in_avals: &[ShapedArray],
    out_avals: &[ShapedArray],
    state: &[Value<'c, 'r>],
    functions: &mut Functions<'_, 'c>,
) -> Result<Vec<Value<'c, 'r>>, LowerError> {
    let inner = Ctx {
        body: b,
        in_avals: &[],
        out_avals: &[],
    };
    let counter = ShapedArray::scalar(DType::I32);
    let i = state[0];
    let k = if p.reverse {
        let last = constant_scalar(b, (p.length - 1) as f64, &counter)?;
        inner.op1("stablehlo.subtract", &[last, i], &counter, &[])?
    } else {
        i
    };
    let zero = constant_scalar(b, 0.0, &counter)?;
    let n_in = in_avals.len();
    let fixed = p.num_consts + p.num_carry;
    let operands = &state[1..1 + n_in];
    let mut args = operands[..fixed].to_vec();
    for (x, aval) in operands.iter().zip(in_avals).skip(fixed) {
        let mut sizes = aval.shape.clone();
        sizes[0] = 1;
        let mut slice_operands = vec![*x];
        slice_operands.extend((0..aval.rank()).map(|d| if d == 0 { k } else { zero }));
        let slice = inner.op1(
            "stablehlo.dynamic_slice",
            &slice_operands,
            &ShapedArray::new(aval.dtype, &sizes),
            &[("slice_sizes", i64_array(&sizes))],
        )?;
        args.push(inner.op1("stablehlo.reshape", &[slice], &unstacked(aval), &[])?);
    }
    let consts = p
        .body
        .consts
        .iter()
        .map(|c| constant_array(b, c))
        .collect::<Result<Vec<_>, _>>()?;
    let outs = lower_body(b, &p.body.jaxpr, &consts, &args, functions)?;
    let mut next = vec![inner.op1(
        "stablehlo.add",
        &[i, constant_scalar(b, 1.0, &counter)?],
        &counter,
        &[],
    )?];
    next.extend_from_slice(&operands[..p.num_consts]);
    next.extend_from_slice(&outs[..p.num_carry]);
    next.extend_from_slice(&operands[fixed..]);
    let accs = &state[1 + n_in..];
    for ((acc, y), aval) in accs
        .iter()
        .zip(&outs[p.num_carry..])
        .zip(&out_avals[p.num_carry..])
    {
        let mut shape = aval.shape.clone();
        shape[0] = 1;
        let update = inner.op1(
            "stablehlo.reshape",
            &[*y],
            &ShapedArray::new(aval.dtype, &shape),
            &[],
        )?;
        let mut dus = vec![*acc, update];
        dus.extend((0..aval.rank()).map(|d| if d == 0 { k } else { zero }));
        next.push(inner.op1("stablehlo.dynamic_update_slice", &dus, aval, &[])?);
    }
    Ok(next)
}

/// Lowers `cond` to `stablehlo.case` on the index (converted to `i32`; an out-of-range index
/// runs the last branch, as the IR's `cond` does); each branch is a region lowering the branch
/// in place on the operands.
pub(super) fn cond<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    params: &Params,
    inputs: &[Value<'c, 'b>],
    functions: &mut Functions<'_, 'c>,
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let branches = cond_branches(params).map_err(ir)?;
    let index_aval = ctx
        .in_avals
        .first()
        .ok_or_else(|| LowerError::Build("cond: no index operand".into()))?;
    let i32_scalar = ShapedArray::scalar(DType::I32);
    let index = if index_aval.dtype == DType::I32 {
        inputs[0]
    } else {
        ctx.op1("stablehlo.convert", &[inputs[0]], &i32_scalar, &[])?
    };
    let mut regions = Vec::new();
    for branch in branches {
        regions.push(ctx.body.region_capturing(
            &inputs[1..],
            "stablehlo.return",
            |b, operands| {
                let consts = branch
                    .consts
                    .iter()
                    .map(|c| constant_array(b, c))
                    .collect::<Result<Vec<_>, _>>()?;
                lower_body(b, &branch.jaxpr, &consts, operands, functions)
            },
        )?);
    }
    let types: Vec<String> = ctx.out_avals.iter().map(mlir_type).collect();
    let type_refs: Vec<&str> = types.iter().map(String::as_str).collect();
    ctx.body
        .op_with_regions("stablehlo.case", &[index], &type_refs, &[], regions)
}

/// Lowers `while` to `stablehlo.while` whose state is every operand (the constants pass
/// through unchanged).
pub(super) fn while_loop<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    params: &Params,
    inputs: &[Value<'c, 'b>],
    functions: &mut Functions<'_, 'c>,
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let p = WhileParams::read(params).map_err(ir)?;
    let (ncc, nc) = (p.cond_nconsts, p.num_consts());
    let types: Vec<String> = ctx.in_avals.iter().map(mlir_type).collect();
    let type_refs: Vec<&str> = types.iter().map(String::as_str).collect();
    let cond = ctx
        .body
        .region(&type_refs, "stablehlo.return", |b, state| {
            let args = state[..ncc].iter().chain(&state[nc..]).copied().collect();
            lower_in(b, p.cond, args, functions)
        })?;
    let body = ctx
        .body
        .region(&type_refs, "stablehlo.return", |b, state| {
            let args = state[ncc..].to_vec();
            let carry = lower_in(b, p.body, args, functions)?;
            Ok(state[..nc].iter().copied().chain(carry).collect())
        })?;
    let results =
        ctx.body
            .op_with_regions("stablehlo.while", inputs, &type_refs, &[], vec![cond, body])?;
    Ok(results[nc..].to_vec())
}

/// Lowers a closed jaxpr in place (its constants as `stablehlo.constant`s).
fn lower_in<'c, 'r>(
    b: &Body<'c, 'r>,
    jaxpr: &tessera_ir::ClosedJaxpr,
    args: Vec<Value<'c, 'r>>,
    functions: &mut Functions<'_, 'c>,
) -> Result<Vec<Value<'c, 'r>>, LowerError> {
    let consts = jaxpr
        .consts
        .iter()
        .map(|c| constant_array(b, c))
        .collect::<Result<Vec<_>, _>>()?;
    lower_body(b, &jaxpr.jaxpr, &consts, &args, functions)
}
