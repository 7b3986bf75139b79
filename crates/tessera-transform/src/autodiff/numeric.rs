//! Derivatives of the numeric family (special functions and bit operations): each
//! primitive's partial derivative with respect to each operand, as JAX defines them, from
//! which both the JVP (`Σ tᵢ ∂ᵢ`) and the VJP (`g ∂ᵢ`, summed over broadcast dimensions) follow.
//! Bit operations, `is_finite` and integer `square` have no derivative (integer results or
//! operands: symbolic zeros).

use std::f64::consts::PI;

use super::rules::unbroadcast;
use crate::params::Params;
use crate::prim::{NumericOp, Prim};
use crate::trace::Tensor;

/// The partial derivative of the result with respect to each operand (`None`: none).
fn partials(prim: Prim, x: &[Tensor], y: &Tensor) -> Vec<Option<Tensor>> {
    use NumericOp::*;
    let Some(op) = prim.numeric() else {
        return vec![Some(y.fail(prim.name(), "not a numeric primitive".into())); x.len()];
    };
    if !y.dtype().is_float() || x.iter().all(|xi| !xi.dtype().is_float()) {
        return vec![None; x.len()];
    }
    let a = &x[0];
    let one = |d: Tensor| vec![Some(d)];
    let sq = |t: &Tensor| t * t;
    match op {
        Erf => one(&(-&sq(a)).exp() * (2.0 / PI.sqrt())),
        Erfc => one(&(-&sq(a)).exp() * (-2.0 / PI.sqrt())),
        ErfInv => one(&sq(y).exp() * (PI.sqrt() / 2.0)),
        Lgamma => one(a.unary(Prim::Digamma)),
        Digamma => one(Tensor::bind1(
            Prim::Polygamma,
            Params::new(),
            &[&a.full_like_scalar(1.0), a],
        )),
        Polygamma => {
            let m1 = &x[0] + 1.0;
            vec![
                None,
                Some(Tensor::bind1(Prim::Polygamma, Params::new(), &[&m1, &x[1]])),
            ]
        }
        Tan => one(1.0 + &sq(y)),
        Asin => one((1.0 - &sq(a)).rsqrt()),
        Acos => one(-&(1.0 - &sq(a)).rsqrt()),
        Atan => one(1.0 / &(1.0 + &sq(a))),
        Sinh => one(a.unary(Prim::Cosh)),
        Cosh => one(a.unary(Prim::Sinh)),
        Asinh => one((&sq(a) + 1.0).rsqrt()),
        Acosh => one((&(a - 1.0) * &(a + 1.0)).rsqrt()),
        Atanh => one(1.0 / &(1.0 - &sq(a))),
        Cbrt => one(1.0 / &(&sq(y) * 3.0)),
        Square => one(a * 2.0),
        Atan2 => {
            let b = &x[1];
            let norm = &sq(a) + &sq(b);
            vec![Some(b / &norm), Some(-&(a / &norm))]
        }
        IsFinite | ShiftLeft | ShiftRightLogical | ShiftRightArithmetic | BitcastConvertType
        | PopulationCount => vec![None; x.len()],
    }
}

/// The tangent of the result: `Σ tᵢ ∂ᵢ` over the operands with a tangent and a derivative.
pub(super) fn jvp(
    prim: Prim,
    x: &[Tensor],
    y: &[Tensor],
    ts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    let mut sum: Option<Tensor> = None;
    for (d, t) in partials(prim, x, &y[0]).into_iter().zip(ts) {
        if let (Some(d), Some(t)) = (d, t) {
            let term = t * &d;
            sum = Some(match sum {
                Some(s) => &s + &term,
                None => term,
            });
        }
    }
    vec![sum]
}

/// The cotangent of each operand: `g ∂ᵢ`, summed down to the operand's shape.
pub(super) fn vjp(prim: Prim, x: &[Tensor], y: &[Tensor], g: &Tensor) -> Vec<Option<Tensor>> {
    partials(prim, x, &y[0])
        .into_iter()
        .zip(x)
        .map(|(d, xi)| {
            d.filter(|_| xi.dtype().is_float())
                .map(|d| unbroadcast(&(g * &d), xi.shape()))
        })
        .collect()
}
