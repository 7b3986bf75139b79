//! `round`'s `rounding_method` (JAX's `lax.RoundingMethod`), read once from the equation's
//! parameters by the shape rule, the interpreter and the lowering, so they agree on it.
//!
//! JAX prints the enum as its integer (`rounding_method=0` away from zero, `1` to nearest even)
//! on Python 3.11 and later, and as `RoundingMethod.TO_NEAREST_EVEN` before; both are read, a
//! bare member name too. Anything else, or no value, is an error: `round_p` always carries it.

use crate::error::{IrError, Result};
use crate::program::params::{ParamValue, Params};

/// How `round` rounds halfway cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoundingMethod {
    /// Halves away from zero (`lax.round`'s default; `RoundingMethod.AWAY_FROM_ZERO`, 0).
    AwayFromZero,
    /// Halves to the even neighbour (`jnp.round`; `RoundingMethod.TO_NEAREST_EVEN`, 1).
    ToNearestEven,
}

impl RoundingMethod {
    /// The parameter's name in `round[...]`.
    pub const PARAM: &'static str = "rounding_method";

    /// The method of a `round` equation (its typed [`UnaryParams`](super::UnaryParams)' field,
    /// read once and kept with the parameters).
    pub fn read(params: &Params) -> Result<RoundingMethod> {
        Ok(super::UnaryParams::read(super::UnaryOp::Round, params)?.rounding)
    }

    pub(super) fn read_printed(params: &Params) -> Result<RoundingMethod> {
        let value = params
            .get(Self::PARAM)
            .ok_or_else(|| malformed("nothing"))?;
        Self::from_param(value).ok_or_else(|| malformed(&value.to_string()))
    }

    /// The method a parameter value names: JAX's integer or its enum member's name.
    pub fn from_param(value: &ParamValue) -> Option<RoundingMethod> {
        let name = match value {
            ParamValue::Int(v) | ParamValue::NpInt(v) => return Self::from_int(*v),
            ParamValue::Name(n) => n.strip_prefix("RoundingMethod.").unwrap_or(n),
            ParamValue::Float(..)
            | ParamValue::Bool(_)
            | ParamValue::Tuple(_)
            | ParamValue::List(_)
            | ParamValue::Str(_)
            | ParamValue::Set(_)
            | ParamValue::Jaxpr(_)
            | ParamValue::Record(..) => return None,
        };
        Self::ALL.into_iter().find(|m| m.jax_name() == name)
    }

    /// Every method, in the order of JAX's enum (a method's position is its integer).
    const ALL: [RoundingMethod; 2] = [RoundingMethod::AwayFromZero, RoundingMethod::ToNearestEven];

    fn from_int(v: i64) -> Option<RoundingMethod> {
        usize::try_from(v)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
    }

    /// The name of JAX's enum member.
    pub fn jax_name(self) -> &'static str {
        match self {
            RoundingMethod::AwayFromZero => "AWAY_FROM_ZERO",
            RoundingMethod::ToNearestEven => "TO_NEAREST_EVEN",
        }
    }

    /// The value JAX prints for this method (its integer).
    pub fn param(self) -> ParamValue {
        ParamValue::Int(match self {
            RoundingMethod::AwayFromZero => 0,
            RoundingMethod::ToNearestEven => 1,
        })
    }

    /// `x` rounded to an integer by this method.
    pub fn round(self, x: f64) -> f64 {
        match self {
            RoundingMethod::AwayFromZero => x.round(),
            RoundingMethod::ToNearestEven => x.round_ties_even(),
        }
    }
}

fn malformed(found: &str) -> IrError {
    IrError::Param {
        prim: "round".into(),
        param: RoundingMethod::PARAM.into(),
        expected: format!(
            "0 or 1 (RoundingMethod.AWAY_FROM_ZERO or RoundingMethod.TO_NEAREST_EVEN), got \
             {found}"
        ),
    }
}
