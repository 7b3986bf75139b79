//! Elementwise rules: operands are first broadcast to the result shape (the IR allows scalars and
//! size-1 dimensions; StableHLO wants equal shapes).

use melior::ir::Value;
use tessera_ir::prim::{BinaryOp, CompareOp, ElementwiseOp, RoundingMethod, UnaryOp, UnaryParams};
use tessera_ir::{DType, Params, Prim, ShapedArray};

use super::control::splat;
use super::{Ctx, i64_array, ir};
use crate::context::LowerError;

/// Broadcasts `value` of type `aval` to `shape` (a no-op when equal).
pub(crate) fn broadcast<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    value: Value<'c, 'b>,
    aval: &ShapedArray,
    shape: &[i64],
) -> Result<Value<'c, 'b>, LowerError> {
    if aval.shape == shape {
        return Ok(value);
    }
    let dims: Vec<i64> = if aval.rank() == 0 {
        vec![]
    } else {
        (0..aval.rank() as i64)
            .map(|d| d + (shape.len() - aval.rank()) as i64)
            .collect()
    };
    let out = ShapedArray::new(aval.dtype, shape);
    ctx.op1(
        "stablehlo.broadcast_in_dim",
        &[value],
        &out,
        &[("broadcast_dimensions", i64_array(&dims))],
    )
}

fn broadcast_all<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    inputs: &[Value<'c, 'b>],
    shape: &[i64],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    inputs
        .iter()
        .zip(ctx.in_avals)
        .map(|(&v, a)| broadcast(ctx, v, a, shape))
        .collect()
}

/// Every elementwise primitive, by its kind.
pub(super) fn lower<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let op = prim
        .elementwise()
        .ok_or_else(|| LowerError::Build(format!("{} is not elementwise", prim.name())))?;
    match op {
        ElementwiseOp::Unary(u) => unary(ctx, u, params, inputs),
        ElementwiseOp::Binary(b) => binary(ctx, b, inputs),
        ElementwiseOp::Compare(c) => compare(ctx, c, inputs),
        ElementwiseOp::SelectN => select_n(ctx, inputs),
        ElementwiseOp::Clamp => clamp(ctx, inputs),
        ElementwiseOp::Convert => convert(ctx, inputs),
    }
}

fn unary<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    op: UnaryOp,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let out = &ctx.out_avals[0];
    let x = inputs[0];
    let one = |name: &str, v: Value<'c, 'b>| ctx.op1(name, &[v], out, &[]);
    let value = match op {
        UnaryOp::Neg => one("stablehlo.negate", x)?,
        UnaryOp::Abs => one("stablehlo.abs", x)?,
        UnaryOp::Sign => one("stablehlo.sign", x)?,
        UnaryOp::Exp => one("stablehlo.exponential", x)?,
        UnaryOp::Exp2 => {
            let ln2 = splat(ctx.body, std::f64::consts::LN_2, out)?;
            let scaled = ctx.op1("stablehlo.multiply", &[x, ln2], out, &[])?;
            one("stablehlo.exponential", scaled)?
        }
        UnaryOp::Log => one("stablehlo.log", x)?,
        UnaryOp::Log1p => one("stablehlo.log_plus_one", x)?,
        UnaryOp::Expm1 => one("stablehlo.exponential_minus_one", x)?,
        UnaryOp::Tanh => one("stablehlo.tanh", x)?,
        UnaryOp::Logistic => one("stablehlo.logistic", x)?,
        UnaryOp::Sin => one("stablehlo.sine", x)?,
        UnaryOp::Cos => one("stablehlo.cosine", x)?,
        UnaryOp::Sqrt => one("stablehlo.sqrt", x)?,
        UnaryOp::Rsqrt => one("stablehlo.rsqrt", x)?,
        UnaryOp::Floor => one("stablehlo.floor", x)?,
        UnaryOp::Ceil => one("stablehlo.ceil", x)?,
        UnaryOp::Round => match RoundingMethod::read(params).map_err(ir)? {
            RoundingMethod::ToNearestEven => one("stablehlo.round_nearest_even", x)?,
            RoundingMethod::AwayFromZero => one("stablehlo.round_nearest_afz", x)?,
        },
        UnaryOp::Not => one("stablehlo.not", x)?,
        UnaryOp::IntegerPow => {
            let y = UnaryParams::read(UnaryOp::IntegerPow, params)
                .map_err(ir)?
                .y;
            integer_pow(ctx, x, y)?
        }
    };
    Ok(vec![value])
}

/// `x ** n` by repeated squaring (a reciprocal for negative `n`), as JAX lowers it.
fn integer_pow<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    x: Value<'c, 'b>,
    n: i64,
) -> Result<Value<'c, 'b>, LowerError> {
    let out = &ctx.out_avals[0];
    let mul = |a, b| ctx.op1("stablehlo.multiply", &[a, b], out, &[]);
    let mut acc: Option<Value<'c, 'b>> = None;
    let mut base = x;
    let mut k = n.unsigned_abs();
    while k > 0 {
        if k & 1 == 1 {
            acc = Some(match acc {
                Some(a) => mul(a, base)?,
                None => base,
            });
        }
        k >>= 1;
        if k > 0 {
            base = mul(base, base)?;
        }
    }
    let value = match acc {
        Some(a) => a,
        None => splat(ctx.body, 1.0, out)?,
    };
    if n < 0 {
        let one = splat(ctx.body, 1.0, out)?;
        return ctx.op1("stablehlo.divide", &[one, value], out, &[]);
    }
    Ok(value)
}

fn binary<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    op: BinaryOp,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let out = &ctx.out_avals[0];
    let args = broadcast_all(ctx, inputs, &out.shape)?;
    let name = match op {
        BinaryOp::Add | BinaryOp::AddAny => "stablehlo.add",
        BinaryOp::Sub => "stablehlo.subtract",
        BinaryOp::Mul => "stablehlo.multiply",
        BinaryOp::Div => "stablehlo.divide",
        BinaryOp::Rem => "stablehlo.remainder",
        BinaryOp::Pow => "stablehlo.power",
        BinaryOp::Max => "stablehlo.maximum",
        BinaryOp::Min => "stablehlo.minimum",
        BinaryOp::And => "stablehlo.and",
        BinaryOp::Or => "stablehlo.or",
        BinaryOp::Xor => "stablehlo.xor",
    };
    Ok(vec![ctx.op1(name, &args, out, &[])?])
}

/// The comparison type attribute for operands of `dtype`.
pub(crate) fn compare_type(dtype: DType) -> &'static str {
    if dtype.is_float() {
        "FLOAT"
    } else if dtype.is_unsigned() || dtype == DType::Bool {
        "UNSIGNED"
    } else {
        "SIGNED"
    }
}

/// `stablehlo.compare` with a direction (`EQ`, `LT`, ...).
pub(crate) fn compare_values<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    a: Value<'c, 'b>,
    b: Value<'c, 'b>,
    dtype: DType,
    direction: &str,
    out: &ShapedArray,
) -> Result<Value<'c, 'b>, LowerError> {
    let attrs = [
        (
            "comparison_direction",
            format!("#stablehlo<comparison_direction {direction}>"),
        ),
        (
            "compare_type",
            format!("#stablehlo<comparison_type {}>", compare_type(dtype)),
        ),
    ];
    ctx.op1("stablehlo.compare", &[a, b], out, &attrs)
}

fn compare<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    op: CompareOp,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let out = &ctx.out_avals[0];
    let args = broadcast_all(ctx, inputs, &out.shape)?;
    let direction = op.direction();
    Ok(vec![compare_values(
        ctx,
        args[0],
        args[1],
        ctx.in_avals[0].dtype,
        direction,
        out,
    )?])
}

/// `select_n(which, *cases)`: a chain of `stablehlo.select`s on `which == k`.
fn select_n<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let out = &ctx.out_avals[0];
    let args = broadcast_all(ctx, inputs, &out.shape)?;
    let pred_aval = ShapedArray::new(ctx.in_avals[0].dtype, &out.shape);
    let bool_aval = ShapedArray::new(DType::Bool, &out.shape);
    let cases = &args[1..];
    if pred_aval.dtype == DType::Bool {
        return Ok(vec![ctx.op1(
            "stablehlo.select",
            &[args[0], cases[cases.len().min(2) - 1], cases[0]],
            out,
            &[],
        )?]);
    }
    let mut acc = cases[0];
    for (k, &case) in cases.iter().enumerate().skip(1) {
        let kth = splat(ctx.body, k as f64, &pred_aval)?;
        let is_k = compare_values(ctx, args[0], kth, pred_aval.dtype, "EQ", &bool_aval)?;
        acc = ctx.op1("stablehlo.select", &[is_k, case, acc], out, &[])?;
    }
    Ok(vec![acc])
}

fn clamp<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let out = &ctx.out_avals[0];
    let args = broadcast_all(ctx, inputs, &out.shape)?;
    Ok(vec![ctx.op1("stablehlo.clamp", &args, out, &[])?])
}

/// `convert_element_type`; conversion to bool compares with zero, as XLA's convert would not.
fn convert<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let (from, out) = (&ctx.in_avals[0], &ctx.out_avals[0]);
    if out.dtype == DType::Bool && from.dtype != DType::Bool {
        let zero = splat(ctx.body, 0.0, from)?;
        return Ok(vec![compare_values(
            ctx, inputs[0], zero, from.dtype, "NE", out,
        )?]);
    }
    Ok(vec![ctx.op1(
        "stablehlo.convert",
        &inputs[..1],
        out,
        &[],
    )?])
}
