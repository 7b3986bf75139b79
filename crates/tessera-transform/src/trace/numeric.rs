//! The tracing API of the numeric family, named as in `jax.lax`: special functions,
//! inverse and hyperbolic trigonometry, and bit operations on integers.

use super::Tensor;
use crate::dtype::DType;
use crate::params::{ParamValue, Params};
use crate::prim::Prim;

impl Tensor {
    /// The error function.
    pub fn erf(&self) -> Tensor {
        self.unary(Prim::Erf)
    }
    /// `1 - erf(x)`, accurate for large `x`.
    pub fn erfc(&self) -> Tensor {
        self.unary(Prim::Erfc)
    }
    /// The inverse error function.
    pub fn erf_inv(&self) -> Tensor {
        self.unary(Prim::ErfInv)
    }
    /// `ln |Γ(x)|`.
    pub fn lgamma(&self) -> Tensor {
        self.unary(Prim::Lgamma)
    }
    /// `Γ'(x) / Γ(x)`.
    pub fn digamma(&self) -> Tensor {
        self.unary(Prim::Digamma)
    }
    /// The `m`-th derivative of digamma at `self` (`m` a whole number, as in `lax.polygamma`).
    pub fn polygamma(&self, m: &Tensor) -> Tensor {
        m.binary(Prim::Polygamma, self)
    }
    /// `atan(self / other)` in the right quadrant.
    pub fn atan2(&self, other: &Tensor) -> Tensor {
        self.binary(Prim::Atan2, other)
    }
    /// Tangent.
    pub fn tan(&self) -> Tensor {
        self.unary(Prim::Tan)
    }
    /// Arcsine.
    pub fn asin(&self) -> Tensor {
        self.unary(Prim::Asin)
    }
    /// Arccosine.
    pub fn acos(&self) -> Tensor {
        self.unary(Prim::Acos)
    }
    /// Arctangent.
    pub fn atan(&self) -> Tensor {
        self.unary(Prim::Atan)
    }
    /// Hyperbolic sine.
    pub fn sinh(&self) -> Tensor {
        self.unary(Prim::Sinh)
    }
    /// Hyperbolic cosine.
    pub fn cosh(&self) -> Tensor {
        self.unary(Prim::Cosh)
    }
    /// Inverse hyperbolic sine.
    pub fn asinh(&self) -> Tensor {
        self.unary(Prim::Asinh)
    }
    /// Inverse hyperbolic cosine.
    pub fn acosh(&self) -> Tensor {
        self.unary(Prim::Acosh)
    }
    /// Inverse hyperbolic tangent.
    pub fn atanh(&self) -> Tensor {
        self.unary(Prim::Atanh)
    }
    /// Cube root.
    pub fn cbrt(&self) -> Tensor {
        self.unary(Prim::Cbrt)
    }
    /// `x * x`.
    pub fn square(&self) -> Tensor {
        self.unary(Prim::Square)
    }
    /// Whether each element is neither infinite nor NaN.
    pub fn is_finite(&self) -> Tensor {
        self.unary(Prim::IsFinite)
    }
    /// `self << amount` (0 where the amount is the bit width or more).
    pub fn shift_left(&self, amount: &Tensor) -> Tensor {
        self.binary(Prim::ShiftLeft, amount)
    }
    /// `self >> amount` filling with zeros.
    pub fn shift_right_logical(&self, amount: &Tensor) -> Tensor {
        self.binary(Prim::ShiftRightLogical, amount)
    }
    /// `self >> amount` filling with the sign bit.
    pub fn shift_right_arithmetic(&self, amount: &Tensor) -> Tensor {
        self.binary(Prim::ShiftRightArithmetic, amount)
    }
    /// The number of set bits of each element.
    pub fn population_count(&self) -> Tensor {
        self.unary(Prim::PopulationCount)
    }
    /// The same bits read as `dtype` (of the same width).
    pub fn bitcast_convert_type(&self, dtype: DType) -> Tensor {
        let params = Params::new().with("new_dtype", ParamValue::Name(dtype.numpy_name().into()));
        Tensor::bind1(Prim::BitcastConvertType, params, &[self])
    }
}
