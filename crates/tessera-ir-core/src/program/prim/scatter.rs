//! The scatters besides `scatter-add`: `scatter` (replace), `scatter-mul`, `scatter-min` and
//! `scatter-max`. They share `scatter-add`'s dimension numbers, modes and rules (module
//! `indexing`); this is how each combines an update with the operand's value. `update_jaxpr`
//! and `update_consts` are kept as printed: the primitive implies the combiner.

use crate::array::{Elem, is_exact_int};
use crate::dtype::DType;

/// How a scatter combines the operand's value with an update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScatterKind {
    /// `scatter`: the update replaces the value (the last of duplicate indices wins in the
    /// interpreter; XLA leaves the order unspecified).
    Replace,
    /// `scatter-mul`.
    Mul,
    /// `scatter-min` (NaN propagates).
    Min,
    /// `scatter-max` (NaN propagates).
    Max,
}

impl ScatterKind {
    /// Every kind.
    pub const ALL: [ScatterKind; 4] = [
        ScatterKind::Replace,
        ScatterKind::Mul,
        ScatterKind::Min,
        ScatterKind::Max,
    ];

    /// The kind of a scatter primitive (`None` for `scatter-add` and the others).
    pub fn of(prim: super::Prim) -> Option<ScatterKind> {
        ScatterKind::ALL.into_iter().find(|k| k.prim() == prim)
    }

    /// The combined value of `old` and the update `u`, in `dtype` (integers exactly).
    pub fn combine(self, old: Elem, u: Elem, dtype: DType) -> Elem {
        if is_exact_int(dtype) {
            let (a, b) = (old.to_int(dtype), u.to_int(dtype));
            return Elem::from_int(
                dtype,
                match self {
                    ScatterKind::Replace => b,
                    ScatterKind::Mul => a.wrapping_mul(b),
                    ScatterKind::Min => a.min(b),
                    ScatterKind::Max => a.max(b),
                },
            );
        }
        let (a, b) = (old.to_f64(dtype), u.to_f64(dtype));
        let nan = a.is_nan() || b.is_nan();
        let value = match self {
            ScatterKind::Replace => b,
            ScatterKind::Mul => a * b,
            ScatterKind::Min if nan => f64::NAN,
            ScatterKind::Min => a.min(b),
            ScatterKind::Max if nan => f64::NAN,
            ScatterKind::Max => a.max(b),
        };
        Elem::from_f64(dtype, value)
    }

    /// The primitive of this kind.
    pub fn prim(self) -> super::Prim {
        match self {
            ScatterKind::Replace => super::Prim::Scatter,
            ScatterKind::Mul => super::Prim::ScatterMul,
            ScatterKind::Min => super::Prim::ScatterMin,
            ScatterKind::Max => super::Prim::ScatterMax,
        }
    }
}
