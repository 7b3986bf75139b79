//! Structural primitives: conversion, `iota`, broadcasting, reshaping, transposition and the
//! identities (`stop_gradient`, `copy`) and `add_any`.

use super::{Primitive, TypeError, type_err};
use crate::interp::{Array, EvalError, Wide, prim_err};
use crate::types::{DType, ShapedArray};
use ndarray::{ArrayD, IxDyn};

fn unary_in<'a>(prim: &Primitive, ins: &'a [ShapedArray]) -> Result<&'a ShapedArray, TypeError> {
    match ins {
        [a] => Ok(a),
        _ => Err(type_err(
            prim,
            ins,
            format!("takes 1 operand, got {}", ins.len()),
        )),
    }
}

fn is_permutation(p: &[usize], n: usize) -> bool {
    let mut seen = vec![false; n];
    p.len() == n
        && p.iter()
            .all(|&d| d < n && !std::mem::replace(&mut seen[d], true))
}

/// The shape rule of the structural family.
pub fn shape_rule(prim: &Primitive, ins: &[ShapedArray]) -> Result<ShapedArray, TypeError> {
    let err = |m: String| Err(type_err(prim, ins, m));
    match prim {
        Primitive::ConvertElementType {
            new_dtype,
            weak_type,
        } => Ok(unary_in(prim, ins)?.with_dtype(*new_dtype).weak(*weak_type)),
        Primitive::Iota {
            dtype,
            shape,
            dimension,
        } => {
            if !ins.is_empty() || *dimension >= shape.len() {
                return err(format!(
                    "needs no operands and a dimension below rank {}",
                    shape.len()
                ));
            }
            Ok(ShapedArray::new(*dtype, shape))
        }
        Primitive::BroadcastInDim {
            shape,
            broadcast_dimensions: bd,
        } => {
            let a = unary_in(prim, ins)?;
            let ok = bd.len() == a.ndim()
                && bd.windows(2).all(|w| w[0] < w[1])
                && bd
                    .iter()
                    .zip(&a.shape)
                    .all(|(&d, &s)| d < shape.len() && (s == 1 || s == shape[d]));
            if !ok {
                return err(format!(
                    "cannot broadcast to {shape:?} with broadcast_dimensions={bd:?}"
                ));
            }
            Ok(a.with_shape(shape))
        }
        Primitive::Reshape { new_sizes } => {
            let a = unary_in(prim, ins)?;
            if new_sizes.iter().product::<usize>() != a.size() {
                return err(format!(
                    "cannot reshape {} elements to {new_sizes:?}",
                    a.size()
                ));
            }
            Ok(a.with_shape(new_sizes))
        }
        Primitive::Squeeze { dimensions } => {
            let a = unary_in(prim, ins)?;
            if dimensions.iter().any(|&d| a.shape.get(d) != Some(&1)) {
                return err(format!("dimensions {dimensions:?} are not all of size 1"));
            }
            let s: Vec<usize> = (0..a.ndim())
                .filter(|d| !dimensions.contains(d))
                .map(|d| a.shape[d])
                .collect();
            Ok(a.with_shape(&s))
        }
        Primitive::ExpandDims { dimensions } => {
            let a = unary_in(prim, ins)?;
            let n = a.ndim() + dimensions.len();
            if dimensions.iter().any(|&d| d >= n) {
                return err(format!(
                    "dimensions {dimensions:?} out of range for rank {n}"
                ));
            }
            let mut it = a.shape.iter();
            let s: Vec<usize> = (0..n)
                .map(|d| {
                    if dimensions.contains(&d) {
                        1
                    } else {
                        it.next().copied().unwrap_or(1)
                    }
                })
                .collect();
            Ok(a.with_shape(&s))
        }
        Primitive::Transpose { permutation } => {
            let a = unary_in(prim, ins)?;
            if !is_permutation(permutation, a.ndim()) {
                return err(format!(
                    "{permutation:?} is not a permutation of the {} dimensions",
                    a.ndim()
                ));
            }
            let s: Vec<usize> = permutation.iter().map(|&p| a.shape[p]).collect();
            Ok(a.with_shape(&s))
        }
        Primitive::StopGradient | Primitive::Copy => Ok(unary_in(prim, ins)?.clone()),
        Primitive::AddAny => match ins {
            [a, b] if a.same_type(b) => Ok(a.clone()),
            _ => err("takes two operands of one type".into()),
        },
        _ => err("not a structural primitive".into()),
    }
}

/// Row-major reshape of any ndarray.
pub(crate) fn reshape_any<T: Clone>(a: &ArrayD<T>, shape: &[usize]) -> Option<ArrayD<T>> {
    let v: Vec<T> = a.iter().cloned().collect();
    ArrayD::from_shape_vec(IxDyn(shape), v).ok()
}

fn broadcast_any<T: Clone>(a: &ArrayD<T>, shape: &[usize], bd: &[usize]) -> Option<ArrayD<T>> {
    let mut mid = vec![1usize; shape.len()];
    for (i, &d) in bd.iter().enumerate() {
        mid[d] = a.shape()[i];
    }
    let r = reshape_any(a, &mid)?;
    r.broadcast(IxDyn(shape)).map(|v| v.to_owned())
}

fn iota(dtype: DType, shape: &[usize], dim: usize) -> Array {
    let a = ArrayD::from_shape_fn(IxDyn(shape), |ix| ix[dim] as i64);
    Array::from_wide(&Wide::I(a), dtype)
}

/// Evaluates a structural primitive.
pub fn eval(prim: &Primitive, args: &[Array]) -> Result<Array, EvalError> {
    let fail = || prim_err(prim, "operands do not fit the params");
    let avals: Vec<ShapedArray> = args.iter().map(Array::aval).collect();
    shape_rule(prim, &avals).map_err(|e| prim_err(prim, e.message))?;
    if let Primitive::Iota {
        dtype,
        shape,
        dimension,
    } = prim
    {
        if *dimension >= shape.len() {
            return Err(fail());
        }
        return Ok(iota(*dtype, shape, *dimension));
    }
    let x = args.first().ok_or_else(fail)?;
    let d = x.dtype();
    let w = x.widen();
    let out = match prim {
        Primitive::ConvertElementType { new_dtype, .. } => {
            return Ok(Array::from_wide(&w, *new_dtype));
        }
        Primitive::BroadcastInDim {
            shape,
            broadcast_dimensions,
        } => {
            crate::wide_map!(&w, a => broadcast_any(a, shape, broadcast_dimensions).ok_or_else(fail)?)
        }
        Primitive::Reshape { new_sizes } => {
            crate::wide_map!(&w, a => reshape_any(a, new_sizes).ok_or_else(fail)?)
        }
        Primitive::Squeeze { .. } | Primitive::ExpandDims { .. } => {
            let out = shape_rule(prim, &[x.aval()]).map_err(|e| prim_err(prim, e.message))?;
            crate::wide_map!(&w, a => reshape_any(a, &out.shape).ok_or_else(fail)?)
        }
        Primitive::Transpose { permutation } => {
            if !is_permutation(permutation, x.shape().len()) {
                return Err(fail());
            }
            crate::wide_map!(&w, a => a.clone().permuted_axes(IxDyn(permutation)).as_standard_layout().to_owned())
        }
        Primitive::StopGradient | Primitive::Copy => return Ok(x.clone()),
        Primitive::AddAny => {
            let y = args.get(1).ok_or_else(fail)?;
            return super::elementwise::eval(
                &Primitive::Binary(super::BinaryOp::Add),
                &[x.clone(), y.clone()],
            );
        }
        _ => return Err(fail()),
    };
    Ok(Array::from_wide(&out, d))
}
