//! The tracing API of `shard_map` and the collectives (JAX's `lax.parallel`): `psum`, `pmean`,
//! `pmax`, `pmin`, `pargmax`, `pargmin`, `all_gather`, `psum_scatter`, `ppermute`, `pshuffle`,
//! `all_to_all`, `ragged_all_to_all`, `pswapaxes`, `axis_index`, `axis_size`, `pbroadcast`,
//! `pvary` (`pmap` is
//! sugar over a one-axis `shard_map`, in `pmap.rs`). The one-axis forms have `_over` forms taking several axes (JAX's
//! `axis_name=('x', 'y')`: devices indexed row-major over the axes as named, except that
//! `ppermute` numbers each group's devices in mesh order, as JAX's lowering does) and, where
//! JAX has them, `axis_index_groups`.
//!
//! As in JAX with `check_vma`, a collective over axes its operand does not vary over first casts
//! the operand with `pvary`, and a body result that varies over fewer axes than its out_spec
//! names is cast too; a result that varies over an axis its out_spec leaves out is an error.

use tessera_sharding::{AbstractMesh, PartitionSpec};

use super::{Tensor, trace, trace_counted};
use crate::aval::ShapedArray;
use crate::axis_env;
use crate::dtype::DType;
use crate::error::Result;
use crate::jaxpr::ClosedJaxpr;
use crate::params::{ParamValue, Params};
use crate::prim::{Prim, block_aval, shard_map_params};

pub(super) fn names(axes: &[impl AsRef<str>]) -> ParamValue {
    ParamValue::Tuple(
        axes.iter()
            .map(|a| ParamValue::Name(a.as_ref().to_owned()))
            .collect(),
    )
}

fn none() -> ParamValue {
    ParamValue::Name("None".into())
}

fn groups_param(groups: Option<&[Vec<i64>]>) -> ParamValue {
    groups.map_or_else(none, |g| {
        ParamValue::Tuple(g.iter().map(|g| ParamValue::ints(g)).collect())
    })
}

/// The number of devices a collective over `axes` combines: a group's size where
/// `axis_index_groups` are given, else the axes' size.
fn group_size(like: &Tensor, axes: &[&str], groups: Option<&[Vec<i64>]>) -> i64 {
    match groups.and_then(|g| g.first()) {
        Some(g) => g.len() as i64,
        None => axis_size(like, axes),
    }
}

impl Tensor {
    /// Casts an invariant value to one varying over `axes` (JAX's `pvary`); axes it already
    /// varies over are skipped.
    pub fn pvary(&self, axes: &[impl AsRef<str>]) -> Tensor {
        let missing: Vec<&str> = axes
            .iter()
            .map(AsRef::as_ref)
            .filter(|a| !self.aval().vma.contains(*a))
            .collect();
        // Inside an unchecked `shard_map` values carry no varying axes: nothing to cast.
        if missing.is_empty() || !axis_env::check_vma() {
            return self.clone();
        }
        Tensor::bind1(
            Prim::Pvary,
            Params::new().with("axes", names(&missing)),
            &[self],
        )
    }

    pub(super) fn reduction(
        &self,
        prim: Prim,
        axes: &[&str],
        groups: Option<&[Vec<i64>]>,
    ) -> Tensor {
        // JAX sums booleans as int32 (a count); pmax and pmin keep them boolean (OR, AND).
        let x = if self.dtype() == DType::Bool && prim == Prim::Psum {
            self.astype(DType::I32)
        } else {
            self.clone()
        };
        let params = Params::new()
            .with("axes", names(axes))
            .with("axis_index_groups", groups_param(groups));
        Tensor::bind1(prim, params, &[&x.pvary(axes)])
    }

    /// All-reduce sum over the named axes.
    pub fn psum(&self, axes: &[&str]) -> Tensor {
        self.reduction(Prim::Psum, axes, None)
    }

    /// All-reduce sum within `axis_index_groups` of the named axes.
    pub fn psum_in_groups(&self, axes: &[&str], groups: &[Vec<i64>]) -> Tensor {
        self.reduction(Prim::Psum, axes, Some(groups))
    }

    /// All-reduce mean over the named axes.
    pub fn pmean(&self, axes: &[&str]) -> Tensor {
        let n = axis_size(self, axes);
        &self.psum(axes) / n as f64
    }

    /// All-reduce mean within `axis_index_groups` of the named axes (divided by a group's size).
    pub fn pmean_in_groups(&self, axes: &[&str], groups: &[Vec<i64>]) -> Tensor {
        let n = group_size(self, axes, Some(groups));
        &self.psum_in_groups(axes, groups) / n as f64
    }

    /// All-reduce maximum over the named axes.
    pub fn pmax(&self, axes: &[&str]) -> Tensor {
        self.reduction(Prim::Pmax, axes, None)
    }

    /// All-reduce maximum within `axis_index_groups` of the named axes.
    pub fn pmax_in_groups(&self, axes: &[&str], groups: &[Vec<i64>]) -> Tensor {
        self.reduction(Prim::Pmax, axes, Some(groups))
    }

    /// All-reduce minimum over the named axes.
    pub fn pmin(&self, axes: &[&str]) -> Tensor {
        self.reduction(Prim::Pmin, axes, None)
    }

    /// All-reduce minimum within `axis_index_groups` of the named axes.
    pub fn pmin_in_groups(&self, axes: &[&str], groups: &[Vec<i64>]) -> Tensor {
        self.reduction(Prim::Pmin, axes, Some(groups))
    }

    /// The index along `axis` of the device holding the maximum (the lowest on ties).
    pub fn pargmax(&self, axis: &str) -> Tensor {
        self.index_of_value(&self.pmax(&[axis]), axis)
    }

    /// The index along `axis` of the device holding the minimum (the lowest on ties).
    pub fn pargmin(&self, axis: &str) -> Tensor {
        self.index_of_value(&self.pmin(&[axis]), axis)
    }

    fn index_of_value(&self, value: &Tensor, axis: &str) -> Tensor {
        let idx = Tensor::axis_index(self, axis).broadcast_to(self.shape());
        let big = idx.full_like_scalar(f64::from(i32::MAX));
        super::where_(&value.eq(self), &idx, &big).pmin(&[axis])
    }

    /// The position of this device along the named axis, as an `i32` scalar. `like` names the
    /// trace to record it in.
    pub fn axis_index(like: &Tensor, axis: &str) -> Tensor {
        let params = Params::new().with("axis_name", ParamValue::Name(axis.to_owned()));
        Tensor::bind_nullary(Prim::AxisIndex, params, like)
    }

    /// The position of this device along the named axes combined (row-major over them as
    /// named), as an `i32` scalar.
    pub fn axis_index_over(like: &Tensor, axes: &[&str]) -> Tensor {
        let params = Params::new().with("axis_name", names(axes));
        Tensor::bind_nullary(Prim::AxisIndex, params, like)
    }

    /// Gathers the blocks of all devices along `axis_name`: stacked at a new dimension `axis`,
    /// or concatenated along `axis` when `tiled`.
    pub fn all_gather(&self, axis_name: &str, axis: i64, tiled: bool) -> Tensor {
        self.all_gather_over(&[axis_name], None, axis, tiled)
    }

    /// [`Tensor::all_gather`] over several axes, within `axis_index_groups` where given.
    pub fn all_gather_over(
        &self,
        axes: &[&str],
        groups: Option<&[Vec<i64>]>,
        axis: i64,
        tiled: bool,
    ) -> Tensor {
        self.all_gather_with(Prim::AllGather, axes, groups, axis, tiled)
    }

    /// `all_gather` or its start.
    pub(super) fn all_gather_with(
        &self,
        prim: Prim,
        axes: &[&str],
        groups: Option<&[Vec<i64>]>,
        axis: i64,
        tiled: bool,
    ) -> Tensor {
        let params = Params::new()
            .with("all_gather_dimension", ParamValue::Int(axis))
            .with("axis_index_groups", groups_param(groups))
            .with("axis_name", names(axes))
            .with("axis_size", ParamValue::Int(group_size(self, axes, groups)))
            .with("tiled", ParamValue::Bool(tiled));
        Tensor::bind1(prim, params, &[&self.pvary(axes)])
    }

    /// Sums over `axis_name` and keeps this device's part of dimension `scatter_dimension`
    /// (a block of it when `tiled`, one index of it otherwise).
    pub fn psum_scatter(&self, axis_name: &str, scatter_dimension: i64, tiled: bool) -> Tensor {
        self.psum_scatter_over(&[axis_name], None, scatter_dimension, tiled)
    }

    /// [`Tensor::psum_scatter`] over several axes, within `axis_index_groups` where given.
    pub fn psum_scatter_over(
        &self,
        axes: &[&str],
        groups: Option<&[Vec<i64>]>,
        scatter_dimension: i64,
        tiled: bool,
    ) -> Tensor {
        self.psum_scatter_with(Prim::ReduceScatter, axes, groups, scatter_dimension, tiled)
    }

    /// `reduce_scatter` or its start.
    pub(super) fn psum_scatter_with(
        &self,
        prim: Prim,
        axes: &[&str],
        groups: Option<&[Vec<i64>]>,
        scatter_dimension: i64,
        tiled: bool,
    ) -> Tensor {
        let params = Params::new()
            .with("axis_index_groups", groups_param(groups))
            .with("axis_name", names(axes))
            .with("axis_size", ParamValue::Int(group_size(self, axes, groups)))
            .with("scatter_dimension", ParamValue::Int(scatter_dimension))
            .with("tiled", ParamValue::Bool(tiled));
        Tensor::bind1(prim, params, &[&self.pvary(axes)])
    }

    /// Sends this device's value to the device `perm` pairs it with (`(source, target)` indices
    /// along `axis_name`); devices no pair targets receive zeros.
    pub fn ppermute(&self, axis_name: &str, perm: &[(i64, i64)]) -> Tensor {
        self.ppermute_over(&[axis_name], perm)
    }

    /// [`Tensor::ppermute`] over several axes: `perm`'s indices number the devices of each group
    /// in mesh order (JAX's lowering sorts each group), whatever order `axes` names them in.
    pub fn ppermute_over(&self, axes: &[&str], perm: &[(i64, i64)]) -> Tensor {
        self.ppermute_with(Prim::Ppermute, axes, perm)
    }

    /// `ppermute` or its start.
    pub(super) fn ppermute_with(&self, prim: Prim, axes: &[&str], perm: &[(i64, i64)]) -> Tensor {
        let perm = ParamValue::Tuple(
            perm.iter()
                .map(|&(s, t)| ParamValue::ints(&[s, t]))
                .collect(),
        );
        let params = Params::new()
            .with("axis_name", names(axes))
            .with("perm", perm);
        Tensor::bind1(prim, params, &[&self.pvary(axes)])
    }

    /// [`Tensor::ppermute`] with the permutation given as sources: the device at index `i`
    /// along `axis_name` receives the value of the device at index `perm[i]` (JAX's
    /// `pshuffle`). `perm` must hold every index `0..perm.len()` once.
    pub fn pshuffle(&self, axis_name: &str, perm: &[i64]) -> Tensor {
        let mut sorted = perm.to_vec();
        sorted.sort_unstable();
        if !sorted.iter().copied().eq(0..perm.len() as i64) {
            return self.fail(
                "pshuffle",
                format!(
                    "`perm` {perm:?} is not a permutation: it must hold each of 0..{} once \
                     (entry i names the device whose value device i receives)",
                    perm.len()
                ),
            );
        }
        let pairs: Vec<(i64, i64)> = perm.iter().zip(0..).map(|(&s, t)| (s, t)).collect();
        self.ppermute(axis_name, &pairs)
    }

    /// Swaps the device axis `axis_name` with dimension `axis` of the value, whose size must be
    /// the number of devices along `axis_name` (JAX's `pswapaxes`: an untiled
    /// [`Tensor::all_to_all`] with `split_axis` and `concat_axis` both `axis`). The shape is
    /// unchanged: device `d` receives entry `d` of `axis` from every device, in device order.
    pub fn pswapaxes(&self, axis_name: &str, axis: i64) -> Tensor {
        self.pswapaxes_over(&[axis_name], None, axis)
    }

    /// [`Tensor::pswapaxes`] over several axes, within `axis_index_groups` where given.
    pub fn pswapaxes_over(&self, axes: &[&str], groups: Option<&[Vec<i64>]>, axis: i64) -> Tensor {
        self.all_to_all_over(axes, groups, axis, axis, false)
    }

    /// Splits `split_axis` into one chunk per device of `axis_name` and concatenates the chunks
    /// received from every device along `concat_axis`. Untiled, `split_axis` must have one entry
    /// per device; it is removed and a new dimension is inserted at `concat_axis`.
    pub fn all_to_all(
        &self,
        axis_name: &str,
        split_axis: i64,
        concat_axis: i64,
        tiled: bool,
    ) -> Tensor {
        self.all_to_all_over(&[axis_name], None, split_axis, concat_axis, tiled)
    }

    /// [`Tensor::all_to_all`] over several axes, within `axis_index_groups` where given.
    pub fn all_to_all_over(
        &self,
        axes: &[&str],
        groups: Option<&[Vec<i64>]>,
        split_axis: i64,
        concat_axis: i64,
        tiled: bool,
    ) -> Tensor {
        let (out, shape) =
            self.all_to_all_with(Prim::AllToAll, axes, groups, split_axis, concat_axis, tiled);
        match shape {
            Some(shape) => out.reshape(&shape),
            None => out,
        }
    }

    /// `all_to_all` or its start, and the shape to reshape its result to (untiled, where the
    /// split dimension must go).
    pub(super) fn all_to_all_with(
        &self,
        prim: Prim,
        axes: &[&str],
        groups: Option<&[Vec<i64>]>,
        split_axis: i64,
        concat_axis: i64,
        tiled: bool,
    ) -> (Tensor, Option<Vec<i64>>) {
        let x = self.pvary(axes);
        let rank = x.rank() as i64;
        let norm = |a: i64, r: i64| if a < 0 { a + r } else { a };
        let (mut split, mut concat) = (
            norm(split_axis, rank),
            norm(concat_axis, rank + i64::from(!tiled)),
        );
        let mut operand = x.clone();
        if !tiled {
            let n = group_size(self, axes, groups);
            if !(0..rank).contains(&split) || x.shape()[split as usize] != n {
                let failed = self.fail(
                    "all_to_all",
                    format!(
                        "untiled all_to_all needs split_axis {split_axis} of size {n} (the \
                         devices of '{}'), got shape {:?}",
                        axes.join(","),
                        x.shape()
                    ),
                );
                return (failed, None);
            }
            if split < concat {
                concat += 1;
                operand = insert_dim(&x, concat);
            } else if concat < split {
                operand = insert_dim(&x, concat);
                split += 1;
            }
        }
        let params = Params::new()
            .with("axis_index_groups", groups_param(groups))
            .with("axis_name", names(axes))
            .with("concat_axis", ParamValue::Int(concat))
            .with("split_axis", ParamValue::Int(split))
            .with("tiled", ParamValue::Bool(tiled));
        let out = Tensor::bind1(prim, params, &[&operand]);
        if tiled || split == concat {
            return (out, None);
        }
        let mut shape = out.shape().to_vec();
        shape.remove(split as usize);
        (out, Some(shape))
    }

    /// The all-to-all of ragged data (JAX's `lax.ragged_all_to_all`), called on the operand:
    /// slice `i` of this value's leading dimension (`input_offsets[i]`, `send_sizes[i]` rows
    /// long) goes to device `i / S` along `axis_name` (`S` is the vectors' length over the
    /// number of devices), which writes it at row `output_offsets[i]` of its copy of `output`.
    /// `recv_sizes[j * S + s]` is the size of slice `s` received from device `j`. The four
    /// vectors are int32 or int64, of one dtype and one length; the result has `output`'s type.
    pub fn ragged_all_to_all(
        &self,
        output: &Tensor,
        input_offsets: &Tensor,
        send_sizes: &Tensor,
        output_offsets: &Tensor,
        recv_sizes: &Tensor,
        axis_name: &str,
    ) -> Tensor {
        self.ragged_all_to_all_over(
            output,
            [input_offsets, send_sizes, output_offsets, recv_sizes],
            &[axis_name],
            None,
        )
    }

    /// [`Tensor::ragged_all_to_all`] over several axes, within `axis_index_groups` where given;
    /// `index` holds `input_offsets`, `send_sizes`, `output_offsets` and `recv_sizes`.
    pub fn ragged_all_to_all_over(
        &self,
        output: &Tensor,
        index: [&Tensor; 4],
        axes: &[&str],
        groups: Option<&[Vec<i64>]>,
    ) -> Tensor {
        let params = Params::new()
            .with("axis_index_groups", groups_param(groups))
            .with("axis_name", names(axes));
        let [a, b, c, d] = index;
        Tensor::bind1(Prim::RaggedAllToAll, params, &[self, output, a, b, c, d])
    }

    /// Copies the value of the device at index `source` along `axis_name` to every device.
    pub fn pbroadcast(&self, axis_name: &str, source: i64) -> Tensor {
        self.pbroadcast_over(&[axis_name], source)
    }

    /// [`Tensor::pbroadcast`] over several axes (`source` an index along the axes combined).
    pub fn pbroadcast_over(&self, axes: &[&str], source: i64) -> Tensor {
        self.pbroadcast_with(Prim::Pbroadcast, axes, source)
    }

    /// `pbroadcast` or its start.
    pub(super) fn pbroadcast_with(&self, prim: Prim, axes: &[&str], source: i64) -> Tensor {
        let params = Params::new()
            .with("axis_name", names(axes))
            .with("source", ParamValue::Int(source));
        Tensor::bind1(prim, params, &[&self.pvary(axes)])
    }
}

fn insert_dim(x: &Tensor, at: i64) -> Tensor {
    let mut shape = x.shape().to_vec();
    shape.insert(at as usize, 1);
    x.reshape(&shape)
}

/// The number of devices along the named axes of the enclosing `shard_map` (1 and a recorded
/// error outside one).
pub fn axis_size(like: &Tensor, axes: &[&str]) -> i64 {
    match axis_env::mesh_for("axis_size", axes) {
        Ok(mesh) => axes.iter().filter_map(|a| mesh.axis_size(a)).product(),
        Err(e) => {
            like.fail("axis_size", e.to_string());
            1
        }
    }
}

/// Applies `f` per device to the blocks of `args` laid out by `in_specs` on `mesh`; the
/// results' blocks are laid out by `out_specs` (JAX's `shard_map`, all mesh axes manual).
pub fn shard_map(
    mesh: &AbstractMesh,
    in_specs: &[PartitionSpec],
    out_specs: &[PartitionSpec],
    args: &[&Tensor],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    shard_map_with(mesh, in_specs, &|_| out_specs.to_vec(), args, f)
}

/// [`shard_map`] with `check_vma=False` (JAX's `shard_map(..., check_vma=False)`): the body's
/// values carry no varying axes and the out_specs are taken as stated, not checked (a result
/// whose out_spec leaves an axis out must be the same on every device of it, which the caller
/// vouches for); differentiation follows JAX's unchecked transpose (a `psum`'s is a `psum`).
pub fn shard_map_unchecked(
    mesh: &AbstractMesh,
    in_specs: &[PartitionSpec],
    out_specs: &[PartitionSpec],
    args: &[&Tensor],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    shard_map_checked(mesh, in_specs, &|_| out_specs.to_vec(), false, args, f)
}

/// [`shard_map`] whose out_specs depend on the number of results (`out_specs(n)`).
pub(super) fn shard_map_with(
    mesh: &AbstractMesh,
    in_specs: &[PartitionSpec],
    out_specs: &dyn Fn(usize) -> Vec<PartitionSpec>,
    args: &[&Tensor],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    shard_map_checked(mesh, in_specs, out_specs, true, args, f)
}

/// [`shard_map_with`], the body traced with `check_vma`.
fn shard_map_checked(
    mesh: &AbstractMesh,
    in_specs: &[PartitionSpec],
    out_specs: &dyn Fn(usize) -> Vec<PartitionSpec>,
    check_vma: bool,
    args: &[&Tensor],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    let (traced, outs) = body(mesh, in_specs, out_specs, check_vma, args, f);
    match (traced, args.first()) {
        (Ok((body, out_specs)), Some(_)) => Tensor::bind(
            Prim::ShardMap,
            shard_map_params(mesh, in_specs, &out_specs, body)
                .with("check_vma", crate::params::ParamValue::Bool(check_vma)),
            args,
        ),
        (Ok(_), None) => super::failure::fail_innermost(
            "shard_map",
            "shard_map needs at least one operand".into(),
            &outs,
        ),
        (Err(e), Some(first)) => first.fail_with("shard_map", e.to_string(), &outs),
        (Err(e), None) => super::failure::fail_innermost("shard_map", e.to_string(), &outs),
    }
}

/// The body traced on the operands' blocks with its out_specs, and the types of the values
/// the body returned (known even when it failed; the body is traced on the global types when
/// the operands do not fit the in_specs, only to count them).
fn body(
    mesh: &AbstractMesh,
    in_specs: &[PartitionSpec],
    out_specs: &dyn Fn(usize) -> Vec<PartitionSpec>,
    check_vma: bool,
    args: &[&Tensor],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> (Result<(ClosedJaxpr, Vec<PartitionSpec>)>, Vec<ShapedArray>) {
    let blocks = if in_specs.len() == args.len() {
        args.iter()
            .zip(in_specs)
            .map(|(a, s)| block_aval(a.aval(), s, mesh))
            .collect::<Result<Vec<ShapedArray>>>()
    } else {
        Err(crate::error::type_error(
            "shard_map",
            format!("{} in_specs for {} operands", in_specs.len(), args.len()),
        ))
    };
    let mut avals = match &blocks {
        Ok(b) => b.clone(),
        Err(_) => args.iter().map(|a| a.aval().clone()).collect(),
    };
    // Unchecked, the body's values carry no varying axes.
    if !check_vma {
        avals.iter_mut().for_each(|a| a.vma = Default::default());
    }
    let mut specs = Vec::new();
    let blocks = match axis_env::rebound_axis(mesh) {
        Some(axis) => Err(axis_env::reused_axis("shard_map", &axis)),
        None => blocks,
    };
    let (program, outs) = axis_env::with_manual(mesh, check_vma, || {
        trace_counted(&avals, |bargs| {
            let outs = f(bargs);
            specs = out_specs(outs.len());
            if outs.len() != specs.len() {
                let message = format!(
                    "the body returns {} values but there are {} out_specs",
                    outs.len(),
                    specs.len()
                );
                return match outs.first().or(bargs.first()) {
                    Some(like) => {
                        let avals: Vec<ShapedArray> =
                            outs.iter().map(|o| o.aval().clone()).collect();
                        like.fail_with("shard_map", message, &avals)
                    }
                    None => outs,
                };
            }
            if !check_vma {
                return outs;
            }
            outs.iter()
                .zip(&specs)
                .enumerate()
                .map(|(i, (o, s))| match_out_spec(i, o, s, mesh))
                .collect()
        })
    });
    let traced = blocks.and(program).map(|p| (p, specs));
    (traced, outs)
}

/// Checks that `spec` names every axis of `mesh` that `out` varies over (it may vary over an
/// enclosing `shard_map`'s axes too), and casts `out` to vary over the axes it names.
/// A result unreduced over an axis the spec does not declare unreduced is refused.
fn match_out_spec(index: usize, out: &Tensor, spec: &PartitionSpec, mesh: &AbstractMesh) -> Tensor {
    if let Some(message) = crate::prim::unreduced_out_claim(index, out.aval(), spec, mesh) {
        return out.fail("shard_map", message);
    }
    let named: Vec<&str> = spec.used_axes().collect();
    let unnamed = |a: &&String| !named.contains(&a.as_str()) && mesh.axis_index(a).is_some();
    if let Some(axis) = out.aval().vma.iter().find(unnamed) {
        return out.fail(
            "shard_map",
            format!(
                "out_specs {spec} claim the result is replicated over '{axis}', but it varies over \
                 '{axis}'; reduce it over '{axis}' (psum, pmean, all_gather) or name '{axis}' in \
                 the out_spec"
            ),
        );
    }
    out.pvary(&named)
}

/// Traces `shard_map(f)` on global arguments of types `in_avals` into a program.
pub fn shard_map_program(
    mesh: &AbstractMesh,
    in_specs: &[PartitionSpec],
    out_specs: &[PartitionSpec],
    in_avals: &[ShapedArray],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Result<ClosedJaxpr> {
    trace(in_avals, |args| {
        let refs: Vec<&Tensor> = args.iter().collect();
        shard_map(mesh, in_specs, out_specs, &refs, f)
    })
}
