//! `shard_map`: a nested jaxpr run once per device of a mesh on that device's block of each
//! operand, communicating through collectives over the mesh's (manual) axes.
//!
//! Parameters, as stored: `jaxpr` (the body, on block shapes), `mesh=Mesh(x=2, y=4)`,
//! `in_specs` / `out_specs` (one partition spec per operand / result, written as a tuple of
//! dimensions, each `None` or a tuple of axis names) and `check_vma`. JAX's printed form is read
//! too: `mesh=Mesh('data': 2, 'model': 4, axis_types=(Auto, Auto))` or `AbstractMesh(...,
//! device_kind=cpu, num_cores=None, platform=cpu)` (the axis types, device kind and platform do
//! not change the body, which is manual over every axis), specs `P(('data', 'model'), None)`
//! with optional `reduced={...}`/`unreduced={...}` sets (which describe the result's type, not
//! its blocks), and `newly_manual_axes=frozenset({...})` (kept as printed).
//!
//! On a mesh whose axes are `Explicit`, a result is typed by its out spec as JAX types it
//! (`f32[8@pp,4]{R:tp}` for `P('pp', reduced={'tp'})`).
//!
//! `check_vma=False` (and `pmap`, printed as such a `shard_map`) leaves values untyped by the
//! axes they vary over: collectives then take any operand, and differentiation follows JAX's
//! unchecked rules (see `autodiff/parallel.rs`). The shape rule maps global
//! operand shapes to the body's block shapes (each dimension divided by the sizes of the axes
//! that split it) and the body's result blocks back to global shapes.

use tessera_sharding::{AbstractMesh, AxisType, DimSpec, PartitionSpec};

use crate::aval::ShapedArray;
use crate::error::{Result, type_error};
use crate::program::jaxpr::ClosedJaxpr;
use crate::program::params::{ParamValue, Params};

const NAME: &str = "shard_map";

/// The typed view of a `shard_map` equation's parameters.
#[derive(Debug, Clone)]
pub struct ShardMapParams<'a> {
    /// The mesh whose axes the body is manual over.
    pub mesh: AbstractMesh,
    /// One spec per operand.
    pub in_specs: Vec<PartitionSpec>,
    /// One spec per result.
    pub out_specs: Vec<PartitionSpec>,
    /// The per-device program.
    pub body: &'a ClosedJaxpr,
    /// `check_vma`: whether the body's values are typed by the axes they vary over (absent:
    /// true).
    pub check_vma: bool,
}

impl<'a> ShardMapParams<'a> {
    /// Reads the parameters of a `shard_map` equation.
    pub fn read(params: &'a Params) -> Result<Self> {
        Ok(ShardMapParams {
            mesh: read_mesh(params)?,
            in_specs: read_specs(params, "in_specs")?,
            out_specs: read_specs(params, "out_specs")?,
            body: params.jaxpr(NAME, "jaxpr")?,
            check_vma: match params.get("check_vma") {
                None => true,
                Some(ParamValue::Bool(b)) => *b,
                Some(v) => {
                    return Err(type_error(
                        NAME,
                        format!("parameter `check_vma` must be True or False, got {v}"),
                    ));
                }
            },
        })
    }

    /// Runs `f` with the body's axes bound (and its `check_vma`), as while its body is checked,
    /// transformed or lowered.
    pub fn in_body<T>(&self, f: impl FnOnce() -> T) -> T {
        crate::axis_env::with_manual(&self.mesh, self.check_vma, f)
    }

    /// The mesh axes `spec` leaves out: a block laid out by it is the same on all of them.
    pub fn unmentioned(&self, spec: &PartitionSpec) -> Vec<String> {
        let used: Vec<&str> = spec.used_axes().collect();
        self.mesh
            .axis_names()
            .iter()
            .filter(|a| !used.contains(&a.as_str()))
            .cloned()
            .collect()
    }
}

/// Builds the parameters of a `shard_map` equation.
pub fn shard_map_params(
    mesh: &AbstractMesh,
    in_specs: &[PartitionSpec],
    out_specs: &[PartitionSpec],
    body: ClosedJaxpr,
) -> Params {
    let mesh_record = super::constraint::mesh_value(mesh);
    let specs = |specs: &[PartitionSpec]| ParamValue::Tuple(specs.iter().map(spec_value).collect());
    Params::new()
        .with("check_vma", ParamValue::Bool(true))
        .with("in_specs", specs(in_specs))
        .with("jaxpr", ParamValue::Jaxpr(Box::new(body)))
        .with("mesh", mesh_record)
        .with("out_specs", specs(out_specs))
}

/// A spec as JAX prints it: a tuple of dimensions, or `P(..., unreduced={...})` where the spec
/// holds axes unreduced.
fn spec_value(spec: &PartitionSpec) -> ParamValue {
    let dims: Vec<ParamValue> = spec
        .dims()
        .iter()
        .map(|d| match d.axes() {
            [] => ParamValue::Name("None".into()),
            axes => ParamValue::Tuple(axes.iter().map(|a| ParamValue::Name(a.clone())).collect()),
        })
        .collect();
    if spec.unreduced().is_empty() {
        return ParamValue::Tuple(dims);
    }
    let mut fields: Vec<(String, ParamValue)> =
        dims.into_iter().map(|d| (String::new(), d)).collect();
    let axes = spec.unreduced().iter().map(|a| ParamValue::Str(a.clone()));
    fields.push(("unreduced".into(), ParamValue::Set(axes.collect())));
    ParamValue::Record("P".into(), fields)
}

fn read_mesh(params: &Params) -> Result<AbstractMesh> {
    read_mesh_param(params, "mesh")
}

/// The mesh a `jit` was traced on (`ctx_mesh=Mesh('pp': 2, ...)`), where it names one: the
/// mesh of its explicit types' axes, which `verify` and the lowering of `reshard` use.
pub fn context_mesh(params: &Params) -> Option<AbstractMesh> {
    params.get("ctx_mesh")?;
    read_mesh_param(params, "ctx_mesh").ok()
}

/// Reads a mesh parameter (`mesh=Mesh('data': 2, ...)`, a `jit`'s `ctx_mesh=...`).
pub(crate) fn read_mesh_param(params: &Params, key: &str) -> Result<AbstractMesh> {
    let bad = |why: String| type_error(NAME, format!("parameter `{key}` {why}"));
    let value = params.get(key);
    let Some(value @ ParamValue::Record(kind, fields)) = value else {
        return Err(bad("must be Mesh('axis': size, ...)".into()));
    };
    if kind != "Mesh" && kind != "AbstractMesh" {
        return Err(bad(format!(
            "must be Mesh(...) or AbstractMesh(...), got {kind}(...)"
        )));
    }
    // JAX's printed form: quoted axis names as mapping entries, then keyword fields (axis
    // types, device kind, ...); the stored form: `name=size` fields only.
    let entries = value.entries();
    let axes: Vec<(&str, &ParamValue)> = if entries.is_empty() {
        fields.iter().map(|(n, v)| (n.as_str(), v)).collect()
    } else {
        entries
    };
    let mut names = Vec::new();
    let mut sizes = Vec::new();
    for (name, size) in axes {
        let size = size
            .as_int()
            .ok_or_else(|| bad(format!("gives axis '{name}' no size")))?;
        names.push(name);
        sizes.push(size);
    }
    let types = read_axis_types(value, names.len(), &bad)?;
    AbstractMesh::new(&names, &sizes, &types).map_err(|e| bad(e.to_string()))
}

/// A printed mesh's axis types (`axis_types=(Explicit, Auto)`); without them every one of its
/// `count` axes is `Auto`, as JAX reads it.
pub(crate) fn read_axis_types(
    value: &ParamValue,
    count: usize,
    bad: &dyn Fn(String) -> crate::IrError,
) -> Result<Vec<AxisType>> {
    match value.field("axis_types").and_then(ParamValue::as_seq) {
        None => Ok(vec![AxisType::Auto; count]),
        Some(types) => types
            .iter()
            .map(|t| match t {
                ParamValue::Name(n) => {
                    AxisType::parse(n).ok_or_else(|| bad(format!("has unknown axis type {n}")))
                }
                other => Err(bad(format!("has axis type {other}, not a name"))),
            })
            .collect(),
    }
}

fn read_specs(params: &Params, key: &str) -> Result<Vec<PartitionSpec>> {
    let bad = |why: String| {
        type_error(
            NAME,
            format!("parameter `{key}` must be a tuple of partition specs{why}"),
        )
    };
    let specs = params
        .get(key)
        .and_then(ParamValue::as_seq)
        .ok_or_else(|| bad(String::new()))?;
    specs
        .iter()
        .map(|spec| {
            let dims: Vec<&ParamValue> = match spec {
                ParamValue::Record(n, fields) if n == "P" || n == "PartitionSpec" => {
                    for (k, v) in fields {
                        let set = matches!(v, ParamValue::Set(items) if items.iter().all(|a| a.as_str().is_some()));
                        let known = k.is_empty() || ((k == "reduced" || k == "unreduced") && set);
                        if !known {
                            return Err(bad(format!(", but {spec} has field {k}={v}")));
                        }
                    }
                    spec.positional()
                }
                other => other
                    .as_seq()
                    .ok_or_else(|| bad(format!(", got {other}")))?
                    .iter()
                    .collect(),
            };
            let dims = dims
                .into_iter()
                .map(|d| match d {
                    v if v.is_none() => Ok(DimSpec::from_axes::<&str>(&[])),
                    ParamValue::Name(n) | ParamValue::Str(n) => Ok(DimSpec::from_axes(&[n.as_str()])),
                    v => {
                        let names: Option<Vec<&str>> = v.as_seq().and_then(|s| {
                            s.iter()
                                .map(|a| match a {
                                    ParamValue::Name(n) | ParamValue::Str(n) => Some(n.as_str()),
                                    other => other.as_str(),
                                })
                                .collect()
                        });
                        names
                            .map(|n| DimSpec::from_axes(&n))
                            .ok_or_else(|| bad(format!(", but {spec} has entry {v}")))
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            let unreduced: Vec<&str> = match spec.field("unreduced") {
                Some(ParamValue::Set(items)) => items.iter().filter_map(ParamValue::as_str).collect(),
                Some(_) | None => Vec::new(),
            };
            Ok(PartitionSpec::new(dims).with_unreduced(&unreduced))
        })
        .collect()
}

/// How many blocks `spec` cuts each dimension of a rank-`rank` array into on `mesh`.
pub fn split_factors(spec: &PartitionSpec, mesh: &AbstractMesh, rank: usize) -> Result<Vec<i64>> {
    if spec.len() > rank {
        return Err(type_error(
            NAME,
            format!(
                "spec {spec} has {} dimensions, more than the value's rank {rank}",
                spec.len()
            ),
        ));
    }
    let mut factors = vec![1; rank];
    for (d, dim) in spec.dims().iter().enumerate() {
        for axis in dim.axes() {
            factors[d] *= mesh.axis_size(axis).ok_or_else(|| {
                type_error(
                    NAME,
                    format!(
                        "spec {spec} names axis '{axis}', which the mesh ({}) lacks",
                        mesh.axis_names().join(", ")
                    ),
                )
            })?;
        }
    }
    Ok(factors)
}

/// The per-device block type of a global value laid out by `spec`; its `vma` is the set of axes
/// the spec names, with those the value already varies over (the manual axes of an enclosing
/// `shard_map`, for a `shard_map` nested in another).
pub fn block_aval(
    global: &ShapedArray,
    spec: &PartitionSpec,
    mesh: &AbstractMesh,
) -> Result<ShapedArray> {
    let factors = split_factors(spec, mesh, global.rank())?;
    let mut block = ShapedArray::new(global.dtype, &global.shape);
    for (d, f) in factors.iter().enumerate() {
        if block.shape[d] % f != 0 {
            return Err(type_error(
                NAME,
                format!(
                    "dimension {d} of {global} has size {}, which {spec} splits into {f} blocks; \
                     the size must be divisible",
                    block.shape[d]
                ),
            ));
        }
        block.shape[d] /= f;
    }
    block.vma = spec.used_axes().map(str::to_owned).collect();
    block.vma.extend(global.vma.iter().cloned());
    // Each device's block of a value held unreduced is its partial sum.
    if !spec.unreduced().is_empty() {
        let unreduced = spec.unreduced().iter().cloned().collect();
        block.set_reduced_unreduced(Default::default(), unreduced);
    }
    Ok(block)
}

/// The global type assembled from per-device blocks laid out by `spec`; it still varies over
/// the block's axes that are not `mesh`'s (those of an enclosing `shard_map`).
pub fn global_aval(
    block: &ShapedArray,
    spec: &PartitionSpec,
    mesh: &AbstractMesh,
) -> Result<ShapedArray> {
    let factors = split_factors(spec, mesh, block.rank())?;
    let shape: Vec<i64> = block
        .shape
        .iter()
        .zip(&factors)
        .map(|(s, f)| s * f)
        .collect();
    let mut global = ShapedArray::new(block.dtype, &shape);
    global.vma = block
        .vma
        .iter()
        .filter(|a| mesh.axis_index(a).is_none())
        .cloned()
        .collect();
    Ok(global)
}

pub(super) fn abstract_eval(params: &Params, inputs: &[ShapedArray]) -> Result<Vec<ShapedArray>> {
    let p = ShardMapParams::read(params)?;
    if let Some(axis) = crate::axis_env::rebound_axis(&p.mesh) {
        return Err(crate::axis_env::reused_axis(NAME, &axis));
    }
    let body_in = p.body.jaxpr.in_avals();
    if inputs.len() != p.in_specs.len() || inputs.len() != body_in.len() {
        return Err(type_error(
            NAME,
            format!(
                "{} operands, {} in_specs and a body of {} parameters must agree",
                inputs.len(),
                p.in_specs.len(),
                body_in.len()
            ),
        ));
    }
    for (i, (x, spec)) in inputs.iter().zip(&p.in_specs).enumerate() {
        let block = block_aval(x, spec, &p.mesh)?;
        if !block.same_type(&body_in[i]) {
            return Err(type_error(
                NAME,
                format!(
                    "operand {i} of type {x} has blocks {block} under {spec}, but the body takes {}",
                    body_in[i]
                ),
            ));
        }
    }
    let body_out = p.body.jaxpr.out_avals();
    if body_out.len() != p.out_specs.len() {
        return Err(type_error(
            NAME,
            format!(
                "the body has {} results but there are {} out_specs",
                body_out.len(),
                p.out_specs.len()
            ),
        ));
    }
    let explicit = explicit_axes(params);
    body_out
        .iter()
        .zip(&p.out_specs)
        .enumerate()
        .map(|(i, (b, spec))| {
            if let Some(message) = unreduced_out_claim(i, b, spec, &p.mesh) {
                return Err(type_error("shard_map", message));
            }
            let mut global = global_aval(b, spec, &p.mesh)?;
            if !explicit.is_empty() {
                explicit_result_type(&mut global, spec, params, i, &explicit);
            }
            Ok(global)
        })
        .collect()
}

/// Why result `index` (block type `block`) cannot leave the `shard_map` under `spec`: it is
/// unreduced over an axis of `mesh` (each device holds a partial sum) that the spec's
/// `unreduced=` set does not name, so the spec claims a value (replicated, or split) where
/// there are partial sums; `None` when it may. JAX refuses the same.
pub fn unreduced_out_claim(
    index: usize,
    block: &ShapedArray,
    spec: &PartitionSpec,
    mesh: &AbstractMesh,
) -> Option<String> {
    let axis = block
        .unreduced()
        .into_iter()
        .find(|a| mesh.axis_index(a).is_some() && !spec.unreduced().contains(a))?;
    Some(format!(
        "result {index} ({block}) is unreduced over '{axis}' (each device holds a partial sum), \
         but out_specs {spec} claim a value; sum it first (psum or unreduced_psum over \
         '{axis}'), or return it unreduced with unreduced={{'{axis}'}} in the out_spec"
    ))
}

/// Whether a `shard_map`'s mesh has axes typed `Explicit` (its results are typed by its out
/// specs).
pub fn on_explicit_mesh(params: &Params) -> bool {
    !explicit_axes(params).is_empty()
}

/// The mesh axes typed `Explicit` (`mesh=AbstractMesh(..., axis_types=(Explicit, ...))`).
fn explicit_axes(params: &Params) -> Vec<String> {
    let Some(mesh) = params.get("mesh") else {
        return Vec::new();
    };
    let Some(types) = mesh.field("axis_types").and_then(ParamValue::as_seq) else {
        return Vec::new();
    };
    mesh.entries()
        .iter()
        .zip(types)
        .filter(|(_, t)| matches!(t, ParamValue::Name(n) if n == "Explicit"))
        .map(|((name, _), _)| (*name).to_owned())
        .collect()
}

/// On an explicit mesh a result is typed by its out spec, as JAX types it: each dimension
/// split over the spec's explicit axes, reduced and unreduced over the spec's `reduced=` and
/// `unreduced=` sets (`f32[8@pp,4]{R:tp}` for `P('pp', reduced={'tp'})`).
fn explicit_result_type(
    global: &mut ShapedArray,
    spec: &PartitionSpec,
    params: &Params,
    index: usize,
    explicit: &[String],
) {
    let dims = spec
        .dims()
        .iter()
        .map(|d| {
            d.axes()
                .iter()
                .filter(|a| explicit.contains(a))
                .cloned()
                .collect()
        })
        .collect();
    global.set_explicit_dims(dims);
    let printed = params
        .get("out_specs")
        .and_then(ParamValue::as_seq)
        .and_then(|specs| specs.get(index));
    let set = |key: &str| -> std::collections::BTreeSet<String> {
        match printed.and_then(|s| s.field(key)) {
            Some(ParamValue::Set(items)) => items
                .iter()
                .filter_map(|a| a.as_str().map(str::to_owned))
                .collect(),
            Some(_) | None => Default::default(),
        }
    };
    global.set_reduced_unreduced(set("reduced"), set("unreduced"));
}
