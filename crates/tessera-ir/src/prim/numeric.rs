//! Issue 20 B's elementwise primitives: special functions (`erf`, `erfc`, `erf_inv`, `lgamma`,
//! `digamma`, `polygamma`, `atan2`, the inverse and hyperbolic trigonometric functions, `cbrt`,
//! `square`, `is_finite`) and bit operations (the three shifts, `bitcast_convert_type`,
//! `population_count`). Shape rules and interpretation; the values follow XLA (shifts by the
//! bit width or more give 0, or the sign for arithmetic right shifts).

use ndarray::Zip;

use super::elementwise::{broadcast_shapes, common_dtype};
use super::{Prim, arity};
use crate::array::{Array, Elem, is_exact_int};
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{IrError, Result, type_error};
use crate::params::Params;

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
enum Form {
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

fn form(op: NumericOp) -> Option<Form> {
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

pub(super) fn eval(op: NumericOp, inputs: &[Array], outputs: &[ShapedArray]) -> Result<Vec<Array>> {
    let out = &outputs[0];
    let dtype = inputs[0].dtype();
    let data = match form(op) {
        Some(Form::FloatBinary | Form::IntBinary) => {
            let dims: Vec<usize> = out.shape.iter().map(|&d| d as usize).collect();
            let (x, y) = (view(&inputs[0], &dims)?, view(&inputs[1], &dims)?);
            Zip::from(&x)
                .and(&y)
                .map_collect(|&a, &b| binary(op, a, b, dtype))
        }
        Some(Form::FloatUnary | Form::NumericUnary | Form::IntUnary) | None => {
            let to = out.dtype;
            inputs[0].elems().mapv(|x| unary(op, x, dtype, to))
        }
    };
    Ok(vec![Array::from_elems(out.dtype, data)])
}

fn view(a: &Array, dims: &[usize]) -> Result<ndarray::ArrayD<Elem>> {
    a.elems()
        .broadcast(ndarray::IxDyn(dims))
        .map(|v| v.to_owned())
        .ok_or_else(|| IrError::Eval(format!("cannot broadcast {:?} to {dims:?}", a.shape())))
}

/// A unary operation on an element of `dtype`, giving an element of `to`.
fn unary(op: NumericOp, e: Elem, dtype: DType, to: DType) -> Elem {
    use NumericOp::*;
    let x = e.to_f64(dtype);
    let float = |v: f64| Elem::from_f64(to, v);
    match op {
        Erf => float(libm::erf(x)),
        Erfc => float(libm::erfc(x)),
        ErfInv if dtype == DType::F32 => {
            float(f64::from(super::special_fns::erf_inv_f32(x as f32)))
        }
        ErfInv => float(super::special_fns::erf_inv(x)),
        Lgamma => float(libm::lgamma(x)),
        Digamma => float(super::special_fns::digamma(x)),
        Tan => float(x.tan()),
        Asin => float(x.asin()),
        Acos => float(x.acos()),
        Atan => float(x.atan()),
        Sinh => float(x.sinh()),
        Cosh => float(x.cosh()),
        Asinh => float(x.asinh()),
        Acosh => float(x.acosh()),
        Atanh => float(x.atanh()),
        Cbrt => float(x.cbrt()),
        Square if is_exact_int(dtype) => {
            let i = e.to_int(dtype);
            Elem::from_int(to, i.wrapping_mul(i))
        }
        Square => float(x * x),
        IsFinite => Elem::from_int(to, i128::from(x.is_finite())),
        PopulationCount => Elem::from_int(to, i128::from(bits_of(e, dtype).count_ones())),
        BitcastConvertType => from_bits(bits_of(e, dtype), to),
        Polygamma | Atan2 | ShiftLeft | ShiftRightLogical | ShiftRightArithmetic => float(f64::NAN),
    }
}

/// A binary operation on two elements of `dtype` (the result has the same dtype).
fn binary(op: NumericOp, x: Elem, y: Elem, dtype: DType) -> Elem {
    use NumericOp::*;
    let width = 8 * dtype.size_in_bytes() as u32;
    let mask = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    // The shift amount is read as unsigned: negative amounts are out of range too.
    let amount = bits_of(y, dtype);
    let bits = bits_of(x, dtype);
    let (a, b) = (x.to_f64(dtype), y.to_f64(dtype));
    match op {
        Atan2 => Elem::from_f64(dtype, a.atan2(b)),
        Polygamma => Elem::from_f64(dtype, super::special_fns::polygamma(a, b)),
        ShiftLeft | ShiftRightLogical if amount >= u64::from(width) => Elem::ZERO,
        ShiftLeft => from_bits((bits << amount) & mask, dtype),
        ShiftRightLogical => from_bits(bits >> amount, dtype),
        ShiftRightArithmetic => {
            let negative = (bits >> (width - 1)) & 1 == 1;
            let shift = amount.min(u64::from(width - 1));
            let fill = if negative { mask & !(mask >> shift) } else { 0 };
            from_bits((bits >> shift) | fill, dtype)
        }
        Erf | Erfc | ErfInv | Lgamma | Digamma | Tan | Asin | Acos | Atan | Sinh | Cosh | Asinh
        | Acosh | Atanh | Cbrt | Square | IsFinite | BitcastConvertType | PopulationCount => {
            Elem::from_f64(dtype, f64::NAN)
        }
    }
}

/// The bit pattern of an element of `dtype` as the dtype lays it out, in the low bits.
pub(crate) fn bits_of(e: Elem, dtype: DType) -> u64 {
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
pub(crate) fn from_bits(bits: u64, dtype: DType) -> Elem {
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
