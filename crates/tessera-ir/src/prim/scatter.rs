//! The scatters besides `scatter-add`: `scatter` (replace), `scatter-mul`, `scatter-min` and
//! `scatter-max`. They share `scatter-add`'s dimension numbers, modes and rules (module
//! `indexing`); this is how each combines an update with the operand's value. `update_jaxpr`
//! and `update_consts` are kept as printed: the primitive implies the combiner.

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

    /// The combined value of `old` and the update `u`.
    pub(super) fn combine(self, old: f64, u: f64, dtype: DType) -> f64 {
        let nan = dtype.is_float() && (old.is_nan() || u.is_nan());
        match self {
            ScatterKind::Replace => u,
            ScatterKind::Mul if dtype.is_int() => dtype.wrap((old as i128).wrapping_mul(u as i128)),
            ScatterKind::Mul => old * u,
            ScatterKind::Min if nan => f64::NAN,
            ScatterKind::Min => old.min(u),
            ScatterKind::Max if nan => f64::NAN,
            ScatterKind::Max => old.max(u),
        }
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
