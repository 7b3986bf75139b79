//! Elementwise primitives: unary math, binary arithmetic and comparisons (with scalar and
//! size-1 broadcasting, as the printed jaxprs use), `select_n`, `clamp`, `convert_element_type`.

use super::{BinaryOp, ElementwiseOp, Prim, RoundingMethod, UnaryOp, arity};
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{Result, type_error};
use crate::program::params::Params;

/// Whether a unary operation is defined on floating-point operands only.
pub fn needs_float(op: UnaryOp) -> bool {
    use UnaryOp::*;
    match op {
        Exp | Exp2 | Log | Log1p | Expm1 | Tanh | Logistic | Sin | Cos | Sqrt | Rsqrt | Floor
        | Ceil | Round => true,
        Neg | Abs | Sign | Not | IntegerPow => false,
    }
}

/// The broadcast shape of two operands: equal shapes, a scalar, or equal rank with size-1 dims.
pub fn broadcast_shapes(prim: Prim, a: &[i64], b: &[i64]) -> Result<Vec<i64>> {
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
pub fn common_dtype(prim: Prim, inputs: &[ShapedArray]) -> Result<(DType, bool)> {
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
            UnaryParams::read(u, params)?;
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
                explicit: None,
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
                explicit: None,
            }])
        }
        ElementwiseOp::Convert => {
            arity(prim, inputs.len(), 1)?;
            // JAX prints both on every convert_element_type.
            let dtype = params.dtype(name, "new_dtype")?;
            let weak = params.bool(name, "weak_type")?;
            Ok(vec![ShapedArray {
                dtype,
                shape: inputs[0].shape.clone(),
                weak_type: weak,
                vma: Default::default(),
                sharding: None,
                explicit: None,
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
                explicit: None,
            }])
        }
    }
}

/// The typed parameters of a unary operation: `integer_pow`'s `y` and `round`'s
/// `rounding_method` (each only for its own primitive), read once and kept with the
/// equation's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnaryParams {
    /// `integer_pow`'s exponent (0 for the others).
    pub y: i64,
    /// `round`'s method (unread, and away from zero, for the others).
    pub rounding: RoundingMethod,
}

impl UnaryParams {
    /// The parameters of unary `op`; a missing or malformed one is an error.
    pub fn read(op: UnaryOp, params: &Params) -> Result<UnaryParams> {
        params.typed([op as usize, 0], |params| Self::read_printed(op, params))
    }

    fn read_printed(op: UnaryOp, params: &Params) -> Result<UnaryParams> {
        let mut args = UnaryParams {
            y: 0,
            rounding: RoundingMethod::AwayFromZero,
        };
        if op == UnaryOp::IntegerPow {
            args.y = params.int("integer_pow", "y")?;
        }
        if op == UnaryOp::Round {
            args.rounding = RoundingMethod::read_printed(params)?;
        }
        Ok(args)
    }
}
