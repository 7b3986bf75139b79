//! The runner of JAX-made oracle files (`sharding_cases.json` and any file of the same format):
//! every case is rebuilt with this crate and compared field by field.
//!
//! `named_sharding` cases build a mesh, a spec and a NamedSharding, then compare the HloSharding
//! text, tile devices, replication, device count, Shardy text, shard shape and per-device blocks.
//! A case with `error` passes only when this crate refuses it too, with the same JAX error type.
//! `hlo_sharding_text` cases parse a text, print it back, and compare XLA's accessors.

use std::path::Path;

use serde_json::Value;
use thiserror::Error;

use crate::error::ShardingError;
use crate::hlo::HloSharding;
use crate::mesh::{AbstractMesh, AxisType, Mesh};
use crate::named::NamedSharding;
use crate::spec::{DimSpec, PartitionSpec};

/// Why a file could not be run at all.
#[derive(Debug, Error)]
pub enum OracleError {
    /// The file could not be read.
    #[error("cannot read {path}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not JSON.
    #[error("{path} is not JSON")]
    Json {
        /// The file.
        path: String,
        /// The cause.
        source: serde_json::Error,
    },
    /// The JSON does not have the oracle's shape.
    #[error("{path} is not a sharding oracle file: {reason}")]
    Format {
        /// The file.
        path: String,
        /// What is missing.
        reason: String,
    },
}

/// The outcome of a file: counts and one line per failing case.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Cases that matched.
    pub passed: usize,
    /// Cases that did not.
    pub failed: usize,
    /// For each failing case, which case and what differed.
    pub failures: Vec<String>,
}

impl Report {
    fn record(&mut self, name: String, outcome: Result<(), String>) {
        match outcome {
            Ok(()) => self.passed += 1,
            Err(why) => {
                self.failed += 1;
                self.failures.push(format!("{name}: {why}"));
            }
        }
    }
}

/// Runs every case of an oracle file.
pub fn run_file(path: &Path) -> Result<Report, OracleError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| OracleError::Io {
        path: shown.clone(),
        source,
    })?;
    let json: Value = serde_json::from_str(&text).map_err(|source| OracleError::Json {
        path: shown.clone(),
        source,
    })?;
    run_value(&json).map_err(|reason| OracleError::Format {
        path: shown,
        reason,
    })
}

/// Runs every case of an already parsed oracle document.
pub fn run_value(json: &Value) -> Result<Report, String> {
    let named = json.get("named_sharding").and_then(Value::as_array);
    let texts = json.get("hlo_sharding_text").and_then(Value::as_array);
    if named.is_none() && texts.is_none() {
        return Err("neither `named_sharding` nor `hlo_sharding_text` is a list".into());
    }
    let mut report = Report::default();
    for (i, case) in named.into_iter().flatten().enumerate() {
        report.record(format!("named_sharding[{i}]"), run_named(case));
    }
    for (i, case) in texts.into_iter().flatten().enumerate() {
        let name = format!(
            "hlo_sharding_text[{i}] {}",
            case.get("text").unwrap_or(&Value::Null)
        );
        report.record(name, run_text(case));
    }
    Ok(report)
}

fn field<'a>(v: &'a Value, key: &str) -> Result<&'a Value, String> {
    v.get(key).ok_or_else(|| format!("the case has no `{key}`"))
}

fn ints(v: &Value) -> Result<Vec<i64>, String> {
    let list = v.as_array().ok_or_else(|| format!("{v} is not a list"))?;
    list.iter()
        .map(|x| x.as_i64().ok_or_else(|| format!("{x} is not an integer")))
        .collect()
}

fn strings(v: &Value) -> Result<Vec<String>, String> {
    let list = v.as_array().ok_or_else(|| format!("{v} is not a list"))?;
    list.iter()
        .map(|x| {
            x.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{x} is not a string"))
        })
        .collect()
}

fn build_mesh(v: &Value) -> Result<Result<Mesh, ShardingError>, String> {
    let names = strings(field(v, "axis_names")?)?;
    let sizes = ints(field(v, "axis_sizes")?)?;
    let types = strings(field(v, "axis_types")?)?
        .iter()
        .map(|t| AxisType::parse(t).ok_or_else(|| format!("unknown axis type {t}")))
        .collect::<Result<Vec<_>, _>>()?;
    let devices = ints(field(v, "device_ids")?)?;
    Ok(AbstractMesh::from_parts(names, sizes, types).and_then(|m| Mesh::new(m, devices)))
}

fn build_spec(v: &Value) -> Result<PartitionSpec, String> {
    let list = v
        .as_array()
        .ok_or_else(|| format!("spec {v} is not a list"))?;
    let dims = list
        .iter()
        .map(|d| match d {
            Value::Null => Ok(DimSpec::Replicated),
            Value::String(s) if s == "UNCONSTRAINED" => Ok(DimSpec::Unconstrained),
            Value::String(s) => Ok(DimSpec::Axes(vec![s.clone()])),
            Value::Array(_) => Ok(DimSpec::from_axes(&strings(d)?)),
            other => Err(format!("spec entry {other} is not null, a name or a list")),
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(PartitionSpec::new(dims))
}

/// What Tessera makes of a named case: the sharding and its HloSharding, or its refusal.
fn attempt(
    case: &Value,
    ndim: usize,
) -> Result<Result<(NamedSharding, HloSharding), ShardingError>, String> {
    let mesh = match build_mesh(field(case, "mesh")?)? {
        Ok(m) => m,
        Err(e) => return Ok(Err(e)),
    };
    let spec = build_spec(field(case, "spec")?)?;
    let logical = match case.get("logical_device_ids") {
        Some(Value::Null) | None => None,
        Some(v) => Some(ints(v)?),
    };
    let built = NamedSharding::new(&mesh, spec).and_then(|s| match logical {
        Some(ids) => s.with_logical_device_ids(ids),
        None => Ok(s),
    });
    Ok(built.and_then(|s| s.to_hlo_sharding(ndim).map(|h| (s, h))))
}

fn run_named(case: &Value) -> Result<(), String> {
    let ndim = field(case, "ndim")?
        .as_u64()
        .ok_or("`ndim` is not a count")? as usize;
    let outcome = attempt(case, ndim)?;
    if let Some(expected) = case.get("error") {
        let ty = expected.get("type").and_then(Value::as_str).unwrap_or("?");
        return match outcome {
            Ok((_, h)) => Err(format!("JAX refuses it ({ty}) but Tessera gives {h}")),
            Err(e) if e.jax_type() == ty => Ok(()),
            Err(e) => Err(format!(
                "JAX raises {ty}, Tessera refuses as {}: {e}",
                e.jax_type()
            )),
        };
    }
    let (sharding, hlo) = outcome.map_err(|e| format!("Tessera refuses it: {e}"))?;
    let mut diffs = Vec::new();
    compare_named(case, &sharding, &hlo, ndim, &mut diffs)?;
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(diffs.join("; "))
    }
}

fn differ<T: std::fmt::Debug + PartialEq>(diffs: &mut Vec<String>, what: &str, want: T, got: T) {
    if want != got {
        diffs.push(format!("{what}: JAX {want:?}, Tessera {got:?}"));
    }
}

fn compare_named(
    case: &Value,
    s: &NamedSharding,
    hlo: &HloSharding,
    ndim: usize,
    diffs: &mut Vec<String>,
) -> Result<(), String> {
    let want_text = field(case, "hlo_sharding")?.as_str().unwrap_or_default();
    differ(
        diffs,
        "hlo_sharding",
        want_text.to_string(),
        hlo.to_string(),
    );
    let devices = hlo.tile_assignment_devices().unwrap_or_default();
    differ(
        diffs,
        "tile_assignment_devices",
        ints(field(case, "tile_assignment_devices")?)?,
        devices,
    );
    let want_repl = field(case, "is_fully_replicated")?.as_bool();
    differ(
        diffs,
        "is_fully_replicated",
        want_repl,
        Some(s.is_fully_replicated()),
    );
    differ(
        diffs,
        "num_devices",
        field(case, "num_devices")?.as_i64(),
        Some(s.num_devices()),
    );
    let sdy = s
        .to_sdy_sharding(ndim)
        .map(|x| x.to_string())
        .map_err(|e| e.to_string());
    let want_sdy = field(case, "sdy_sharding")?
        .as_str()
        .unwrap_or_default()
        .to_string();
    differ(diffs, "sdy_sharding", Ok(want_sdy), sdy);
    let shape = ints(field(case, "shape")?)?;
    if let Some(want) = case.get("shard_shape") {
        let got = s.shard_shape(&shape).map_err(|e| e.to_string());
        differ(diffs, "shard_shape", Ok(ints(want)?), got);
    }
    if let Some(want) = case.get("devices_indices").and_then(Value::as_object) {
        let got = s.devices_indices_map(&shape).map_err(|e| e.to_string())?;
        let mut want_list = Vec::new();
        for (id, blocks) in want {
            let id: i64 = id
                .parse()
                .map_err(|_| format!("device key {id} is not a number"))?;
            let blocks = blocks.as_array().ok_or("blocks are not a list")?;
            let pairs = blocks
                .iter()
                .map(|b| {
                    ints(b).and_then(|p| match p[..] {
                        [a, z] => Ok((a, z)),
                        _ => Err(format!("{b} is not [start, stop]")),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            want_list.push((id, pairs));
        }
        let mut got = got;
        want_list.sort();
        got.sort();
        differ(diffs, "devices_indices", want_list, got);
    }
    Ok(())
}

fn run_text(case: &Value) -> Result<(), String> {
    let text = field(case, "text")?
        .as_str()
        .ok_or("`text` is not a string")?;
    let hlo = HloSharding::parse(text).map_err(|e| format!("Tessera cannot parse it: {e}"))?;
    let mut diffs = Vec::new();
    differ(&mut diffs, "printed", text.to_string(), hlo.to_string());
    let opt_ints = |key: &str| -> Result<Option<Vec<i64>>, String> {
        match field(case, key)? {
            Value::Null => Ok(None),
            v => ints(v).map(Some),
        }
    };
    differ(
        &mut diffs,
        "tile_assignment_devices",
        opt_ints("tile_assignment_devices")?,
        hlo.tile_assignment_devices(),
    );
    differ(
        &mut diffs,
        "tile_assignment_dimensions",
        opt_ints("tile_assignment_dimensions")?,
        hlo.tile_assignment_dimensions(),
    );
    let flags = [
        ("is_replicated", hlo.is_replicated()),
        ("is_manual", hlo.is_manual()),
        ("is_maximal", hlo.is_maximal()),
        ("is_tiled", hlo.is_tiled()),
    ];
    for (key, got) in flags {
        differ(&mut diffs, key, field(case, key)?.as_bool(), Some(got));
    }
    differ(
        &mut diffs,
        "num_devices",
        field(case, "num_devices")?.as_i64(),
        hlo.num_devices(),
    );
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(diffs.join("; "))
    }
}
