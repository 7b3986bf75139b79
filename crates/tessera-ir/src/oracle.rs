//! The runner for JAX-made jaxpr test vectors (`jaxpr_cases.json`): parse, verify, check that
//! print → parse gives the same IR, evaluate, compare with JAX's outputs.
//!
//! Comparison: `|got - want| <= rtol * max(|got|, |want|) + atol` elementwise, with `rtol` 1e-4
//! (1e-2 when the program uses bf16) and `atol = rtol * 1e-3` so values that should be zero
//! compare sensibly; NaNs must match NaNs.

use std::path::Path;

use serde::Deserialize;

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::interp::eval_closed;
use crate::text::{parse_closed_with_consts, print_closed};

/// One tensor in the file: dtype, shape, row-major data as float64.
#[derive(Debug, Clone, Deserialize)]
pub struct Tensor {
    /// numpy dtype name.
    pub dtype: String,
    /// Shape.
    pub shape: Vec<i64>,
    /// Values, row-major.
    pub data: Vec<f64>,
}

impl Tensor {
    /// As an interpreter array.
    pub fn to_array(&self) -> Result<Array> {
        let dtype = DType::parse(&self.dtype)
            .ok_or_else(|| IrError::Eval(format!("unknown dtype {}", self.dtype)))?;
        Array::new(dtype, &self.shape, self.data.clone())
    }
}

/// One case.
#[derive(Debug, Clone, Deserialize)]
pub struct Case {
    /// Its name.
    pub name: String,
    /// The jaxpr text.
    pub jaxpr: String,
    /// The values of the program's constvars, in order (the text carries none).
    #[serde(default)]
    pub consts: Vec<Tensor>,
    /// Inputs.
    pub inputs: Vec<Tensor>,
    /// JAX's outputs.
    pub outputs: Vec<Tensor>,
    /// Cotangents for the outputs.
    #[serde(default)]
    pub cotangents: Vec<Tensor>,
    /// d/d input of `sum_k sum(outputs_k * cotangents_k)`, nested lists (null for integers).
    #[serde(default)]
    pub grads: Vec<Option<serde_json::Value>>,
}

impl Case {
    /// The parsed program, closed over the case's constants.
    pub fn program(&self) -> std::result::Result<crate::jaxpr::ClosedJaxpr, String> {
        let consts = self
            .consts
            .iter()
            .map(Tensor::to_array)
            .collect::<Result<Vec<_>>>()
            .map_err(|e| format!("constants: {e}"))?;
        parse_closed_with_consts(&self.jaxpr, &consts).map_err(|e| format!("parse: {e}"))
    }
}

#[derive(Debug, Deserialize)]
struct File {
    cases: Vec<Case>,
}

/// The outcome of a file.
#[derive(Debug, Default)]
pub struct Report {
    /// Cases that passed.
    pub passed: usize,
    /// `(case, what differed)` for each failure.
    pub failures: Vec<(String, String)>,
}

/// Evaluates a program on inputs (a backend: the interpreter, or compiled code).
pub type Evaluate<'a> =
    dyn Fn(&crate::jaxpr::ClosedJaxpr, &[Array]) -> std::result::Result<Vec<Array>, String> + 'a;

/// Reads and runs every case of `path` on the reference interpreter.
pub fn run_file(path: &Path) -> std::result::Result<Report, String> {
    run_file_with(path, &|program, inputs| {
        eval_closed(program, inputs).map_err(|e| e.to_string())
    })
}

/// Reads and runs every case of `path`, evaluating with `evaluate`.
pub fn run_file_with(path: &Path, evaluate: &Evaluate<'_>) -> std::result::Result<Report, String> {
    run_cases(path, |case| run_case_with(case, evaluate))
}

/// Reads `path` and runs `check` on each case, counting passes and collecting failures.
fn run_cases(
    path: &Path,
    check: impl Fn(&Case) -> std::result::Result<(), String>,
) -> std::result::Result<Report, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file: File = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a jaxpr oracle file: {e}", path.display()))?;
    let mut report = Report::default();
    for case in &file.cases {
        match check(case) {
            Ok(()) => report.passed += 1,
            Err(why) => report.failures.push((case.name.clone(), why)),
        }
    }
    Ok(report)
}

/// Runs one case on the interpreter; the error says what differed.
pub fn run_case(case: &Case) -> std::result::Result<(), String> {
    run_case_with(case, &|program, inputs| {
        eval_closed(program, inputs).map_err(|e| e.to_string())
    })
}

/// Runs one case with a backend.
pub fn run_case_with(case: &Case, evaluate: &Evaluate<'_>) -> std::result::Result<(), String> {
    let closed = case.program()?;
    crate::verify(&closed).map_err(|e| format!("verify: {e}"))?;
    let printed = print_closed(&closed, 0);
    let again = parse_closed_with_consts(&printed, &closed.consts)
        .map_err(|e| format!("re-parse of our print: {e}\n{printed}"))?;
    if again != closed {
        return Err(format!("print -> parse changed the program:\n{printed}"));
    }
    let inputs = case
        .inputs
        .iter()
        .map(Tensor::to_array)
        .collect::<Result<Vec<_>>>()
        .map_err(|e| e.to_string())?;
    let outputs = evaluate(&closed, &inputs).map_err(|e| format!("evaluate: {e}"))?;
    let rtol = if case.jaxpr.contains("bf16") {
        1e-2
    } else {
        1e-4
    };
    if outputs.len() != case.outputs.len() {
        return Err(format!(
            "{} outputs, JAX has {}",
            outputs.len(),
            case.outputs.len()
        ));
    }
    for (k, (got, want)) in outputs.iter().zip(&case.outputs).enumerate() {
        compare(k, got, want, rtol)?;
    }
    Ok(())
}

/// Checks the gradients of a case: the VJP program, evaluated by `evaluate` on the inputs and
/// cotangents, against JAX's `grads`.
pub fn check_grads(case: &Case, evaluate: &Evaluate<'_>) -> std::result::Result<(), String> {
    let program = case.program()?;
    let vjp = crate::autodiff::vjp(&program).map_err(|e| format!("vjp: {e}"))?;
    crate::verify(&vjp).map_err(|e| format!("vjp program does not verify: {e}"))?;
    let mut args = case
        .inputs
        .iter()
        .map(Tensor::to_array)
        .collect::<Result<Vec<_>>>()
        .map_err(|e| e.to_string())?;
    // A cotangent has its result's dtype (the file may spell a bf16 result's as float32).
    for (ct, aval) in case.cotangents.iter().zip(program.jaxpr.out_avals()) {
        let ct = ct.to_array().map_err(|e| e.to_string())?;
        args.push(Array::from_values(aval.dtype, ct.values()));
    }
    let grads = evaluate(&vjp, &args).map_err(|e| format!("evaluate the vjp: {e}"))?;
    let rtol = if case.jaxpr.contains("bf16") {
        1e-2
    } else {
        1e-4
    };
    for (k, (got, want)) in grads.iter().zip(&case.grads).enumerate() {
        let Some(want) = want else { continue };
        let mut flat = Vec::new();
        flatten(want, &mut flat);
        let expected = Tensor {
            dtype: "float32".into(),
            shape: got.shape(),
            data: flat,
        };
        compare(k, got, &expected, rtol).map_err(|e| format!("gradient of input {k}: {e}"))?;
    }
    Ok(())
}

fn flatten(value: &serde_json::Value, out: &mut Vec<f64>) {
    match value {
        serde_json::Value::Array(items) => items.iter().for_each(|v| flatten(v, out)),
        serde_json::Value::Number(n) => out.push(n.as_f64().unwrap_or(f64::NAN)),
        _ => out.push(f64::NAN),
    }
}

/// Runs every case of `path` with its gradients (forward values and VJP), with `evaluate`.
pub fn run_file_with_grads(
    path: &Path,
    evaluate: &Evaluate<'_>,
) -> std::result::Result<Report, String> {
    run_cases(path, |case| {
        run_case_with(case, evaluate).and_then(|()| check_grads(case, evaluate))
    })
}

/// Compares one output with JAX's.
pub fn compare(k: usize, got: &Array, want: &Tensor, rtol: f64) -> std::result::Result<(), String> {
    if got.shape() != want.shape {
        return Err(format!(
            "output {k}: shape {:?}, JAX {:?}",
            got.shape(),
            want.shape
        ));
    }
    for (i, (&a, &b)) in got.to_vec().iter().zip(&want.data).enumerate() {
        let ok = (a.is_nan() && b.is_nan())
            || (a - b).abs() <= rtol * a.abs().max(b.abs()) + rtol * 1e-3;
        if !ok {
            return Err(format!("output {k}[{i}]: {a} vs JAX {b} (rtol {rtol})"));
        }
    }
    Ok(())
}
