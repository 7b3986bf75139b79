//! The parameters of the reductions (`reduce_*`, `argmax`/`argmin`, `cumsum` and the other
//! cumulative reductions), read and checked once into one typed value per primitive
//! ([`ReductionParams::read`]). The shape rule, the interpreter, the derivative and batching
//! rules and the lowering read its fields, never the printed parameters.

use super::{Prim, ReductionOp, axis, distinct_axes};
use crate::dtype::DType;
use crate::error::{IrError, Result, type_error};
use crate::program::params::{ParamValue, Params};

/// The typed parameters of one reduction (the variant follows the primitive's kind).
#[derive(Debug, Clone, PartialEq)]
pub enum ReductionParams {
    /// `reduce_sum`, `reduce_max`, ...: the axes reduced, each in `0..rank`, sorted.
    Axes(Vec<usize>),
    /// `argmax` / `argmin`: the one axis reduced and the dtype of the indices.
    Index {
        /// The axis reduced.
        axis: usize,
        /// The result's dtype.
        index_dtype: DType,
    },
    /// `cumsum`, `cumprod`, `cummax`, `cummin`, `cumlogsumexp`: the axis scanned and the
    /// direction.
    Scan {
        /// The axis scanned.
        axis: usize,
        /// Whether the scan runs from the last element to the first.
        reverse: bool,
    },
}

impl ReductionParams {
    /// The typed parameters of `prim`, a reduction of an operand of rank `rank`. A missing or
    /// malformed parameter, an axis out of range or an axis named twice is an error. The value
    /// is read once and kept with the parameters.
    pub fn read(prim: Prim, params: &Params, rank: usize) -> Result<Self> {
        params.typed([prim as usize, rank], |params| {
            Self::read_printed(prim, params, rank)
        })
    }

    fn read_printed(prim: Prim, params: &Params, rank: usize) -> Result<Self> {
        let op = prim
            .reduction()
            .ok_or_else(|| type_error(prim.name(), "is not a reduction"))?;
        Ok(match op {
            ReductionOp::Reduce(_) => ReductionParams::Axes(axes(prim, params, rank)?),
            ReductionOp::Argmax | ReductionOp::Argmin => match axes(prim, params, rank)?[..] {
                [axis] => ReductionParams::Index {
                    axis,
                    index_dtype: params.dtype(prim.name(), "index_dtype")?,
                },
                ref other => {
                    return Err(type_error(
                        prim.name(),
                        format!("reduces exactly one axis, got {other:?}"),
                    ));
                }
            },
            ReductionOp::Cumsum | ReductionOp::Cumulative(_) => ReductionParams::Scan {
                axis: axis(prim, params.int(prim.name(), "axis")?, rank)?,
                reverse: reverse(prim, params)?,
            },
        })
    }

    /// The axes reduced or scanned (one for `argmax` and the cumulative reductions).
    pub fn axes(&self) -> Vec<usize> {
        match self {
            ReductionParams::Axes(axes) => axes.clone(),
            ReductionParams::Index { axis, .. } | ReductionParams::Scan { axis, .. } => {
                vec![*axis]
            }
        }
    }

    /// [`ReductionParams::axes`] as the tracing API takes them.
    pub fn axes_i64(&self) -> Vec<i64> {
        self.axes().iter().map(|&a| a as i64).collect()
    }

    /// The parameters of a scan along `axis` in direction `reverse`, as JAX prints them.
    pub fn scan_params(axis: usize, reverse: bool) -> Params {
        Params::new()
            .with("axis", ParamValue::Int(axis as i64))
            .with("reverse", ParamValue::Bool(reverse))
    }
}

/// The `axes` parameter, each normalised against `rank`, sorted; an axis named twice is an
/// error (as in JAX).
fn axes(prim: Prim, params: &Params, rank: usize) -> Result<Vec<usize>> {
    distinct_axes(prim, &params.ints(prim.name(), "axes")?, rank, "axes")
}

/// `reverse`: JAX prints it on every cumulative reduction, so a missing one is an error too.
fn reverse(prim: Prim, params: &Params) -> Result<bool> {
    match params.get("reverse") {
        Some(ParamValue::Bool(b)) => Ok(*b),
        other => Err(IrError::Param {
            prim: prim.name().into(),
            param: "reverse".into(),
            expected: match other {
                Some(v) => format!("True or False, got {v}"),
                None => "True or False (JAX prints it on every cumulative reduction)".into(),
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(prim: Prim, text: &[(&str, ParamValue)], rank: usize) -> Result<ReductionParams> {
        let params = text
            .iter()
            .fold(Params::new(), |p, (k, v)| p.with(k, v.clone()));
        ReductionParams::read(prim, &params, rank)
    }

    #[test]
    fn axes_are_normalised_and_checked() {
        let axes = |a: &[i64]| [("axes", ParamValue::ints(a))];
        assert_eq!(
            read(Prim::ReduceSum, &axes(&[-1, 0]), 3).unwrap(),
            ReductionParams::Axes(vec![0, 2])
        );
        assert!(read(Prim::ReduceSum, &axes(&[0, -3]), 3).is_err());
        assert!(read(Prim::ReduceMax, &axes(&[3]), 3).is_err());
        assert!(read(Prim::Argmax, &axes(&[0, 1]), 3).is_err());
    }

    #[test]
    fn cumulative_reverse_is_required_and_boolean() {
        let axis = ("axis", ParamValue::Int(-1));
        assert_eq!(
            read(
                Prim::Cumsum,
                &[axis.clone(), ("reverse", ParamValue::Bool(true))],
                2
            )
            .unwrap(),
            ReductionParams::Scan {
                axis: 1,
                reverse: true
            }
        );
        assert!(read(Prim::Cumsum, std::slice::from_ref(&axis), 2).is_err());
        let malformed = ("reverse", ParamValue::Int(1));
        assert!(read(Prim::Cummax, &[axis, malformed], 2).is_err());
    }
}
