//! Evaluation rules of the `numeric` family (moved from the core crate's `prim/numeric.rs`).

use ndarray::Zip;
use tessera_ir_core::array::{Array, Elem, is_exact_int};
use tessera_ir_core::aval::ShapedArray;
use tessera_ir_core::dtype::DType;
use tessera_ir_core::error::{IrError, Result};
use tessera_ir_core::prim::numeric::{Form, NumericOp, bits_of, form, from_bits};

pub(crate) fn eval(op: NumericOp, inputs: &[Array], outputs: &[ShapedArray]) -> Result<Vec<Array>> {
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
