//! The runner for JAX-made collective test vectors (`collectives_cases.json`): each case is
//! `shard_map(f)` with one collective `f` over a mesh. For each case we build the program with
//! the tracing API, evaluate it (interpreter or compiled), compare the output with JAX's and, on
//! request, the input gradient of `sum(f(x) * cotangent)`; and we check that the replica groups
//! and source–target pairs we compute are the ones in JAX's lowered ops.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;
use tessera_sharding::{AbstractMesh, DimSpec, PartitionSpec, groups};

use crate::array::Array;
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::jaxpr::ClosedJaxpr;
use crate::oracle::{Evaluate, Report, Tensor as OracleTensor, compare};
use crate::prim::{CollectiveKind, CollectiveParams, Prim, ShardMapParams};
use crate::trace::{Tensor, shard_map_program};

type Outcome<T> = std::result::Result<T, String>;

/// A lowered collective op: its StableHLO name and its replica groups (or source–target pairs).
pub type OpGroups = (&'static str, Vec<Vec<i64>>);

/// The mesh of a case.
#[derive(Debug, Clone, Deserialize)]
pub struct MeshJson {
    /// Axis names.
    pub axis_names: Vec<String>,
    /// Axis sizes.
    pub axis_sizes: Vec<i64>,
}

/// One case.
#[derive(Debug, Clone, Deserialize)]
pub struct Case {
    /// The mesh.
    pub mesh: MeshJson,
    /// The collective's name (`psum`, `all_gather`, ...).
    pub op: String,
    /// Its keyword arguments.
    pub params: Value,
    /// The spec of the input (one entry per dimension: an axis name, a list of them, or null).
    pub in_spec: Vec<Value>,
    /// The spec of the output.
    pub out_spec: Vec<Value>,
    /// The global input, nested lists of float32.
    pub input: Value,
    /// JAX's global output.
    pub output: Value,
    /// The cotangent of the output.
    #[serde(default)]
    pub cotangent: Option<Value>,
    /// d/dx sum(f(x) * cotangent), null where JAX gives none.
    #[serde(default)]
    pub input_grad: Option<Value>,
    /// The collective lines of JAX's lowering.
    #[serde(default)]
    pub stablehlo_ops: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct File {
    cases: Vec<Case>,
}

impl Case {
    /// A short name: the op, its parameters and the mesh.
    pub fn name(&self) -> String {
        let axes: Vec<String> = self
            .mesh
            .axis_names
            .iter()
            .zip(&self.mesh.axis_sizes)
            .map(|(n, s)| format!("{n}={s}"))
            .collect();
        format!("{}{} on {}", self.op, self.params, axes.join(","))
    }

    /// The mesh.
    pub fn abstract_mesh(&self) -> Outcome<AbstractMesh> {
        let axes: Vec<(&str, i64)> = self
            .mesh
            .axis_names
            .iter()
            .map(String::as_str)
            .zip(self.mesh.axis_sizes.iter().copied())
            .collect();
        AbstractMesh::auto(&axes).map_err(|e| e.to_string())
    }

    /// The global input array.
    pub fn input_array(&self) -> Outcome<Array> {
        to_array(&self.input)
    }

    /// Builds `shard_map(op)` as a program on the global input.
    pub fn program(&self) -> Outcome<ClosedJaxpr> {
        let mesh = self.abstract_mesh()?;
        let x = self.input_array()?;
        let in_spec = spec(&self.in_spec)?;
        let out_spec = spec(&self.out_spec)?;
        let aval = ShapedArray::new(DType::F32, &x.shape());
        shard_map_program(&mesh, &[in_spec], &[out_spec], &[aval], |args| {
            vec![apply(&self.op, &self.params, &args[0])]
        })
        .map_err(|e| format!("build: {e}"))
    }
}

fn spec(dims: &[Value]) -> Outcome<PartitionSpec> {
    let dim = |v: &Value| match v {
        Value::Null => Ok(DimSpec::from_axes::<&str>(&[])),
        Value::String(a) => Ok(DimSpec::from_axes(&[a.as_str()])),
        Value::Array(items) => items
            .iter()
            .map(|a| a.as_str().ok_or_else(|| format!("bad axis {a}")))
            .collect::<Outcome<Vec<_>>>()
            .map(|axes| DimSpec::from_axes(&axes)),
        other => Err(format!("bad spec entry {other}")),
    };
    Ok(PartitionSpec::new(
        dims.iter().map(dim).collect::<Outcome<_>>()?,
    ))
}

fn str_list(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The per-device body of a case: the collective applied to the block `x`.
fn apply(op: &str, p: &Value, x: &Tensor) -> Tensor {
    let int = |k: &str| p.get(k).and_then(Value::as_i64).unwrap_or(0);
    let tiled = p.get("tiled").and_then(Value::as_bool).unwrap_or(false);
    let name = p.get("axis_name").and_then(Value::as_str).unwrap_or("");
    let axes = p.get("axes").map(str_list).unwrap_or_default();
    match op {
        "psum" => x.psum(&axes),
        "pmean" => x.pmean(&axes),
        "pmax" => x.pmax(&axes),
        "pmin" => x.pmin(&axes),
        "all_gather" => x.all_gather(name, int("axis"), tiled),
        "psum_scatter" => x.psum_scatter(name, int("scatter_dimension"), tiled),
        "all_to_all" => x.all_to_all(name, int("split_axis"), int("concat_axis"), tiled),
        "ppermute" => {
            let perm: Vec<(i64, i64)> = p
                .get("perm")
                .and_then(Value::as_array)
                .map(|pairs| {
                    pairs
                        .iter()
                        .filter_map(|pair| Some((pair.get(0)?.as_i64()?, pair.get(1)?.as_i64()?)))
                        .collect()
                })
                .unwrap_or_default();
            x.ppermute(name, &perm)
        }
        "axis_index" => &(x * 0.0) + &Tensor::axis_index(x, name).astype(DType::F32),
        other => x.fail("oracle", format!("unknown collective `{other}`")),
    }
}

fn to_array(v: &Value) -> Outcome<Array> {
    let mut shape = Vec::new();
    let mut cur = v;
    while let Value::Array(items) = cur {
        shape.push(items.len() as i64);
        match items.first() {
            Some(first) => cur = first,
            None => break,
        }
    }
    let mut data = Vec::new();
    flatten(v, &mut data);
    Array::new(DType::F32, &shape, data).map_err(|e| e.to_string())
}

fn flatten(v: &Value, out: &mut Vec<f64>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| flatten(i, out)),
        Value::Number(n) => out.push(n.as_f64().unwrap_or(f64::NAN)),
        _ => out.push(f64::NAN),
    }
}

fn as_oracle(a: &Array) -> OracleTensor {
    OracleTensor {
        dtype: "float32".into(),
        shape: a.shape(),
        data: a.to_vec(),
    }
}

/// Runs every case of `path`: outputs, the lowered groups, and with `grads` the gradients.
pub fn run_file(path: &Path, evaluate: &Evaluate<'_>, grads: bool) -> Outcome<Report> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file: File = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a collectives oracle file: {e}", path.display()))?;
    let mut report = Report::default();
    for case in &file.cases {
        match run_case(case, evaluate, grads) {
            Ok(()) => report.passed += 1,
            Err(why) => report.failures.push((case.name(), why)),
        }
    }
    Ok(report)
}

/// Runs one case.
pub fn run_case(case: &Case, evaluate: &Evaluate<'_>, grads: bool) -> Outcome<()> {
    let program = case.program()?;
    crate::verify(&program).map_err(|e| format!("verify: {e}"))?;
    check_ops(case, &program)?;
    let x = case.input_array()?;
    let out = evaluate(&program, std::slice::from_ref(&x)).map_err(|e| format!("evaluate: {e}"))?;
    let want = to_array(&case.output)?;
    let got = out.first().ok_or("no output")?;
    compare(0, got, &as_oracle(&want), 1e-5)?;
    if !grads {
        return Ok(());
    }
    let (Some(ct), Some(grad)) = (&case.cotangent, &case.input_grad) else {
        return Ok(());
    };
    let vjp = crate::autodiff::vjp(&program).map_err(|e| format!("vjp: {e}"))?;
    crate::verify(&vjp).map_err(|e| format!("vjp does not verify: {e}"))?;
    let got = evaluate(&vjp, &[x, to_array(ct)?]).map_err(|e| format!("evaluate the vjp: {e}"))?;
    let got = got.first().ok_or("the vjp returned nothing")?;
    compare(0, got, &as_oracle(&to_array(grad)?), 1e-5).map_err(|e| format!("gradient: {e}"))
}

/// The collective ops of the program, as `(stablehlo op, groups)` with the groups we compute
/// (`replica_groups`, or `source_target_pairs` for a permute).
pub fn our_ops(program: &ClosedJaxpr) -> Outcome<Vec<OpGroups>> {
    let mut ops = Vec::new();
    for eqn in &program.jaxpr.eqns {
        if eqn.prim != Prim::ShardMap {
            continue;
        }
        let sm = ShardMapParams::read(&eqn.params).map_err(|e| e.to_string())?;
        let body = &sm.body.jaxpr;
        for inner in &body.eqns {
            if !inner.prim.is_collective() {
                continue;
            }
            let rank = inner.inputs.first().map_or(0, |a| body.atom_aval(a).rank());
            let p = CollectiveParams::read(inner.prim, &inner.params, rank)
                .map_err(|e| e.to_string())?;
            let groups = || {
                p.replica_groups(inner.prim, &sm.mesh)
                    .map_err(|e| e.to_string())
            };
            let op = match &p.kind {
                CollectiveKind::Psum
                | CollectiveKind::UnreducedPsum
                | CollectiveKind::Pmax
                | CollectiveKind::Pmin => ("stablehlo.all_reduce", groups()?),
                CollectiveKind::AllGather { .. } => ("stablehlo.all_gather", groups()?),
                CollectiveKind::ReduceScatter { .. } => ("stablehlo.reduce_scatter", groups()?),
                CollectiveKind::AllToAll { .. } => ("stablehlo.all_to_all", groups()?),
                CollectiveKind::RaggedAllToAll => ("stablehlo.custom_call", groups()?),
                CollectiveKind::AxisIndex => ("stablehlo.partition_id", Vec::new()),
                CollectiveKind::Ppermute { perm } => {
                    let pairs = groups::permute_pairs(&sm.mesh, &p.axes, perm)
                        .map_err(|e| e.to_string())?;
                    (
                        "stablehlo.collective_permute",
                        pairs.iter().map(|&(s, t)| vec![s, t]).collect(),
                    )
                }
                CollectiveKind::Psend { perm } | CollectiveKind::Precv { perm, .. } => {
                    let pairs = groups::permute_pairs(&sm.mesh, &p.axes, perm)
                        .map_err(|e| e.to_string())?;
                    let name = match p.kind {
                        CollectiveKind::Psend { .. } => "stablehlo.send",
                        _ => "stablehlo.recv",
                    };
                    (name, pairs.iter().map(|&(s, t)| vec![s, t]).collect())
                }
                CollectiveKind::Pvary
                | CollectiveKind::Preduced
                | CollectiveKind::VaryUnreducedCast
                | CollectiveKind::ReducedVaryCast
                | CollectiveKind::Pbroadcast { .. } => continue,
            };
            ops.push(op);
        }
    }
    Ok(ops)
}

/// Parses the op name and its groups out of one line of JAX's lowering.
pub fn parse_op_line(line: &str) -> Option<(String, Vec<Vec<i64>>)> {
    let name_start = line.find("stablehlo.")?;
    let name: String = line[name_start..]
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
        .collect();
    let groups = ["replica_groups = dense<", "source_target_pairs = dense<"]
        .iter()
        .find_map(|key| {
            let start = line.find(key)? + key.len();
            let end = start + line[start..].find('>')?;
            serde_json::from_str::<Vec<Vec<i64>>>(&line[start..end]).ok()
        })
        .unwrap_or_default();
    Some((name, groups))
}

fn check_ops(case: &Case, program: &ClosedJaxpr) -> Outcome<()> {
    let ours = our_ops(program)?;
    let theirs: Vec<(String, Vec<Vec<i64>>)> = case
        .stablehlo_ops
        .iter()
        .filter_map(|l| parse_op_line(l))
        .collect();
    let ours: Vec<(String, Vec<Vec<i64>>)> = ours
        .into_iter()
        // JAX lowers an all_to_all within groups of one device to nothing.
        .filter(|(op, g)| {
            !(*op == "stablehlo.all_to_all" && g.first().is_some_and(|g| g.len() == 1))
        })
        .map(|(op, g)| (op.to_owned(), g))
        .collect();
    if ours != theirs {
        return Err(format!(
            "collective ops differ: ours {ours:?}, JAX {theirs:?}"
        ));
    }
    Ok(())
}
