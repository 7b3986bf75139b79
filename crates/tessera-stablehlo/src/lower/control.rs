//! Constants and calls: literals and closed-over arrays become `stablehlo.constant`; a nested
//! `jit` becomes a private function and a `func.call`.

use melior::ir::Value;
use tessera_ir::dtype::{bf16_from_f64, f16_from_f64};
use tessera_ir::{Array, DType, Elem, Params, ShapedArray};

use super::{Ctx, Functions, ir, mlir_type};
use crate::context::LowerError;
use crate::emit::Body;

/// An element's text in a `dense<..>` attribute: integers exactly, floats as bit patterns.
pub(crate) fn elem_text(e: Elem, dtype: DType) -> String {
    match dtype {
        DType::Bool => (if e.to_int(dtype) != 0 {
            "true"
        } else {
            "false"
        })
        .into(),
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => format!("{}", e.to_int(dtype)),
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => format!("{}", e.to_int(dtype)),
        // Floats as exact bit patterns (MLIR accepts hex for every float type).
        DType::F64 => format!("0x{:016X}", e.bits()),
        DType::F32 => format!("0x{:08X}", (e.to_f64(dtype) as f32).to_bits()),
        DType::F16 => format!("0x{:04X}", f16_from_f64(e.to_f64(dtype)).to_bits()),
        DType::BF16 => format!("0x{:04X}", bf16_from_f64(e.to_f64(dtype)).to_bits()),
        // Never reached: `refuse_key` stops key constants before their text is built.
        DType::KeyFry => format!("{}", e.bits() & 0xFFFF_FFFF),
        // Never reached: a token is never a constant (only a `psend` makes one).
        DType::Token => "0".to_owned(),
    }
}

/// Key constants are not lowered (a key is two `u32` words in a trailing dimension).
fn refuse_key(aval: &ShapedArray) -> Result<(), LowerError> {
    if aval.dtype.is_key() {
        return Err(LowerError::Build(format!(
            "a constant of type {aval} cannot be lowered yet; pass the key's data (u32[..., 2]) \
             and wrap it with random_wrap in the program"
        )));
    }
    Ok(())
}

/// A scalar constant of type `aval`.
pub(crate) fn constant_scalar<'c, 'b>(
    body: &Body<'c, 'b>,
    value: f64,
    aval: &ShapedArray,
) -> Result<Value<'c, 'b>, LowerError> {
    constant_elem(body, Elem::from_f64(aval.dtype, value), aval)
}

/// A constant of type `aval` (any shape) whose every element is `e` (exact for integers).
pub(crate) fn constant_elem<'c, 'b>(
    body: &Body<'c, 'b>,
    e: Elem,
    aval: &ShapedArray,
) -> Result<Value<'c, 'b>, LowerError> {
    refuse_key(aval)?;
    let ty = mlir_type(aval);
    let attr = format!("dense<{}> : {ty}", elem_text(e, aval.dtype));
    Ok(body
        .op("stablehlo.constant", &[], &[&ty], &[("value", attr)])?
        .remove(0))
}

/// A splat constant `value` of type `aval` (any shape).
pub(crate) fn splat<'c, 'b>(
    body: &Body<'c, 'b>,
    value: f64,
    aval: &ShapedArray,
) -> Result<Value<'c, 'b>, LowerError> {
    constant_scalar(body, value, aval)
}

/// An array constant.
pub(crate) fn constant_array<'c, 'b>(
    body: &Body<'c, 'b>,
    array: &Array,
) -> Result<Value<'c, 'b>, LowerError> {
    let aval = array.aval();
    refuse_key(&aval)?;
    let ty = mlir_type(&aval);
    let values: Vec<Elem> = array.elem_vec();
    let text = nested(&values, &aval.shape, aval.dtype);
    body.op(
        "stablehlo.constant",
        &[],
        &[&ty],
        &[("value", format!("dense<{text}> : {ty}"))],
    )
    .map(|mut v| v.remove(0))
}

fn nested(values: &[Elem], shape: &[i64], dtype: DType) -> String {
    match shape.split_first() {
        None => values
            .first()
            .map_or_else(String::new, |&v| elem_text(v, dtype)),
        Some((&n, rest)) => {
            let chunk = rest.iter().product::<i64>().max(0) as usize;
            let parts: Vec<String> = (0..n as usize)
                .map(|i| nested(&values[i * chunk..(i + 1) * chunk], rest, dtype))
                .collect();
            format!("[{}]", parts.join(", "))
        }
    }
}

/// `jit` (and `checkpoint`, which has no `name`: give it as `fixed_name`): the nested jaxpr as
/// a private function, called with `func.call`.
pub(super) fn call<'c, 'b>(
    ctx: &Ctx<'_, 'c, 'b>,
    params: &Params,
    inputs: &[Value<'c, 'b>],
    functions: &mut Functions<'_, 'c>,
    fixed_name: Option<&str>,
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    let inner = params.jaxpr("jit", "jaxpr").map_err(ir)?;
    let name = match (fixed_name, params.get("name")) {
        (Some(fixed), _) => fixed.to_owned(),
        (None, Some(tessera_ir::ParamValue::Name(n))) => n.clone(),
        (None, Some(other)) => {
            return Err(LowerError::Build(format!(
                "jit: parameter `name` must be a name, got {other}"
            )));
        }
        (None, None) => return Err(LowerError::Build("jit: parameter `name` is missing".into())),
    };
    let symbol = functions.add(&name, inner)?;
    let outs: Vec<&ShapedArray> = ctx.out_avals.iter().collect();
    ctx.op(
        "func.call",
        inputs,
        &outs,
        &[("callee", format!("@{symbol}"))],
    )
}
