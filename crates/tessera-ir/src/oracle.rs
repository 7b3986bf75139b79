//! The runner for JAX's `jaxpr_cases.json` (feature `oracle`).
//!
//! For each case: parse the text, check that printing the parsed jaxpr and parsing it again gives
//! the same IR, verify it, evaluate it on `inputs` and compare with `outputs`. Values agree when
//! `|a - b| <= rtol * max(|a|, |b|) + atol` with `rtol = 1e-4, atol = 1e-5` (`rtol = atol = 1e-2`
//! when the jaxpr mentions bf16); NaN matches NaN; dtypes and shapes must match exactly.

use crate::interp::{Array, eval_closed};
use crate::text::{parse_closed_jaxpr, print_jaxpr};
use crate::types::DType;
use serde::Deserialize;
use std::path::Path;

/// Which evaluator runs the programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The reference interpreter.
    Interp,
}

/// The outcome of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Cases that passed.
    pub passed: usize,
    /// One line per failed case: `name: what went wrong`.
    pub failures: Vec<String>,
}

/// The oracle file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    /// Reading the file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The JSON does not have the documented format.
    #[error("{path} is not a jaxpr oracle file: {source}")]
    Json {
        /// The path.
        path: String,
        /// The cause.
        source: serde_json::Error,
    },
}

#[derive(Deserialize)]
struct File {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    jaxpr: String,
    inputs: Vec<Tensor>,
    outputs: Vec<Tensor>,
}

#[derive(Deserialize)]
struct Tensor {
    dtype: String,
    shape: Vec<usize>,
    data: Vec<Option<f64>>,
}

impl Tensor {
    fn to_array(&self) -> Result<Array, String> {
        let d =
            DType::from_name(&self.dtype).ok_or_else(|| format!("unknown dtype {}", self.dtype))?;
        let data: Vec<f64> = self.data.iter().map(|x| x.unwrap_or(f64::NAN)).collect();
        Array::from_f64(d, &self.shape, &data).map_err(|e| e.to_string())
    }
}

/// Runs every case of the file at `path`.
pub fn run_file(path: &Path, backend: Backend) -> Result<Report, OracleError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| OracleError::Io {
        path: p.clone(),
        source,
    })?;
    let file: File =
        serde_json::from_str(&text).map_err(|source| OracleError::Json { path: p, source })?;
    let mut report = Report::default();
    for case in &file.cases {
        match run_case(case, backend) {
            Ok(()) => report.passed += 1,
            Err(e) => report.failures.push(format!("{}: {e}", case.name)),
        }
    }
    Ok(report)
}

fn run_case(case: &Case, backend: Backend) -> Result<(), String> {
    let Backend::Interp = backend;
    let cj = parse_closed_jaxpr(&case.jaxpr).map_err(|e| format!("parse: {e}"))?;
    let printed = print_jaxpr(&cj.jaxpr);
    let again =
        parse_closed_jaxpr(&printed).map_err(|e| format!("reparse of the printed jaxpr: {e}"))?;
    if again != cj {
        return Err(format!(
            "printing and parsing again changed the IR; printed:\n{printed}"
        ));
    }
    crate::verify::verify_closed(&cj).map_err(|e| format!("verify: {e}"))?;
    let args = case
        .inputs
        .iter()
        .map(Tensor::to_array)
        .collect::<Result<Vec<_>, _>>()?;
    let outs = eval_closed(&cj, &args).map_err(|e| format!("eval: {e}"))?;
    if outs.len() != case.outputs.len() {
        return Err(format!(
            "{} outputs, expected {}",
            outs.len(),
            case.outputs.len()
        ));
    }
    let bf16 = case.jaxpr.contains("bf16");
    let (rtol, atol) = if bf16 { (1e-2, 1e-2) } else { (1e-4, 1e-5) };
    for (k, (got, want)) in outs.iter().zip(&case.outputs).enumerate() {
        compare(k, got, want, rtol, atol)?;
    }
    Ok(())
}

fn compare(k: usize, got: &Array, want: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    if got.dtype().numpy_name() != want.dtype || got.shape() != want.shape.as_slice() {
        return Err(format!(
            "output {k}: got {} expected {}{:?}",
            got.aval(),
            want.dtype,
            want.shape
        ));
    }
    for (i, (a, b)) in got.to_f64_vec().iter().zip(&want.data).enumerate() {
        let b = b.unwrap_or(f64::NAN);
        let ok = (a.is_nan() && b.is_nan())
            || a == &b
            || (a - b).abs() <= rtol * a.abs().max(b.abs()) + atol;
        if !ok {
            return Err(format!("output {k} element {i}: got {a}, expected {b}"));
        }
    }
    Ok(())
}
