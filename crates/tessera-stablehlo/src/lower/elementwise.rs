//! Elementwise rules: operands are first broadcast to the result shape (the IR allows scalars and
//! size-1 dimensions; StableHLO wants equal shapes).

use melior::ir::Value;
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

pub(super) fn unary<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    params: &Params,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let out = &ctx.out_avals[0];
    let x = inputs[0];
    let one = |name: &str, v: Value<'c, 'b>| ctx.op1(name, &[v], out, &[]);
    let value = match prim {
        Prim::Neg => one("stablehlo.negate", x)?,
        Prim::Abs => one("stablehlo.abs", x)?,
        Prim::Sign => one("stablehlo.sign", x)?,
        Prim::Exp => one("stablehlo.exponential", x)?,
        Prim::Exp2 => {
            let ln2 = splat(ctx.body, std::f64::consts::LN_2, out)?;
            let scaled = ctx.op1("stablehlo.multiply", &[x, ln2], out, &[])?;
            one("stablehlo.exponential", scaled)?
        }
        Prim::Log => one("stablehlo.log", x)?,
        Prim::Log1p => one("stablehlo.log_plus_one", x)?,
        Prim::Expm1 => one("stablehlo.exponential_minus_one", x)?,
        Prim::Tanh => one("stablehlo.tanh", x)?,
        Prim::Logistic => one("stablehlo.logistic", x)?,
        Prim::Sin => one("stablehlo.sine", x)?,
        Prim::Cos => one("stablehlo.cosine", x)?,
        Prim::Sqrt => one("stablehlo.sqrt", x)?,
        Prim::Rsqrt => one("stablehlo.rsqrt", x)?,
        Prim::Floor => one("stablehlo.floor", x)?,
        Prim::Ceil => one("stablehlo.ceil", x)?,
        Prim::Round
            if params
                .get("rounding_method")
                .and_then(tessera_ir::ParamValue::as_int)
                == Some(1) =>
        {
            one("stablehlo.round_nearest_even", x)?
        }
        Prim::Round => one("stablehlo.round_nearest_afz", x)?,
        Prim::Not => one("stablehlo.not", x)?,
        Prim::IntegerPow => integer_pow(ctx, x, params.int("integer_pow", "y").map_err(ir)?)?,
        other => return Err(LowerError::Build(format!("{} is not unary", other.name()))),
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

pub(super) fn binary<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let out = &ctx.out_avals[0];
    let args = broadcast_all(ctx, inputs, &out.shape)?;
    let name = match prim {
        Prim::Add | Prim::AddAny => "stablehlo.add",
        Prim::Sub => "stablehlo.subtract",
        Prim::Mul => "stablehlo.multiply",
        Prim::Div => "stablehlo.divide",
        Prim::Rem => "stablehlo.remainder",
        Prim::Pow => "stablehlo.power",
        Prim::Max => "stablehlo.maximum",
        Prim::Min => "stablehlo.minimum",
        Prim::And => "stablehlo.and",
        Prim::Or => "stablehlo.or",
        Prim::Xor => "stablehlo.xor",
        other => return Err(LowerError::Build(format!("{} is not binary", other.name()))),
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

pub(super) fn compare<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    prim: Prim,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let out = &ctx.out_avals[0];
    let args = broadcast_all(ctx, inputs, &out.shape)?;
    let direction = match prim {
        Prim::Eq => "EQ",
        Prim::Ne => "NE",
        Prim::Lt => "LT",
        Prim::Le => "LE",
        Prim::Gt => "GT",
        _ => "GE",
    };
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
pub(super) fn select_n<'c, 'b>(
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

pub(super) fn clamp<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    inputs: &[Value<'c, 'b>],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let out = &ctx.out_avals[0];
    let args = broadcast_all(ctx, inputs, &out.shape)?;
    Ok(vec![ctx.op1("stablehlo.clamp", &args, out, &[])?])
}

/// `convert_element_type`; conversion to bool compares with zero, as XLA's convert would not.
pub(super) fn convert<'c, 'b>(
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
