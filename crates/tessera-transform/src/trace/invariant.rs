//! The tracing API of the collectives `check_vma=True` bodies and JAX's reduced/unreduced types
//! use: `psum_invariant` (JAX's `lax.psum` under `check_vma`), `all_gather_invariant`
//! (`lax.all_gather_invariant`), `preduced`, `vary_unreduced_cast_p`, `reduced_vary_cast_p`
//! (the casts `lax.pcast` dispatches to, [`Tensor::pcast`]), `unreduced_psum` (the sum an
//! unreduced value owes), `all_gather_reduced` (Varying -> Reduced) and
//! `unreduced_reduce_scatter` (`lax.unreduced_psum_scatter`, Unreduced -> Varying), and the
//! asynchronous starts of `psum_invariant`, `unreduced_psum`, `all_gather_reduced` and
//! `unreduced_reduce_scatter`, each returning a [`Pending`]. `psum_invariant`,
//! `all_gather_invariant` and `vary_unreduced_cast_p` cast their operand with `pvary` where the
//! primitive needs a varying one, as the other collectives do; the others take their operand as
//! it is typed (as JAX's wrappers do), so a value of the wrong type is refused by the shape rule.

use super::{Pending, Tensor};
use crate::params::{ParamValue, Params};
use crate::prim::Prim;

fn axes_param(axes: &[impl AsRef<str>]) -> ParamValue {
    ParamValue::Tuple(
        axes.iter()
            .map(|a| ParamValue::Str(a.as_ref().to_owned()))
            .collect(),
    )
}

fn bind_axes(prim: Prim, x: &Tensor, axes: &[impl AsRef<str>]) -> Tensor {
    Tensor::bind1(prim, Params::new().with("axes", axes_param(axes)), &[x])
}

/// What [`Tensor::pcast`] casts to (JAX's `to=` of `lax.pcast`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PcastTo {
    /// `to='varying'`: from invariant (`pvary`) or from reduced (`reduced_vary_cast_p`).
    Varying,
    /// `to='reduced'`: from invariant (`preduced`).
    Reduced,
    /// `to='unreduced'`: from varying (`vary_unreduced_cast_p`).
    Unreduced,
}

impl PcastTo {
    /// Reads JAX's spelling (`'varying'`, `'reduced'`, `'unreduced'`); anything else is JAX's
    /// error naming the allowed values.
    pub fn parse(to: &str) -> crate::error::Result<PcastTo> {
        match to {
            "varying" => Ok(PcastTo::Varying),
            "reduced" => Ok(PcastTo::Reduced),
            "unreduced" => Ok(PcastTo::Unreduced),
            other => Err(crate::error::type_error(
                "pcast",
                format!(
                    "got to='{other}'; the allowed `to` values are 'varying', 'reduced' and \
                     'unreduced'"
                ),
            )),
        }
    }

    /// JAX's spelling.
    pub fn name(self) -> &'static str {
        match self {
            PcastTo::Varying => "varying",
            PcastTo::Reduced => "reduced",
            PcastTo::Unreduced => "unreduced",
        }
    }
}

/// The state of a value over some mesh axes (JAX's `_get_from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum AxisState {
    Varying,
    Unreduced,
    Reduced,
    Invarying,
}

impl AxisState {
    fn name(self) -> &'static str {
        match self {
            AxisState::Varying => "varying",
            AxisState::Unreduced => "unreduced",
            AxisState::Reduced => "reduced",
            AxisState::Invarying => "invarying",
        }
    }
}

/// The one state `x` is in over all of `axes`, or JAX's error naming `what` where the axes
/// disagree.
fn state_over(x: &Tensor, axes: &[&str], what: &str) -> Result<AxisState, String> {
    let aval = x.aval();
    let (reduced, unreduced) = (aval.reduced(), aval.unreduced());
    let mut states: Vec<AxisState> = axes
        .iter()
        .map(|a| {
            if aval.vma.contains(*a) {
                AxisState::Varying
            } else if unreduced.contains(*a) {
                AxisState::Unreduced
            } else if reduced.contains(*a) {
                AxisState::Reduced
            } else {
                AxisState::Invarying
            }
        })
        .collect();
    states.sort_unstable();
    states.dedup();
    match states.as_slice() {
        [one] => Ok(*one),
        many => Err(format!(
            "{what} takes axes over which the value is in one state (varying, unreduced, \
             reduced or invarying); got {aval} and axes {axes:?}, states {{{}}}",
            many.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// `all_gather_dimension` normalised as JAX's wrapper does (against the result's rank).
fn gather_dimension(x: &Tensor, axis: i64, tiled: bool) -> i64 {
    let rank = x.rank() as i64 + i64::from(!tiled);
    if axis < 0 { axis + rank } else { axis }
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

    /// The value, reduced over the named axes, typed varying over them instead
    /// (`reduced_vary_cast_p`, the identity on values).
    pub fn reduced_vary_cast(&self, axes: &[impl AsRef<str>]) -> Tensor {
        bind_axes(Prim::ReducedVaryCast, self, axes)
    }

    /// Casts the value over `axes` as JAX's `lax.pcast(x, axes, to=...)` does: from invariant
    /// to varying (`pvary`) or reduced (`preduced`), from varying to unreduced
    /// (`vary_unreduced_cast_p`), from reduced to varying (`reduced_vary_cast_p`). Other pairs,
    /// and axes over which the value is in different states, fail the trace with JAX's errors.
    pub fn pcast(&self, axes: &[&str], to: PcastTo) -> Tensor {
        if axes.is_empty() {
            return self.clone();
        }
        let from = match state_over(self, axes, "pcast") {
            Ok(from) => from,
            Err(e) => return self.fail("pcast", e),
        };
        match (from, to) {
            (AxisState::Invarying, PcastTo::Varying) => self.pvary(axes),
            (AxisState::Invarying, PcastTo::Reduced) => self.preduced(axes),
            (AxisState::Varying, PcastTo::Unreduced) => self.vary_unreduced_cast(axes),
            (AxisState::Reduced, PcastTo::Varying) => self.reduced_vary_cast(axes),
            (from, to) => self.fail(
                "pcast",
                format!(
                    "unsupported pcast from={} to={}; the supported casts are invarying -> \
                     varying, invarying -> reduced, varying -> unreduced and reduced -> varying",
                    from.name(),
                    to.name()
                ),
            ),
        }
    }

    /// The blocks of every device of `axis_name` gathered along result dimension `axis`
    /// (concatenated when `tiled`, else stacked), typed reduced over the axis
    /// (`all_gather_reduced`, Varying -> Reduced).
    pub fn all_gather_reduced(&self, axis_name: &str, axis: i64, tiled: bool) -> Tensor {
        self.all_gather_reduced_over(&[axis_name], axis, tiled)
    }

    /// [`Tensor::all_gather_reduced`] over several axes.
    pub fn all_gather_reduced_over(&self, axes: &[&str], axis: i64, tiled: bool) -> Tensor {
        self.all_gather_reduced_with(Prim::AllGatherReduced, axes, axis, tiled)
    }

    fn all_gather_reduced_with(&self, prim: Prim, axes: &[&str], axis: i64, tiled: bool) -> Tensor {
        let size = super::collectives::axis_size(self, axes);
        let params = Params::new()
            .with(
                "all_gather_dimension",
                ParamValue::Int(gather_dimension(self, axis, tiled)),
            )
            .with("axis_name", axes_param(axes))
            .with("axis_size", ParamValue::Int(size))
            .with("tiled", ParamValue::Bool(tiled));
        Tensor::bind1(prim, params, &[self])
    }

    /// The sum an unreduced value owes over `axis_name`, of which each device keeps its part of
    /// dimension `scatter_dimension` (a block when `tiled`, one index otherwise); the result
    /// varies over the axis (`unreduced_psum_scatter`, printed `unreduced_reduce_scatter`).
    pub fn unreduced_psum_scatter(
        &self,
        axis_name: &str,
        scatter_dimension: i64,
        tiled: bool,
    ) -> Tensor {
        self.unreduced_psum_scatter_over(&[axis_name], scatter_dimension, tiled)
    }

    /// [`Tensor::unreduced_psum_scatter`] over several axes.
    pub fn unreduced_psum_scatter_over(
        &self,
        axes: &[&str],
        scatter_dimension: i64,
        tiled: bool,
    ) -> Tensor {
        let prim = Prim::UnreducedReduceScatter;
        self.unreduced_psum_scatter_with(prim, axes, scatter_dimension, tiled)
    }

    fn unreduced_psum_scatter_with(
        &self,
        prim: Prim,
        axes: &[&str],
        scatter_dimension: i64,
        tiled: bool,
    ) -> Tensor {
        let size = super::collectives::axis_size(self, axes);
        let params = Params::new()
            .with("axis_name", axes_param(axes))
            .with("axis_size", ParamValue::Int(size))
            .with("scatter_dimension", ParamValue::Int(scatter_dimension))
            .with("tiled", ParamValue::Bool(tiled));
        Tensor::bind1(prim, params, &[self])
    }

    /// Starts a [`Tensor::psum_invariant`] (`psum_invariant_start`, ended by `psum_done`).
    pub fn psum_invariant_start(&self, axes: &[&str]) -> Pending {
        let prim = Prim::PsumInvariantStart;
        Pending::new(prim, bind_axes(prim, &self.pvary(axes), axes))
    }

    /// Starts an [`Tensor::unreduced_psum`] (`unreduced_psum_start`, ended by `psum_done`).
    pub fn unreduced_psum_start(&self, axes: &[&str]) -> Pending {
        let prim = Prim::UnreducedPsumStart;
        Pending::new(prim, bind_axes(prim, self, axes))
    }

    /// Starts an [`Tensor::all_gather_reduced`] (`all_gather_reduced_start`, ended by
    /// `all_gather_done`).
    pub fn all_gather_reduced_start(&self, axis_name: &str, axis: i64, tiled: bool) -> Pending {
        self.all_gather_reduced_start_over(&[axis_name], axis, tiled)
    }

    /// Starts an [`Tensor::all_gather_reduced_over`].
    pub fn all_gather_reduced_start_over(&self, axes: &[&str], axis: i64, tiled: bool) -> Pending {
        let prim = Prim::AllGatherReducedStart;
        Pending::new(prim, self.all_gather_reduced_with(prim, axes, axis, tiled))
    }

    /// Starts an [`Tensor::unreduced_psum_scatter`] (`unreduced_reduce_scatter_start`, ended
    /// by `reduce_scatter_done`). An untiled one traces and interprets, but does not lower
    /// (nor in JAX).
    pub fn unreduced_psum_scatter_start(
        &self,
        axis_name: &str,
        scatter_dimension: i64,
        tiled: bool,
    ) -> Pending {
        self.unreduced_psum_scatter_start_over(&[axis_name], scatter_dimension, tiled)
    }

    /// Starts an [`Tensor::unreduced_psum_scatter_over`].
    pub fn unreduced_psum_scatter_start_over(
        &self,
        axes: &[&str],
        scatter_dimension: i64,
        tiled: bool,
    ) -> Pending {
        let prim = Prim::UnreducedReduceScatterStart;
        Pending::new(
            prim,
            self.unreduced_psum_scatter_with(prim, axes, scatter_dimension, tiled),
        )
    }
}
