//! The tracing API of asynchronous collectives (JAX's `psum_start`, `all_gather_start`,
//! `psum_scatter_start`, `all_to_all_start`, `pbroadcast_start` and `ppermute_start`): each
//! binds its collective's start and returns a [`Pending`], whose [`Pending::done`] binds the
//! matching done and gives the result. Work traced between the two may overlap the
//! communication. A `Pending` is not a `Tensor`: nothing but its done can take it, and `done`
//! consumes it, so a traced program always ends each start exactly once (see `prim/pending.rs`
//! for the rules the verifier applies to parsed programs).

use super::Tensor;
use crate::aval::ShapedArray;
use crate::params::Params;
use crate::prim::Prim;

/// A started collective whose result is not yet available.
#[must_use = "a started collective gives its result only through `done`"]
#[derive(Debug)]
pub struct Pending {
    /// The start's result.
    started: Tensor,
    /// The done that ends the start.
    done: Prim,
    /// The shape the result takes after the done (an untiled `all_to_all` moves its split
    /// dimension with a reshape, which must wait for the value).
    reshape: Option<Vec<i64>>,
}

impl Pending {
    pub(super) fn new(start: Prim, started: Tensor) -> Self {
        Pending {
            started,
            done: start.async_done().unwrap_or(start),
            reshape: None,
        }
    }

    /// The type the collective's result will have (JAX prints the pending value's type as
    /// this type wrapped in `Todo[...]`).
    pub fn aval(&self) -> ShapedArray {
        let mut aval = self.started.aval().clone();
        if let Some(shape) = &self.reshape {
            aval.shape.clone_from(shape);
        }
        aval
    }

    /// Waits for the collective: binds the done matching its start and returns the result.
    pub fn done(self) -> Tensor {
        let out = Tensor::bind1(self.done, Params::new(), &[&self.started]);
        match self.reshape {
            Some(shape) => out.reshape(&shape),
            None => out,
        }
    }
}

impl Tensor {
    /// Starts an all-reduce sum over the named axes ([`Tensor::psum`]).
    pub fn psum_start(&self, axes: &[&str]) -> Pending {
        Pending::new(Prim::PsumStart, self.reduction(Prim::PsumStart, axes, None))
    }

    /// Starts an all-reduce sum within `axis_index_groups` ([`Tensor::psum_in_groups`]).
    pub fn psum_start_in_groups(&self, axes: &[&str], groups: &[Vec<i64>]) -> Pending {
        Pending::new(
            Prim::PsumStart,
            self.reduction(Prim::PsumStart, axes, Some(groups)),
        )
    }

    /// Starts an [`Tensor::all_gather`].
    pub fn all_gather_start(&self, axis_name: &str, axis: i64, tiled: bool) -> Pending {
        self.all_gather_start_over(&[axis_name], None, axis, tiled)
    }

    /// Starts an [`Tensor::all_gather_over`].
    pub fn all_gather_start_over(
        &self,
        axes: &[&str],
        groups: Option<&[Vec<i64>]>,
        axis: i64,
        tiled: bool,
    ) -> Pending {
        Pending::new(
            Prim::AllGatherStart,
            self.all_gather_with(Prim::AllGatherStart, axes, groups, axis, tiled),
        )
    }

    /// Starts a [`Tensor::psum_scatter`].
    pub fn psum_scatter_start(
        &self,
        axis_name: &str,
        scatter_dimension: i64,
        tiled: bool,
    ) -> Pending {
        self.psum_scatter_start_over(&[axis_name], None, scatter_dimension, tiled)
    }

    /// Starts a [`Tensor::psum_scatter_over`].
    pub fn psum_scatter_start_over(
        &self,
        axes: &[&str],
        groups: Option<&[Vec<i64>]>,
        scatter_dimension: i64,
        tiled: bool,
    ) -> Pending {
        let prim = Prim::ReduceScatterStart;
        Pending::new(
            prim,
            self.psum_scatter_with(prim, axes, groups, scatter_dimension, tiled),
        )
    }

    /// Starts an [`Tensor::all_to_all`].
    pub fn all_to_all_start(
        &self,
        axis_name: &str,
        split_axis: i64,
        concat_axis: i64,
        tiled: bool,
    ) -> Pending {
        self.all_to_all_start_over(&[axis_name], None, split_axis, concat_axis, tiled)
    }

    /// Starts an [`Tensor::all_to_all_over`].
    pub fn all_to_all_start_over(
        &self,
        axes: &[&str],
        groups: Option<&[Vec<i64>]>,
        split_axis: i64,
        concat_axis: i64,
        tiled: bool,
    ) -> Pending {
        let prim = Prim::AllToAllStart;
        let (started, reshape) =
            self.all_to_all_with(prim, axes, groups, split_axis, concat_axis, tiled);
        Pending {
            started,
            done: Prim::AllToAllDone,
            reshape,
        }
    }

    /// Starts a [`Tensor::pbroadcast`].
    pub fn pbroadcast_start(&self, axis_name: &str, source: i64) -> Pending {
        self.pbroadcast_start_over(&[axis_name], source)
    }

    /// Starts a [`Tensor::pbroadcast_over`].
    pub fn pbroadcast_start_over(&self, axes: &[&str], source: i64) -> Pending {
        Pending::new(
            Prim::PbroadcastStart,
            self.pbroadcast_with(Prim::PbroadcastStart, axes, source),
        )
    }

    /// Starts a [`Tensor::ppermute`].
    pub fn ppermute_start(&self, axis_name: &str, perm: &[(i64, i64)]) -> Pending {
        self.ppermute_start_over(&[axis_name], perm)
    }

    /// Starts a [`Tensor::ppermute_over`].
    pub fn ppermute_start_over(&self, axes: &[&str], perm: &[(i64, i64)]) -> Pending {
        Pending::new(
            Prim::PpermuteStart,
            self.ppermute_with(Prim::PpermuteStart, axes, perm),
        )
    }
}
