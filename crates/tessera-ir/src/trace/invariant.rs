//! The tracing API of the collectives `check_vma=True` bodies and JAX's reduced/unreduced types
//! use: `psum_invariant` (JAX's `lax.psum` under `check_vma`), `all_gather_invariant`
//! (`lax.all_gather_invariant`), `preduced`, `vary_unreduced_cast_p` and `unreduced_psum`
//! (`lax.pcast` to reduced / unreduced, and the sum an unreduced value owes). Each casts its
//! operand with `pvary` where the primitive needs a varying one, as the other collectives do.

use super::Tensor;
use crate::params::{ParamValue, Params};
use crate::prim::Prim;

fn axes_param(axes: &[&str]) -> ParamValue {
    ParamValue::Tuple(
        axes.iter()
            .map(|a| ParamValue::Str((*a).to_owned()))
            .collect(),
    )
}

fn bind_axes(prim: Prim, x: &Tensor, axes: &[&str]) -> Tensor {
    Tensor::bind1(prim, Params::new().with("axes", axes_param(axes)), &[x])
}

impl Tensor {
    /// The sum over the named axes, invariant over them (`psum_invariant`).
    pub fn psum_invariant(&self, axes: &[&str]) -> Tensor {
        bind_axes(Prim::PsumInvariant, &self.pvary(axes), axes)
    }

    /// The blocks of every device of `axis_name` gathered along result dimension `axis`
    /// (concatenated when `tiled`, else stacked), invariant over the axis
    /// (`all_gather_invariant`).
    pub fn all_gather_invariant(&self, axis_name: &str, axis: i64, tiled: bool) -> Tensor {
        let size = super::collectives::axis_size(self, &[axis_name]);
        let params = Params::new()
            .with("all_gather_dimension", ParamValue::Int(axis))
            .with("axis_name", axes_param(&[axis_name]))
            .with("axis_size", ParamValue::Int(size))
            .with("tiled", ParamValue::Bool(tiled));
        Tensor::bind1(
            Prim::AllGatherInvariant,
            params,
            &[&self.pvary(&[axis_name])],
        )
    }

    /// The value, typed reduced over the named axes, over which it must be invariant
    /// (`preduced`).
    pub fn preduced(&self, axes: &[&str]) -> Tensor {
        bind_axes(Prim::Preduced, self, axes)
    }

    /// The value, typed unreduced over the named axes: what it stands for is the sum of every
    /// device's value (`vary_unreduced_cast_p`).
    pub fn vary_unreduced_cast(&self, axes: &[&str]) -> Tensor {
        bind_axes(Prim::VaryUnreducedCast, &self.pvary(axes), axes)
    }

    /// The sum an unreduced value owes over the named axes (`unreduced_psum`).
    pub fn unreduced_psum(&self, axes: &[&str]) -> Tensor {
        bind_axes(Prim::UnreducedPsum, self, axes)
    }
}
