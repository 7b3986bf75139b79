//! How a pipelined step's values are laid out inside their MPMD group, and the checks a user's
//! spec must pass.
//!
//! [`ValueSpecs`] is the one place that decides a pipeline value's `PartitionSpec` over a group's
//! mesh (the driver's `key_spec` asks it): a parameter, its gradient accumulators and gradient
//! take the parameter's spec (replicated unless given); a micro-batch's data takes its data
//! argument's spec when given; every other per-micro-batch value (activations, their cotangents,
//! residuals) splits its leading dimension over the data-parallel axes (the axes of the data's
//! leading dimension; by default every axis of the group) where their sizes divide it; the loss
//! is replicated. The compiled modules carry these specs as their arguments' and results'
//! `mhlo.sharding`s, so a value has the same layout in the group that makes it and in the group
//! that reads it, and XLA's propagation decides only what lies inside a module.
//!
//! [`check_spec`] refuses, with a [`SpecError`] naming the argument, dimension and axis, a spec
//! that names the MPMD axis, an axis the group lacks, or axes whose sizes do not divide their
//! dimension.

use std::collections::HashMap;

use tessera_sharding::{DimSpec, Mesh, NamedSharding, PartitionSpec};

use crate::partition::{StagePrograms, key_aval};
use crate::pipeline::Key;

/// A spec a step argument cannot take, naming the argument, the dimension and the axis.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The spec names the MPMD axis, which chooses groups, not devices inside one.
    #[error(
        "{what}: dimension {dim} of its spec {spec} names the MPMD axis '{axis}'; a value lives \
         on the group of the stage that reads it, and its spec shards it over that group's own \
         axes {group_axes:?}: remove '{axis}' from the spec"
    )]
    MpmdAxis {
        /// The argument (e.g. `step argument 3 (f32[32,96])`).
        what: String,
        /// The dimension.
        dim: usize,
        /// The spec, printed.
        spec: String,
        /// The MPMD axis.
        axis: String,
        /// The axes of a group's mesh.
        group_axes: Vec<String>,
    },
    /// The spec names an axis the groups' meshes lack.
    #[error(
        "{what}: dimension {dim} of its spec {spec} names the axis '{axis}', which the group's \
         mesh lacks (its axes are {group_axes:?}); use those axes, or add '{axis}' to the mesh"
    )]
    UnknownAxis {
        /// The argument.
        what: String,
        /// The dimension.
        dim: usize,
        /// The spec, printed.
        spec: String,
        /// The axis.
        axis: String,
        /// The axes of a group's mesh.
        group_axes: Vec<String>,
    },
    /// The axes of a dimension do not divide its size.
    #[error(
        "{what}: dimension {dim} has size {size}, which its spec's axes {axes:?} ({devices} \
         devices together) do not divide; shard it over axes whose sizes divide {size}, or \
         leave it unsharded (None)"
    )]
    Indivisible {
        /// The argument.
        what: String,
        /// The dimension.
        dim: usize,
        /// Its size.
        size: i64,
        /// The axes sharding it.
        axes: Vec<String>,
        /// The product of their sizes.
        devices: i64,
    },
    /// The spec is not valid on the group's mesh for another reason (more dimensions than the
    /// value has, an axis used twice, ...).
    #[error("{what}: its spec {spec} is not valid on the group's mesh: {reason}")]
    Invalid {
        /// The argument.
        what: String,
        /// The spec, printed.
        spec: String,
        /// What tessera-sharding said.
        reason: String,
    },
    /// Micro-batch data sharded along the micro-batch axis, which the step slices on the host.
    #[error(
        "{what}: its spec {spec} shards dimension {dim}, the micro-batch axis the step's \
         treduce slices; leave that dimension None and shard the rows after it"
    )]
    LoopAxis {
        /// The argument.
        what: String,
        /// The spec, printed.
        spec: String,
        /// The micro-batch axis.
        dim: usize,
    },
    /// Micro-batch data arguments disagree on the data-parallel axes.
    #[error(
        "the micro-batch data arguments split their rows over different axes ({first:?} and \
         {second:?}); give every data argument the same axes on its leading dimension"
    )]
    BatchAxes {
        /// One argument's leading axes.
        first: Vec<String>,
        /// Another's.
        second: Vec<String>,
    },
    /// More specs than arguments.
    #[error(
        "{given} specs were given but the step takes {args} arguments; give at most one per argument"
    )]
    Count {
        /// Specs given.
        given: usize,
        /// Arguments of the step.
        args: usize,
    },
}

/// Checks that `spec` can lay out a value of `shape` over `group` (a group's mesh, without the
/// MPMD axis `mpmd_axis`); `what` names the value in the error.
pub fn check_spec(
    what: &str,
    shape: &[i64],
    spec: &PartitionSpec,
    group: &Mesh,
    mpmd_axis: &str,
) -> Result<(), SpecError> {
    let group_axes = group.axis_names().to_vec();
    for (dim, d) in spec.dims().iter().enumerate() {
        for axis in d.axes() {
            let error = |mpmd: bool| {
                let (what, spec, axis, group_axes) = (
                    what.to_string(),
                    spec.to_string(),
                    axis.clone(),
                    group_axes.clone(),
                );
                match mpmd {
                    true => SpecError::MpmdAxis {
                        what,
                        dim,
                        spec,
                        axis,
                        group_axes,
                    },
                    false => SpecError::UnknownAxis {
                        what,
                        dim,
                        spec,
                        axis,
                        group_axes,
                    },
                }
            };
            if axis == mpmd_axis {
                return Err(error(true));
            }
            if group.axis_index(axis).is_none() {
                return Err(error(false));
            }
        }
    }
    let invalid = |reason: String| SpecError::Invalid {
        what: what.to_string(),
        spec: spec.to_string(),
        reason,
    };
    if spec.len() > shape.len() {
        return Err(invalid(format!(
            "it has {} dimensions but the value has rank {}",
            spec.len(),
            shape.len()
        )));
    }
    NamedSharding::new(group, spec.clone()).map_err(|e| invalid(e.to_string()))?;
    for (dim, d) in spec.dims().iter().enumerate() {
        let devices = axes_size(group, d.axes());
        if devices > 1 && shape[dim] % devices != 0 {
            return Err(SpecError::Indivisible {
                what: what.to_string(),
                dim,
                size: shape[dim],
                axes: d.axes().to_vec(),
                devices,
            });
        }
    }
    Ok(())
}

/// The number of devices `axes` of `group` span together.
pub fn axes_size<S: AsRef<str>>(group: &Mesh, axes: &[S]) -> i64 {
    axes.iter()
        .map(|a| group.abstract_mesh().axis_size(a.as_ref()).unwrap_or(1))
        .product()
}

pub use crate::choices::{FsdpGather, GradReduce};

/// The layout of every value of a pipelined step inside its group (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValueSpecs {
    /// Loss argument → the spec of that parameter (and its accumulators and gradient).
    params: HashMap<usize, PartitionSpec>,
    /// Loss argument → the spec of that data argument's value for one micro-batch.
    data: HashMap<usize, PartitionSpec>,
    /// The axes a per-micro-batch value's leading dimension is split over; `None`: every axis
    /// of the group.
    batch_axes: Option<Vec<String>>,
    /// When gradients and losses are summed over the data-parallel axes.
    grad_reduce: GradReduce,
    /// When parameters split over the data-parallel axes are gathered.
    fsdp_gather: FsdpGather,
}

impl ValueSpecs {
    /// Parameter loss argument `arg` laid out by `spec`.
    pub fn with_param(mut self, arg: usize, spec: PartitionSpec) -> Self {
        self.params.insert(arg, spec);
        self
    }

    /// Data loss argument `arg`'s micro-batch value laid out by `spec`.
    pub fn with_data(mut self, arg: usize, spec: PartitionSpec) -> Self {
        self.data.insert(arg, spec);
        self
    }

    /// Per-micro-batch values split over `axes` (the data-parallel axes) on their leading
    /// dimension.
    pub fn with_batch_axes(mut self, axes: Vec<String>) -> Self {
        self.batch_axes = Some(axes);
        self
    }

    /// Gradients and losses summed over the data-parallel axes as `when` says.
    pub fn with_grad_reduce(mut self, when: GradReduce) -> Self {
        self.grad_reduce = when;
        self
    }

    /// When gradients and losses are summed over the data-parallel axes.
    pub fn grad_reduce(&self) -> GradReduce {
        self.grad_reduce
    }

    /// Parameters split over the data-parallel axes gathered as `when` says.
    pub fn with_fsdp_gather(mut self, when: FsdpGather) -> Self {
        self.fsdp_gather = when;
        self
    }

    /// When parameters split over the data-parallel axes are gathered.
    pub fn fsdp_gather(&self) -> FsdpGather {
        self.fsdp_gather
    }

    /// The spec of parameter loss argument `arg` (replicated unless given).
    pub fn param(&self, arg: usize) -> PartitionSpec {
        self.params.get(&arg).cloned().unwrap_or_default()
    }

    /// Whether any parameter is sharded.
    pub fn shards_parameters(&self) -> bool {
        self.params.values().any(|s| s.used_axes().next().is_some())
    }

    /// How value `key` of the stage programs `parts` is laid out over `group`.
    pub fn spec(&self, parts: &[StagePrograms], key: Key, group: &Mesh) -> PartitionSpec {
        match key {
            Key::Param { stage, k } => match self.fsdp_gather {
                FsdpGather::PerStep => {
                    let spec = self.param_of(parts, stage, k);
                    let axes = self.data_parallel_axes(group);
                    PartitionSpec::new(without_axes(&spec, &axes))
                }
                FsdpGather::PerMicrobatch => self.param_of(parts, stage, k),
            },
            Key::Acc { stage, k, .. } => {
                let spec = self.param_of(parts, stage, k);
                let axes = self.data_parallel_axes(group);
                let split = spec.used_axes().any(|a| axes.iter().any(|x| x == a));
                // An FSDP parameter gathered per micro-batch (the memory-tight choice) keeps
                // its gradient split too: reduced (scattered) in every backward.
                match split && self.fsdp_gather == FsdpGather::PerMicrobatch {
                    true => spec,
                    false => self.partial(group, spec),
                }
            }
            Key::Loss { .. } | Key::Aux { .. } => {
                let float = key_aval(parts, key).is_some_and(|a| a.dtype.is_float());
                match float {
                    true => self.partial(group, PartitionSpec::replicated()),
                    false => PartitionSpec::replicated(),
                }
            }
            Key::Data { stage, k, .. } => {
                let arg = parts.get(stage as usize).and_then(|p| p.data_args.get(k));
                match arg.and_then(|a| self.data.get(a)) {
                    Some(spec) => spec.clone(),
                    None => self.leading(parts, key, group),
                }
            }
            // A residual computed from parameters alone is not split like the batch.
            Key::Resid { stage, k, .. }
                if parts
                    .get(stage as usize)
                    .is_some_and(|p| p.batch_free_residuals.contains(&k)) =>
            {
                PartitionSpec::replicated()
            }
            Key::Act { .. } | Key::Cot { .. } | Key::Resid { .. } | Key::WResid { .. } => {
                self.leading(parts, key, group)
            }
        }
    }

    fn param_of(&self, parts: &[StagePrograms], stage: u32, k: usize) -> PartitionSpec {
        parts
            .get(stage as usize)
            .and_then(|p| p.param_args.get(k))
            .map(|&arg| self.param(arg))
            .unwrap_or_default()
    }

    /// The data-parallel axes of `group` that split something (size above one).
    pub fn data_parallel_axes(&self, group: &Mesh) -> Vec<String> {
        let axes = match &self.batch_axes {
            Some(axes) => axes.clone(),
            None => group.axis_names().to_vec(),
        };
        axes.into_iter()
            .filter(|a| axes_size(group, &[a]) > 1)
            .collect()
    }

    /// Under [`GradReduce::PerStep`], a value summed over the data-parallel axes laid out as a
    /// partial sum over them: `spec`'s dimensions without those axes, and those axes unreduced.
    fn partial(&self, group: &Mesh, spec: PartitionSpec) -> PartitionSpec {
        let axes = self.data_parallel_axes(group);
        if self.grad_reduce == GradReduce::PerMicrobatch || axes.is_empty() {
            return spec;
        }
        PartitionSpec::new(without_axes(&spec, &axes)).with_unreduced(&axes)
    }

    /// The leading dimension split over the data-parallel axes, where their sizes divide it.
    fn leading(&self, parts: &[StagePrograms], key: Key, group: &Mesh) -> PartitionSpec {
        let axes: Vec<String> = match &self.batch_axes {
            Some(axes) => axes.clone(),
            None => group.axis_names().to_vec(),
        };
        let devices = axes_size(group, &axes);
        let leading = key_aval(parts, key).and_then(|a| a.shape.first().copied());
        match leading {
            Some(n) if devices > 1 && n % devices == 0 => {
                PartitionSpec::new(vec![DimSpec::from_axes(&axes)])
            }
            _ => PartitionSpec::replicated(),
        }
    }
}

/// `spec`'s dimensions with `axes` taken out of them.
fn without_axes(spec: &PartitionSpec, axes: &[String]) -> Vec<DimSpec> {
    spec.dims()
        .iter()
        .map(|d| match d {
            DimSpec::Axes(a) => {
                let kept: Vec<&String> = a.iter().filter(|x| !axes.contains(x)).collect();
                DimSpec::from_axes(&kept)
            }
            other => other.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group() -> Mesh {
        Mesh::auto(&[("data", 2), ("model", 2)]).unwrap()
    }

    #[test]
    fn a_partial_sum_drops_the_data_axes_from_its_dimensions_and_holds_them_unreduced() {
        let specs = ValueSpecs::default().with_batch_axes(vec!["data".into()]);
        let fsdp_tp = PartitionSpec::parse("P('data', 'model')").unwrap();
        let partial = specs.partial(&group(), fsdp_tp.clone());
        assert_eq!(partial.to_string(), "P(None, 'model', unreduced={'data'})");
        // Per micro-batch, and on a group whose data axis splits nothing, it stays as it was.
        let per_mb = specs.clone().with_grad_reduce(GradReduce::PerMicrobatch);
        assert_eq!(per_mb.partial(&group(), fsdp_tp.clone()), fsdp_tp);
        let lone = Mesh::auto(&[("data", 1), ("model", 2)]).unwrap();
        assert_eq!(specs.partial(&lone, fsdp_tp.clone()), fsdp_tp);
    }

    #[test]
    fn a_spec_over_the_groups_axes_that_divide_passes() {
        let spec = PartitionSpec::parse("P('data', 'model')").unwrap();
        check_spec("w", &[4, 6], &spec, &group(), "stage").unwrap();
        let both = PartitionSpec::parse("P(('data', 'model'))").unwrap();
        check_spec("w", &[8], &both, &group(), "stage").unwrap();
    }

    #[test]
    fn bad_specs_name_the_argument_dimension_and_axis() {
        let check = |shape: &[i64], spec: &str| {
            let spec = PartitionSpec::parse(spec).unwrap();
            check_spec("step argument 3", shape, &spec, &group(), "stage").unwrap_err()
        };
        let err = check(&[4, 4], "P(None, 'stage')");
        assert!(matches!(err, SpecError::MpmdAxis { dim: 1, .. }), "{err}");
        assert!(err.to_string().contains("step argument 3"), "{err}");
        assert!(err.to_string().contains("remove 'stage'"), "{err}");
        let err = check(&[4, 4], "P('tensor')");
        assert!(
            matches!(err, SpecError::UnknownAxis { dim: 0, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("'tensor'"), "{err}");
        let err = check(&[4, 3], "P(None, 'model')");
        assert!(
            matches!(
                err,
                SpecError::Indivisible {
                    dim: 1,
                    size: 3,
                    devices: 2,
                    ..
                }
            ),
            "{err}"
        );
        let err = check(&[6], "P(('data', 'model'))");
        assert!(
            matches!(err, SpecError::Indivisible { devices: 4, .. }),
            "{err}"
        );
        let err = check(&[4], "P('data', 'model')");
        assert!(matches!(err, SpecError::Invalid { .. }), "{err}");
        let err = check(&[4, 4], "P('data', 'data')");
        assert!(matches!(err, SpecError::Invalid { .. }), "{err}");
    }
}
