//! `treduce` under `jit`: one `stablehlo.while` over the micro-batches, so module size and
//! compile time do not grow with their number. The loop state is the counter `i`, the loop
//! invariants, the stacked operands `xs` and one accumulator per result; each iteration slices
//! micro-batch `i` out of every `xs` (`dynamic_slice` + `reshape`), lowers the body in place and
//! combines its results into the accumulators: `Add` adds (from zeros), `Max` takes the maximum
//! (from the lowest value), `Concat(a)` writes the result at position `i` of dimension `a`
//! (`dynamic_update_slice`). The same meaning as the unrolled loop (`passes::unroll_treduce`,
//! which `lower_closed_unrolled` lowers instead), in the same order of operations.

use melior::ir::Value;
use tessera_ir::prim::{ReduceKind, ReduceOp, TreduceParams};
use tessera_ir::{DType, Params, ShapedArray};

use super::control::{constant_array, constant_scalar, splat};
use super::elementwise::compare_values;
use super::reduce::identity;
use super::{Ctx, Functions, i64_array, ir, lower_body, mlir_type};
use crate::context::LowerError;

/// A `stablehlo.while` over `init` (whose first value is an `i32` counter from 0, of type
/// `types[0]`) that runs `step` on the loop state while the counter is below `length`; returns
/// the final state. `step` must return the next state, counter included.
pub(super) fn counted_while<'c, 'b, F>(
    ctx: &Ctx<'_, 'c, 'b>,
    types: &[&str],
    init: &[Value<'c, 'b>],
    length: i64,
    step: F,
) -> Result<Vec<Value<'c, 'b>>, LowerError>
where
    F: for<'r> FnOnce(
        &crate::emit::Body<'c, 'r>,
        &[Value<'c, 'r>],
    ) -> Result<Vec<Value<'c, 'r>>, LowerError>,
{
    let counter = ShapedArray::scalar(DType::I32);
    let cond = ctx.body.region(types, "stablehlo.return", |b, state| {
        let inner = Ctx {
            body: b,
            in_avals: &[],
            out_avals: &[],
        };
        let n = constant_scalar(b, length as f64, &counter)?;
        let boolean = ShapedArray::scalar(DType::Bool);
        Ok(vec![compare_values(
            &inner,
            state[0],
            n,
            DType::I32,
            "LT",
            &boolean,
        )?])
    })?;
    let step = ctx.body.region(types, "stablehlo.return", step)?;
    ctx.body
        .op_with_regions("stablehlo.while", init, types, &[], vec![cond, step])
}

/// Lowers a `treduce` equation to a `stablehlo.while`.
pub(super) fn treduce<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    params: &Params,
    inputs: &[Value<'c, 'b>],
    functions: &mut Functions<'_, 'c>,
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let p = TreduceParams::read(params).map_err(ir)?;
    let counter = ShapedArray::scalar(DType::I32);
    let mut state_avals = vec![counter.clone()];
    state_avals.extend(ctx.in_avals.iter().cloned());
    state_avals.extend(ctx.out_avals.iter().cloned());
    let types: Vec<String> = state_avals.iter().map(mlir_type).collect();
    let type_refs: Vec<&str> = types.iter().map(String::as_str).collect();
    let mut init = vec![constant_scalar(ctx.body, 0.0, &counter)?];
    init.extend_from_slice(inputs);
    for (aval, op) in ctx.out_avals.iter().zip(&p.ops) {
        let start = match op {
            ReduceOp::Add | ReduceOp::Concat(_) => 0.0,
            ReduceOp::Max => identity(ReduceKind::Max, aval.dtype),
        };
        init.push(splat(ctx.body, start, aval)?);
    }
    let results = counted_while(ctx, &type_refs, &init, p.length, |b, state| {
        iteration(b, &p, ctx.in_avals, ctx.out_avals, state, functions)
    })?;
    Ok(results[1 + inputs.len()..].to_vec())
}

/// One iteration: the body on micro-batch `state[0]`, its results combined into the
/// accumulators; returns the next state.
fn iteration<'c, 'r>(
    b: &crate::emit::Body<'c, 'r>,
    p: &TreduceParams<'_>,
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
    let zero = constant_scalar(b, 0.0, &counter)?;
    let n_in = in_avals.len();
    let operands = &state[1..1 + n_in];
    let mut args = operands[..p.num_invariants].to_vec();
    for (x, aval) in operands.iter().zip(in_avals).skip(p.num_invariants) {
        let starts: Vec<Value<'c, 'r>> = (0..aval.rank())
            .map(|d| if d == p.axis { i } else { zero })
            .collect();
        let mut sizes = aval.shape.clone();
        sizes[p.axis] = 1;
        let mut operands = vec![*x];
        operands.extend(starts);
        let slice = inner.op1(
            "stablehlo.dynamic_slice",
            &operands,
            &ShapedArray::new(aval.dtype, &sizes),
            &[("slice_sizes", i64_array(&sizes))],
        )?;
        let mut shape = aval.shape.clone();
        shape.remove(p.axis);
        args.push(inner.op1(
            "stablehlo.reshape",
            &[slice],
            &ShapedArray::new(aval.dtype, &shape),
            &[],
        )?);
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
    next.extend_from_slice(operands);
    let accs = &state[1 + n_in..];
    for (((acc, out), aval), op) in accs.iter().zip(outs).zip(out_avals).zip(&p.ops) {
        next.push(match op {
            ReduceOp::Add => inner.op1("stablehlo.add", &[*acc, out], aval, &[])?,
            ReduceOp::Max => inner.op1("stablehlo.maximum", &[*acc, out], aval, &[])?,
            ReduceOp::Concat(a) => {
                let a = usize::try_from(*a)
                    .map_err(|_| LowerError::Build(format!("treduce: Concat axis {a} < 0")))?;
                let mut shape = aval.shape.clone();
                shape[a] = 1;
                let update = inner.op1(
                    "stablehlo.reshape",
                    &[out],
                    &ShapedArray::new(aval.dtype, &shape),
                    &[],
                )?;
                let mut operands = vec![*acc, update];
                operands.extend((0..aval.rank()).map(|d| if d == a { i } else { zero }));
                inner.op1("stablehlo.dynamic_update_slice", &operands, aval, &[])?
            }
        });
    }
    Ok(next)
}
