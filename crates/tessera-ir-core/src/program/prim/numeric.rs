//! Issue 20 B's elementwise primitives: special functions (`erf`, `erfc`, `erf_inv`, `lgamma`,
//! `digamma`, `polygamma`, `atan2`, the inverse and hyperbolic trigonometric functions, `cbrt`,
//! `square`, `is_finite`) and bit operations (the three shifts, `bitcast_convert_type`,
//! `population_count`). Shape rules and interpretation; the values follow XLA (shifts by the
//! bit width or more give 0, or the sign for arithmetic right shifts).

use super::elementwise::{broadcast_shapes, common_dtype};
use super::{Prim, arity};
use crate::array::Elem;
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{Result, type_error};
use crate::program::params::Params;

/// The primitives of this family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each is the primitive of the same name
pub enum NumericOp {
    Erf,
    Erfc,
    ErfInv,
    Lgamma,
    Digamma,
    Polygamma,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Cbrt,
    Square,
    IsFinite,
    Atan2,
    ShiftLeft,
    ShiftRightLogical,
    ShiftRightArithmetic,
    BitcastConvertType,
    PopulationCount,
}

/// How a primitive of the family takes its operands.
pub enum Form {
    /// One floating-point operand, a result of its type.
    FloatUnary,
    /// One numeric operand, a result of its type.
    NumericUnary,
    /// One integer operand, a result of its type.
    IntUnary,
    /// Two floating-point operands (broadcast), a result of their type.
    FloatBinary,
    /// Two integer operands (broadcast), a result of their type.
    IntBinary,
}

/// How the special function or bit operation `op` treats its operands.
pub fn form(op: NumericOp) -> Option<Form> {
    use NumericOp::*;
    match op {
        Erf | Erfc | ErfInv | Lgamma | Digamma | Tan | Asin | Acos | Atan | Sinh | Cosh | Asinh
        | Acosh | Atanh | Cbrt => Some(Form::FloatUnary),
        Square => Some(Form::NumericUnary),
        PopulationCount => Some(Form::IntUnary),
        Atan2 | Polygamma => Some(Form::FloatBinary),
        ShiftLeft | ShiftRightLogical | ShiftRightArithmetic => Some(Form::IntBinary),
        IsFinite | BitcastConvertType => None,
    }
}

pub(super) fn abstract_eval(
    prim: Prim,
    op: NumericOp,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    let name = prim.name();
    let need = |ok: bool, what: &str, x: &ShapedArray| {
        if ok {
            Ok(())
        } else {
            Err(type_error(name, format!("needs {what} operands, got {x}")))
        }
    };
    let unary = |ok: bool, what: &str| {
        arity(prim, inputs.len(), 1)?;
        need(ok, what, &inputs[0])?;
        Ok(vec![inputs[0].clone()])
    };
    let binary = |float: bool| {
        arity(prim, inputs.len(), 2)?;
        let shape = broadcast_shapes(prim, &inputs[0].shape, &inputs[1].shape)?;
        let (dtype, weak) = common_dtype(prim, inputs)?;
        let mut out = ShapedArray::new(dtype, &shape);
        if float {
            need(dtype.is_float(), "floating-point", &out)?;
        } else {
            need(dtype.is_int(), "integer", &out)?;
        }
        out.weak_type = weak;
        Ok(vec![out])
    };
    let dtype_of = |x: Option<&ShapedArray>| x.map_or(DType::Bool, |x| x.dtype);
    let x0 = dtype_of(inputs.first());
    match form(op) {
        Some(Form::FloatUnary) => unary(x0.is_float(), "floating-point"),
        Some(Form::NumericUnary) => unary(x0 != DType::Bool, "numeric"),
        Some(Form::IntUnary) => unary(x0.is_int(), "integer"),
        Some(Form::FloatBinary) => binary(true),
        Some(Form::IntBinary) => binary(false),
        None => {
            arity(prim, inputs.len(), 1)?;
            let x = &inputs[0];
            let dtype = if op == NumericOp::IsFinite {
                need(x.dtype.is_float(), "floating-point", x)?;
                DType::Bool
            } else {
                bitcast_target(prim, params, x)?
            };
            Ok(vec![ShapedArray::new(dtype, &x.shape)])
        }
    }
}

/// `bitcast_convert_type`'s result dtype: one of the operand's width (a change of width, which
/// changes the shape, is not supported).
fn bitcast_target(prim: Prim, params: &Params, x: &ShapedArray) -> Result<DType> {
    let to = params.dtype(prim.name(), "new_dtype")?;
    let plain = |d: DType| !matches!(d, DType::Bool | DType::KeyFry);
    if to.size_in_bytes() != x.dtype.size_in_bytes() || !plain(to) || !plain(x.dtype) {
        return Err(type_error(
            prim.name(),
            format!(
                "converts between dtypes of one width (not bool or keys); got {} to {to}",
                x.dtype
            ),
        ));
    }
    Ok(to)
}

/// The bit pattern of an element of `dtype` as the dtype lays it out, in the low bits.
pub fn bits_of(e: Elem, dtype: DType) -> u64 {
    use DType::*;
    let x = e.to_f64(dtype);
    match dtype {
        Bool | U8 | U16 | U32 | U64 | I64 | F64 | KeyFry | Token => e.bits(),
        I8 | I16 | I32 => e.bits() & ((1 << (8 * dtype.size_in_bytes())) - 1),
        BF16 => u64::from(crate::dtype::bf16_from_f64(x).to_bits()),
        F16 => u64::from(crate::dtype::f16_from_f64(x).to_bits()),
        F32 => u64::from((x as f32).to_bits()),
    }
}

/// The element of `dtype` whose bit pattern (as the dtype lays it out) is `bits`.
pub fn from_bits(bits: u64, dtype: DType) -> Elem {
    use DType::*;
    match dtype {
        Bool | I8 | I16 | I32 | I64 | U8 | U16 | U32 | U64 => {
            Elem::from_int(dtype, i128::from(bits))
        }
        BF16 => Elem::from_f64(dtype, f64::from(half::bf16::from_bits(bits as u16))),
        F16 => Elem::from_f64(dtype, f64::from(half::f16::from_bits(bits as u16))),
        F32 => Elem::from_f64(dtype, f64::from(f32::from_bits(bits as u32))),
        F64 | KeyFry | Token => Elem::from_bits(bits),
    }
}
