//! Elementwise primitives: unary math, binary arithmetic and comparisons (with scalar and
//! size-1 broadcasting, as the printed jaxprs use), `select_n`, `clamp`, `convert_element_type`.

use ndarray::{ArrayD, IxDyn, Zip};

use super::{BinaryOp, ElementwiseOp, Prim, UnaryOp, arity};
use crate::array::Array;
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{Result, type_error};
use crate::params::Params;

/// Whether a unary operation is defined on floating-point operands only.
fn needs_float(op: UnaryOp) -> bool {
    use UnaryOp::*;
    match op {
        Exp | Exp2 | Log | Log1p | Expm1 | Tanh | Logistic | Sin | Cos | Sqrt | Rsqrt | Floor
        | Ceil | Round => true,
        Neg | Abs | Sign | Not | IntegerPow => false,
    }
}

/// The broadcast shape of two operands: equal shapes, a scalar, or equal rank with size-1 dims.
pub(crate) fn broadcast_shapes(prim: Prim, a: &[i64], b: &[i64]) -> Result<Vec<i64>> {
    if a == b || b.is_empty() {
        return Ok(a.to_vec());
    }
    if a.is_empty() {
        return Ok(b.to_vec());
    }
    if a.len() == b.len() {
        let mut out = Vec::with_capacity(a.len());
        for (&x, &y) in a.iter().zip(b) {
            if x == y || y == 1 {
                out.push(x);
            } else if x == 1 {
                out.push(y);
            } else {
                return Err(shape_mismatch(prim, a, b));
            }
        }
        return Ok(out);
    }
    Err(shape_mismatch(prim, a, b))
}

fn shape_mismatch(prim: Prim, a: &[i64], b: &[i64]) -> crate::error::IrError {
    type_error(
        prim.name(),
        format!("operand shapes {a:?} and {b:?} do not broadcast; give them equal shapes"),
    )
}

/// The common dtype of operands: weak-typed ones adopt their partner's.
pub(crate) fn common_dtype(prim: Prim, inputs: &[ShapedArray]) -> Result<(DType, bool)> {
    let strong: Vec<&ShapedArray> = inputs.iter().filter(|a| !a.weak_type).collect();
    let pick = if strong.is_empty() {
        inputs.to_vec()
    } else {
        strong.into_iter().cloned().collect()
    };
    let dtype = pick[0].dtype;
    if let Some(other) = pick.iter().find(|a| a.dtype != dtype) {
        return Err(type_error(
            prim.name(),
            format!(
                "operand dtypes {dtype} and {} differ; convert one with convert_element_type",
                other.dtype
            ),
        ));
    }
    Ok((dtype, inputs.iter().all(|a| a.weak_type)))
}

pub(super) fn abstract_eval(
    prim: Prim,
    op: ElementwiseOp,
    params: &Params,
    inputs: &[ShapedArray],
) -> Result<Vec<ShapedArray>> {
    let name = prim.name();
    match op {
        ElementwiseOp::Unary(u) => {
            arity(prim, inputs.len(), 1)?;
            let x = &inputs[0];
            if needs_float(u) && !x.dtype.is_float() {
                return Err(type_error(
                    name,
                    format!("needs a floating-point operand, got {x}"),
                ));
            }
            if u == UnaryOp::IntegerPow {
                params.int(name, "y")?;
            }
            Ok(vec![x.clone()])
        }
        ElementwiseOp::SelectN => {
            if inputs.len() < 2 {
                return Err(type_error(name, "needs a predicate and at least one case"));
            }
            let pred = &inputs[0];
            let cases = &inputs[1..];
            if !matches!(pred.dtype, DType::Bool | DType::I32) {
                return Err(type_error(
                    name,
                    format!("the predicate must be bool or int32, got {pred}"),
                ));
            }
            let (dtype, weak) = common_dtype(prim, cases)?;
            let mut shape = cases[0].shape.clone();
            for c in cases {
                shape = broadcast_shapes(prim, &shape, &c.shape)?;
            }
            shape = broadcast_shapes(prim, &shape, &pred.shape)?;
            Ok(vec![ShapedArray {
                dtype,
                shape,
                weak_type: weak,
                vma: Default::default(),
                sharding: None,
            }])
        }
        ElementwiseOp::Clamp => {
            arity(prim, inputs.len(), 3)?;
            let shape = broadcast_shapes(prim, &inputs[1].shape, &inputs[0].shape)?;
            let shape = broadcast_shapes(prim, &shape, &inputs[2].shape)?;
            let (dtype, weak) = common_dtype(prim, inputs)?;
            Ok(vec![ShapedArray {
                dtype,
                shape,
                weak_type: weak,
                vma: Default::default(),
                sharding: None,
            }])
        }
        ElementwiseOp::Convert => {
            arity(prim, inputs.len(), 1)?;
            let dtype = params.dtype(name, "new_dtype")?;
            let weak = matches!(
                params.get("weak_type"),
                Some(crate::params::ParamValue::Bool(true))
            );
            Ok(vec![ShapedArray {
                dtype,
                shape: inputs[0].shape.clone(),
                weak_type: weak,
                vma: Default::default(),
                sharding: None,
            }])
        }
        ElementwiseOp::Binary(_) | ElementwiseOp::Compare(_) => {
            arity(prim, inputs.len(), 2)?;
            let shape = broadcast_shapes(prim, &inputs[0].shape, &inputs[1].shape)?;
            let (dtype, weak) = common_dtype(prim, inputs)?;
            let logical = matches!(
                op,
                ElementwiseOp::Binary(BinaryOp::And | BinaryOp::Or | BinaryOp::Xor)
            );
            if logical && dtype.is_float() {
                return Err(type_error(
                    name,
                    format!("needs boolean or integer operands, got {dtype}"),
                ));
            }
            let comparison = matches!(op, ElementwiseOp::Compare(_));
            Ok(vec![ShapedArray {
                dtype: if comparison { DType::Bool } else { dtype },
                shape,
                weak_type: weak && !comparison,
                vma: Default::default(),
                sharding: None,
            }])
        }
    }
}

pub(super) fn eval(
    op: ElementwiseOp,
    params: &Params,
    inputs: &[Array],
    outputs: &[ShapedArray],
) -> Result<Vec<Array>> {
    let out = &outputs[0];
    let dims: Vec<usize> = out.shape.iter().map(|&d| d as usize).collect();
    let data = match op {
        ElementwiseOp::SelectN => select_n(inputs, &dims)?,
        ElementwiseOp::Clamp => {
            let (lo, x, hi) = (
                bcast(&inputs[0], &dims)?,
                bcast(&inputs[1], &dims)?,
                bcast(&inputs[2], &dims)?,
            );
            Zip::from(&lo)
                .and(&x)
                .and(&hi)
                .map_collect(|&l, &v, &h| v.max(l).min(h))
        }
        ElementwiseOp::Convert => convert(&inputs[0], out.dtype),
        ElementwiseOp::Unary(u) => {
            let y = if u == UnaryOp::IntegerPow {
                params.int("integer_pow", "y")?
            } else {
                0
            };
            let dtype = inputs[0].dtype;
            inputs[0].data.mapv(|x| unary(u, x, y, dtype))
        }
        ElementwiseOp::Binary(b) => {
            let (x, y) = (bcast(&inputs[0], &dims)?, bcast(&inputs[1], &dims)?);
            let dtype = inputs[0].dtype;
            Zip::from(&x)
                .and(&y)
                .map_collect(|&x, &y| binary(b, x, y, dtype))
        }
        ElementwiseOp::Compare(c) => {
            let (x, y) = (bcast(&inputs[0], &dims)?, bcast(&inputs[1], &dims)?);
            Zip::from(&x)
                .and(&y)
                .map_collect(|&x, &y| f64::from(u8::from(c.holds(x, y))))
        }
    };
    Ok(vec![Array::from_data(out.dtype, data)])
}

fn bcast(a: &Array, dims: &[usize]) -> Result<ArrayD<f64>> {
    a.data
        .broadcast(IxDyn(dims))
        .map(|v| v.to_owned())
        .ok_or_else(|| {
            crate::error::IrError::Eval(format!("cannot broadcast {:?} to {dims:?}", a.shape()))
        })
}

fn select_n(inputs: &[Array], dims: &[usize]) -> Result<ArrayD<f64>> {
    let pred = bcast(&inputs[0], dims)?;
    let cases = inputs[1..]
        .iter()
        .map(|c| bcast(c, dims))
        .collect::<Result<Vec<_>>>()?;
    let mut out = cases[0].clone();
    for (idx, value) in out.indexed_iter_mut() {
        let which = (pred[&idx].max(0.0) as usize).min(cases.len() - 1);
        *value = cases[which][&idx];
    }
    Ok(out)
}

fn convert(x: &Array, to: DType) -> ArrayD<f64> {
    x.data.mapv(|v| {
        if to == DType::Bool {
            f64::from(u8::from(v != 0.0))
        } else if to.is_int() && x.dtype.is_float() {
            if v.is_nan() { 0.0 } else { v.trunc() }
        } else {
            v
        }
    })
}

fn unary(op: UnaryOp, x: f64, y: i64, dtype: DType) -> f64 {
    use UnaryOp::*;
    match op {
        Neg if dtype.is_int() => dtype.wrap(-(x as i128)),
        Neg => -x,
        Abs if dtype.is_int() => dtype.wrap((x as i128).abs()),
        Abs => x.abs(),
        Sign => {
            if x.is_nan() {
                x
            } else if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        Exp => x.exp(),
        Exp2 => x.exp2(),
        Log => x.ln(),
        Log1p => x.ln_1p(),
        Expm1 => x.exp_m1(),
        Tanh => x.tanh(),
        Logistic => 1.0 / (1.0 + (-x).exp()),
        Sin => x.sin(),
        Cos => x.cos(),
        Sqrt => x.sqrt(),
        Rsqrt => 1.0 / x.sqrt(),
        Floor => x.floor(),
        Ceil => x.ceil(),
        // rounding_method 0 rounds halves away from zero, 1 to even.
        Round if y == 1 => x.round_ties_even(),
        Round => x.round(),
        Not => {
            if dtype == DType::Bool {
                f64::from(u8::from(x == 0.0))
            } else {
                dtype.wrap(!(x as i128))
            }
        }
        IntegerPow if dtype.is_int() => int_pow(x, y, dtype),
        IntegerPow => x.powi(y as i32),
    }
}

/// `x ** n` for integers: repeated wrapping multiplication, as XLA computes it.
fn int_pow(x: f64, n: i64, dtype: DType) -> f64 {
    if n < 0 {
        // 1 / x^|n| truncated: 1 for x = 1, +-1 for x = -1, 0 otherwise (XLA's integer division).
        let x = x as i128;
        let inverse = if x == 1 || (x == -1 && n % 2 == 0) {
            1
        } else if x == -1 {
            -1
        } else {
            0
        };
        return dtype.wrap(inverse);
    }
    let mut acc: i128 = 1;
    for _ in 0..n.min(128) {
        acc = (dtype.wrap(acc.wrapping_mul(x as i128))) as i128;
    }
    dtype.wrap(acc)
}

fn binary(op: BinaryOp, x: f64, y: f64, dtype: DType) -> f64 {
    use BinaryOp::*;
    let int = dtype.is_int();
    // Integers: exact in i128, wrapped to the dtype (XLA's two's-complement arithmetic).
    let (i, j) = (x as i128, y as i128);
    match op {
        Add | AddAny if int => dtype.wrap(i.wrapping_add(j)),
        Add | AddAny => x + y,
        Sub if int => dtype.wrap(i.wrapping_sub(j)),
        Sub => x - y,
        Mul if int => dtype.wrap(i.wrapping_mul(j)),
        Mul => x * y,
        // XLA: x / 0 is -1 (all bits set: the maximum of unsigned types); MIN / -1 wraps to MIN.
        Div if int && j == 0 => dtype.wrap(-1),
        Div if int => dtype.wrap(i / j),
        Div => x / y,
        // XLA: x % 0 is x; the remainder has the dividend's sign.
        Rem if int && j == 0 => x,
        Rem if int => dtype.wrap(i % j),
        Rem => x % y,
        Pow => x.powf(y),
        Max => {
            if x.is_nan() || y.is_nan() {
                f64::NAN
            } else {
                x.max(y)
            }
        }
        Min => {
            if x.is_nan() || y.is_nan() {
                f64::NAN
            } else {
                x.min(y)
            }
        }
        And => dtype.wrap(i & j),
        Or => dtype.wrap(i | j),
        Xor => dtype.wrap(i ^ j),
    }
}
