//! `sharding_constraint`: JAX's `with_sharding_constraint`. The identity on values; it asks the
//! SPMD partitioner to lay its operand out as a `NamedSharding` says. Its rules: the shape rule
//! (identity, after checking the spec against the operand and the mesh), the interpreter
//! (identity), JVP and transpose (the same constraint on tangents and cotangents, as in JAX),
//! batching (a `None` for the batch dimension) and lowering (`tessera-stablehlo`'s
//! `constraint.rs`) all read the typed [`ConstraintParams`] defined here.
//!
//! Printed as JAX prints it:
//! `sharding_constraint[context_mesh=Mesh() layout=None sharding=NamedSharding(mesh=Mesh('data':
//! 4, 'model': 2, axis_types=(Auto, Auto)), spec=P('data', None), memory_kind=device)
//! unconstrained_dims=frozenset({})]`. A dimension left to the partitioner
//! (`P('data', P.UNCONSTRAINED)`) prints as `UNCONSTRAINED` in the spec and is listed in
//! `unconstrained_dims`; either marks it unconstrained (not split, open to propagation).

use tessera_sharding::{AbstractMesh, AxisType, DimSpec, PartitionSpec};

use crate::aval::ShapedArray;
use crate::error::{Result, type_error};
use crate::program::params::{ParamValue, Params};

const NAME: &str = "sharding_constraint";

/// The typed view of a `sharding_constraint` equation's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstraintParams {
    /// The mesh of the sharding.
    pub mesh: AbstractMesh,
    /// How each dimension is split over the mesh's axes.
    pub spec: PartitionSpec,
    /// Dimensions the partitioner may lay out as it likes (JAX's `P.UNCONSTRAINED`).
    pub unconstrained_dims: Vec<usize>,
}

impl ConstraintParams {
    /// A constraint to `spec` over `mesh`; its `UNCONSTRAINED` dimensions are left to the
    /// partitioner (not split, listed in `unconstrained_dims`).
    pub fn new(mesh: &AbstractMesh, spec: &PartitionSpec) -> Self {
        let open = |d: &DimSpec| matches!(d, DimSpec::Unconstrained);
        let dims = spec.dims().iter();
        ConstraintParams {
            mesh: mesh.clone(),
            spec: PartitionSpec::new(
                dims.clone()
                    .map(|d| match open(d) {
                        true => DimSpec::from_axes::<&str>(&[]),
                        false => d.clone(),
                    })
                    .collect(),
            )
            .with_unreduced(spec.unreduced()),
            unconstrained_dims: dims
                .enumerate()
                .filter(|(_, d)| open(d))
                .map(|(i, _)| i)
                .collect(),
        }
    }

    /// Reads the parameters of a `sharding_constraint` equation.
    ///
    /// The value is read once and kept with the parameters.
    pub fn read(params: &Params) -> Result<Self> {
        params.typed([0, 0], Self::read_printed)
    }

    fn read_printed(params: &Params) -> Result<Self> {
        let bad = |why: &str| type_error(NAME, format!("parameter `sharding` {why}"));
        let sharding = params
            .get("sharding")
            .filter(|v| matches!(v, ParamValue::Record(n, _) if n == "NamedSharding"))
            .ok_or_else(|| bad("must be NamedSharding(mesh=Mesh(...), spec=P(...))"))?;
        let mesh = read_mesh(sharding.field("mesh").ok_or_else(|| bad("lacks `mesh`"))?)?;
        let (spec, open) = read_spec(sharding.field("spec").ok_or_else(|| bad("lacks `spec`"))?)?;
        let mut unconstrained_dims = match params.get("unconstrained_dims") {
            None => Vec::new(),
            Some(v) => read_dim_set(v)?,
        };
        unconstrained_dims.extend(open);
        unconstrained_dims.sort_unstable();
        unconstrained_dims.dedup();
        Ok(ConstraintParams {
            mesh,
            spec,
            unconstrained_dims,
        })
    }

    /// The equation parameters, as JAX prints them (sorted by name).
    pub fn to_params(&self) -> Params {
        let dims = self
            .unconstrained_dims
            .iter()
            .map(|&d| ParamValue::Int(d as i64))
            .collect();
        Params::new()
            .with(
                "context_mesh",
                ParamValue::Record("Mesh".into(), Vec::new()),
            )
            .with("layout", ParamValue::Name("None".into()))
            .with(
                "sharding",
                ParamValue::Record(
                    "NamedSharding".into(),
                    vec![
                        ("mesh".into(), mesh_value(&self.mesh)),
                        (
                            "spec".into(),
                            spec_value(&self.spec, &self.unconstrained_dims),
                        ),
                        ("memory_kind".into(), ParamValue::Name("device".into())),
                    ],
                ),
            )
            .with(
                "unconstrained_dims",
                ParamValue::Record(
                    "frozenset".into(),
                    vec![(String::new(), ParamValue::Set(dims))],
                ),
            )
    }

    /// Checks the constraint against an operand: the spec fits its rank, names axes of the mesh
    /// at most once, the axes divide their dimensions, and no axis is manual in an enclosing
    /// `shard_map`.
    pub fn check(&self, operand: &ShapedArray) -> Result<()> {
        let err = |m: String| type_error(NAME, m);
        if self.spec.len() > operand.rank() {
            return Err(err(format!(
                "the spec {} has {} entries but the operand {operand} has rank {}; give at \
                 most one entry per dimension",
                self.spec,
                self.spec.len(),
                operand.rank()
            )));
        }
        let manual = crate::axis_env::current_mesh();
        let mut seen = std::collections::BTreeSet::new();
        for (d, dim) in self.spec.dims().iter().enumerate() {
            let mut factor = 1;
            for axis in dim.axes() {
                let size = self.mesh.axis_size(axis).ok_or_else(|| {
                    err(format!(
                        "dimension {d} names axis '{axis}', which the mesh ({}) lacks",
                        self.mesh.axis_names().join(", ")
                    ))
                })?;
                if !seen.insert(axis.clone()) {
                    return Err(err(format!(
                        "axis '{axis}' appears twice in the spec {}; use each axis once",
                        self.spec
                    )));
                }
                let manual_here = self.mesh.axis_type(axis) == Some(AxisType::Manual)
                    || manual
                        .as_ref()
                        .is_some_and(|m| m.axis_index(axis).is_some());
                if manual_here {
                    return Err(err(format!(
                        "dimension {d} names axis '{axis}', which is manual in the enclosing \
                         shard_map; constrain only axes the shard_map leaves automatic"
                    )));
                }
                factor *= size;
            }
            let extent = operand.shape[d];
            if extent % factor != 0 {
                return Err(err(format!(
                    "dimension {d} of {operand} has size {extent}, which axes {:?} (together \
                     {factor} ways) do not divide; pick axes whose sizes divide it",
                    dim.axes()
                )));
            }
        }
        for axis in self.spec.unreduced() {
            if self.mesh.axis_size(axis).is_none() || seen.contains(axis) {
                return Err(err(format!(
                    "the spec {} holds '{axis}' unreduced, but the mesh lacks it or a dimension \
                     is split over it; name in unreduced={{...}} axes of the mesh that split no \
                     dimension",
                    self.spec
                )));
            }
        }
        Ok(())
    }

    /// The constraint for a batched operand whose batch dimension is `bdim`: that dimension is
    /// not split, and unconstrained dimensions at or after it shift by one.
    pub fn batched(&self, bdim: usize) -> ConstraintParams {
        self.batched_over(bdim, &[])
    }

    /// [`batched`](Self::batched) with the batch dimension split over `spmd_axes` (JAX's
    /// `vmap(..., spmd_axis_name=...)`, whose batcher inserts the axes into the constraint's
    /// spec at the batch dimension); empty `spmd_axes` leave it unsplit.
    pub fn batched_over(&self, bdim: usize, spmd_axes: &[String]) -> ConstraintParams {
        let mut dims: Vec<DimSpec> = self.spec.dims().to_vec();
        while dims.len() < bdim {
            dims.push(DimSpec::from_axes::<&str>(&[]));
        }
        dims.insert(bdim, DimSpec::from_axes(spmd_axes));
        ConstraintParams {
            mesh: self.mesh.clone(),
            spec: PartitionSpec::new(dims).with_unreduced(self.spec.unreduced()),
            unconstrained_dims: self
                .unconstrained_dims
                .iter()
                .map(|&d| if d >= bdim { d + 1 } else { d })
                .collect(),
        }
    }
}

pub(super) fn abstract_eval(params: &Params, inputs: &[ShapedArray]) -> Result<Vec<ShapedArray>> {
    super::arity(super::Prim::ShardingConstraint, inputs.len(), 1)?;
    ConstraintParams::read(params)?.check(&inputs[0])?;
    Ok(inputs.to_vec())
}

fn read_mesh(value: &ParamValue) -> Result<AbstractMesh> {
    let bad = |why: String| type_error(NAME, format!("the sharding's mesh {why}"));
    let entries = value.entries();
    if entries.is_empty() {
        return Err(bad("must be Mesh('axis': size, ...)".into()));
    }
    let names: Vec<&str> = entries.iter().map(|(n, _)| *n).collect();
    let sizes = entries
        .iter()
        .map(|(n, v)| {
            v.as_int()
                .ok_or_else(|| bad(format!("gives axis '{n}' no size")))
        })
        .collect::<Result<Vec<_>>>()?;
    let types = super::shard_map::read_axis_types(value, names.len(), &bad)?;
    AbstractMesh::new(&names, &sizes, &types).map_err(|e| bad(e.to_string()))
}

/// The spec, and the dimensions it leaves `UNCONSTRAINED` (not split in the spec).
fn read_spec(value: &ParamValue) -> Result<(PartitionSpec, Vec<usize>)> {
    let bad = |why: String| type_error(NAME, format!("the sharding's spec {why}"));
    if !matches!(value, ParamValue::Record(n, _) if n == "P" || n == "PartitionSpec") {
        return Err(bad(format!("must be P(...), got {value}")));
    }
    let mut open = Vec::new();
    let dims = value
        .positional()
        .into_iter()
        .enumerate()
        .map(|(i, d)| match d {
            v if v.is_none() => Ok(DimSpec::from_axes::<&str>(&[])),
            ParamValue::Name(n) if n == "UNCONSTRAINED" => {
                open.push(i);
                Ok(DimSpec::from_axes::<&str>(&[]))
            }
            ParamValue::Str(axis) => Ok(DimSpec::from_axes(&[axis.as_str()])),
            ParamValue::Tuple(axes) => axes
                .iter()
                .map(|a| a.as_str().ok_or_else(|| bad(format!("has entry {d}"))))
                .collect::<Result<Vec<_>>>()
                .map(|axes| DimSpec::from_axes(&axes)),
            other => Err(bad(format!(
                "has entry {other}; use None, UNCONSTRAINED, 'axis' or ('a', 'b')"
            ))),
        })
        .collect::<Result<Vec<_>>>()?;
    let unreduced = match value.field("unreduced") {
        None => Vec::new(),
        Some(ParamValue::Set(items)) => items
            .iter()
            .map(|a| {
                a.as_str()
                    .ok_or_else(|| bad(format!("has unreduced={{{a}}}")))
            })
            .collect::<Result<Vec<_>>>()?,
        Some(other) => {
            return Err(bad(format!(
                "has unreduced={other}; give a set of axis names, unreduced={{'data'}}"
            )));
        }
    };
    Ok((PartitionSpec::new(dims).with_unreduced(&unreduced), open))
}

fn read_dim_set(value: &ParamValue) -> Result<Vec<usize>> {
    let bad = || {
        type_error(
            NAME,
            format!("parameter `unconstrained_dims` must be frozenset({{...}}), got {value}"),
        )
    };
    if !matches!(value, ParamValue::Record(n, _) if n == "frozenset") {
        return Err(bad());
    }
    let positional = value.positional();
    let set = match positional.first() {
        None => return Ok(Vec::new()),
        Some(ParamValue::Set(set)) => set,
        Some(_) => return Err(bad()),
    };
    set.iter()
        .map(|d| {
            d.as_int()
                .and_then(|d| usize::try_from(d).ok())
                .ok_or_else(bad)
        })
        .collect()
}

/// `mesh` as JAX prints it: `Mesh('data': 4, 'model': 2, axis_types=(Auto, Explicit))`.
pub(crate) fn mesh_value(mesh: &AbstractMesh) -> ParamValue {
    let mut fields: Vec<(String, ParamValue)> = mesh
        .axis_names()
        .iter()
        .zip(mesh.axis_sizes())
        .map(|(n, &s)| (format!("'{n}'"), ParamValue::Int(s)))
        .collect();
    let types = mesh
        .axis_types()
        .iter()
        .map(|t| ParamValue::Name(t.to_string()))
        .collect();
    fields.push(("axis_types".into(), ParamValue::Tuple(types)));
    ParamValue::Record("Mesh".into(), fields)
}

fn spec_value(spec: &PartitionSpec, unconstrained: &[usize]) -> ParamValue {
    let dims = spec
        .dims()
        .iter()
        .enumerate()
        .map(|(i, d)| match d.axes() {
            [] if unconstrained.contains(&i) => {
                (String::new(), ParamValue::Name("UNCONSTRAINED".into()))
            }
            [] => (String::new(), ParamValue::Name("None".into())),
            [one] => (String::new(), ParamValue::Str(one.clone())),
            axes => (
                String::new(),
                ParamValue::Tuple(axes.iter().map(|a| ParamValue::Str(a.clone())).collect()),
            ),
        })
        .collect::<Vec<_>>();
    let mut fields = dims;
    if !spec.unreduced().is_empty() {
        let axes = spec.unreduced().iter().map(|a| ParamValue::Str(a.clone()));
        fields.push(("unreduced".into(), ParamValue::Set(axes.collect())));
    }
    ParamValue::Record("P".into(), fields)
}
