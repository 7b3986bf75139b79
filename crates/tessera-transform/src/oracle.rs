//! The runner for JAX-made jaxpr test vectors (`jaxpr_cases.json`): parse, verify, check that
//! print → parse gives the same IR, evaluate, compare with JAX's outputs.
//!
//! Comparison: `|got - want| <= rtol * max(|got|, |want|) + atol` elementwise, with `rtol` 1e-4
//! (1e-2 when the program uses bf16) and an absolute tolerance scaled to the array's magnitude,
//! `atol = rtol * max(1e-3, max |want|)`, as JAX's own tests compare: an element that should be
//! zero (JAX's -8.1e-8 against Tessera's +8.1e-8) passes where the array's values are of order
//! one; NaNs must match NaNs.
//!
//! Gradients: a `null` gradient of a floating-point input means JAX refuses reverse mode for
//! the program (a `lax.while_loop`, `pmax` without `stop_gradient`); Tessera must refuse it too
//! (its `vjp` returns an error), and that counts as a pass.

use std::path::Path;

use serde::Deserialize;

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{IrError, Result};
use tessera_interp::interp::eval_closed;
use tessera_ir_core::text::{parse_closed_with_consts, print_closed};

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
/// cotangents, against JAX's `grads`. Where JAX recorded no gradient for a floating-point input
/// (it refuses reverse mode), Tessera's `vjp` must refuse too.
pub fn check_grads(case: &Case, evaluate: &Evaluate<'_>) -> std::result::Result<(), String> {
    let program = case.program()?;
    let refused_by_jax = refused_input(case);
    let vjp = match (crate::autodiff::vjp(&program), refused_by_jax) {
        (Ok(vjp), None) => vjp,
        (Err(e), None) => return Err(format!("vjp: {e}")),
        (Err(_), Some(_)) => return Ok(()),
        (Ok(_), Some(k)) => {
            return Err(format!(
                "JAX refuses reverse mode here (no gradient of float input {k}), but Tessera \
                 differentiated the program"
            ));
        }
    };
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
        // A gradient has its input's dtype (the file records only its values).
        let expected = Tensor {
            dtype: case
                .inputs
                .get(k)
                .map_or("float32".into(), |x| x.dtype.clone()),
            shape: got.shape(),
            data: flat,
        };
        compare(k, got, &expected, rtol).map_err(|e| format!("gradient of input {k}: {e}"))?;
    }
    Ok(())
}

/// The first floating-point input whose gradient JAX recorded as `null` in a program with a
/// floating-point output: JAX refused to differentiate it. (Integer inputs have no gradient
/// either way, and a program whose outputs are all integers has nothing to differentiate: JAX's
/// files record `null` there too.)
pub fn refused_input(case: &Case) -> Option<usize> {
    let is_float = |t: &Tensor| DType::parse(&t.dtype).is_some_and(DType::is_float);
    if !case.outputs.iter().any(is_float) {
        return None;
    }
    case.inputs
        .iter()
        .zip(&case.grads)
        .position(|(x, g)| g.is_none() && is_float(x))
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

/// Compares one output with JAX's: elementwise within `rtol` of the larger magnitude plus an
/// absolute tolerance of `rtol` times the array's largest finite magnitude (at least 1e-3).
pub fn compare(k: usize, got: &Array, want: &Tensor, rtol: f64) -> std::result::Result<(), String> {
    // The files spell a 16-bit float result as float32 (JSON holds its values as floats).
    let spelled_wide = want.dtype == "float32" && matches!(got.dtype(), DType::BF16 | DType::F16);
    if DType::parse(&want.dtype) != Some(got.dtype()) && !spelled_wide {
        return Err(format!(
            "output {k}: dtype {}, JAX {}",
            got.dtype(),
            want.dtype
        ));
    }
    if got.shape() != want.shape {
        return Err(format!(
            "output {k}: shape {:?}, JAX {:?}",
            got.shape(),
            want.shape
        ));
    }
    let atol = rtol * magnitude(&want.data).max(1e-3);
    for (i, (&a, &b)) in got.to_vec().iter().zip(&want.data).enumerate() {
        if !close(a, b, rtol, atol) {
            return Err(format!(
                "output {k}[{i}]: {a} vs JAX {b} (rtol {rtol}, atol {atol:e})"
            ));
        }
    }
    Ok(())
}

/// The largest finite magnitude among `values` (0 when there is none).
fn magnitude(values: &[f64]) -> f64 {
    values
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0, |m: f64, v| m.max(v.abs()))
}

/// `a` and `b` agree: both NaN, equal (infinities of one sign), or within the tolerances.
fn close(a: f64, b: f64, rtol: f64, atol: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= rtol * a.abs().max(b.abs()) + atol
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(data: &[f64]) -> Tensor {
        Tensor {
            dtype: "float32".into(),
            shape: vec![data.len() as i64],
            data: data.to_vec(),
        }
    }

    /// A result of another dtype than JAX's fails even when its values agree (an int32 result
    /// where JAX gives float32, say); a 16-bit float result matches the files' float32 spelling.
    #[test]
    fn the_dtype_is_compared_too() {
        let ints = Array::new(DType::I32, &[2], vec![1.0, 2.0]).unwrap();
        let err = compare(0, &ints, &tensor(&[1.0, 2.0]), 1e-4).unwrap_err();
        assert!(err.contains("dtype i32, JAX float32"), "{err}");
        let half = Array::new(DType::BF16, &[2], vec![1.0, 2.0]).unwrap();
        assert!(compare(0, &half, &tensor(&[1.0, 2.0]), 1e-2).is_ok());
    }

    fn array(data: &[f64]) -> Array {
        Array::new(DType::F32, &[data.len() as i64], data.to_vec())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_rounding_zero_passes_beside_values_of_order_one_but_a_real_difference_fails() {
        let want = tensor(&[-8.1e-8, 1.5, -2.0]);
        assert_eq!(
            compare(0, &array(&[8.1e-8, 1.5, -2.0]), &want, 1e-4),
            Ok(())
        );
        let off = compare(0, &array(&[1e-3, 1.5, -2.0]), &want, 1e-4);
        assert!(off.is_err_and(|e| e.contains("output 0[0]")));
        // Relative alone still decides where the array itself is tiny.
        let tiny = tensor(&[-8.1e-8, 1e-7]);
        assert!(compare(0, &array(&[8.1e-8, 1e-7]), &tiny, 1e-4).is_err());
        // Infinities of one sign and NaNs agree.
        let inf = tensor(&[f64::INFINITY, f64::NAN]);
        assert_eq!(
            compare(0, &array(&[f64::INFINITY, f64::NAN]), &inf, 1e-4),
            Ok(())
        );
    }

    const WHILE: &str = "{ lambda ; a:f32[]. let
    b:f32[] = while[
      body_jaxpr={ lambda ; c:f32[]. let d:f32[] = mul c 2.0:f32[] in (d,) }
      body_nconsts=0
      cond_jaxpr={ lambda ; e:f32[]. let f:bool[] = lt e 10.0:f32[] in (f,) }
      cond_nconsts=0
    ] a
  in (b,) }";

    const SIN: &str = "{ lambda ; a:f32[]. let b:f32[] = sin a in (b,) }";

    fn case(jaxpr: &str, grads: Vec<Option<serde_json::Value>>) -> Case {
        let scalar = |v: f64| Tensor {
            dtype: "float32".into(),
            shape: vec![],
            data: vec![v],
        };
        Case {
            name: "c".into(),
            jaxpr: jaxpr.into(),
            consts: vec![],
            inputs: vec![scalar(1.0)],
            outputs: vec![scalar(0.0)],
            cotangents: vec![scalar(1.0)],
            grads,
        }
    }

    fn interp(
        p: &crate::jaxpr::ClosedJaxpr,
        x: &[Array],
    ) -> std::result::Result<Vec<Array>, String> {
        eval_closed(p, x).map_err(|e| e.to_string())
    }

    #[test]
    fn a_null_float_gradient_passes_only_where_tessera_refuses_reverse_mode_too() {
        // JAX refuses `while_loop`'s reverse mode, and so does Tessera: a pass.
        assert_eq!(refused_input(&case(WHILE, vec![None])), Some(0));
        assert_eq!(check_grads(&case(WHILE, vec![None]), &interp), Ok(()));
        // A program Tessera differentiates, where JAX recorded no gradient: a failure.
        let differentiated = check_grads(&case(SIN, vec![None]), &interp);
        assert!(differentiated.is_err_and(|e| e.contains("JAX refuses reverse mode")));
        // With JAX's gradient, the comparison decides.
        let cos1 = serde_json::json!(1.0f64.cos());
        assert_eq!(check_grads(&case(SIN, vec![Some(cos1)]), &interp), Ok(()));
        let wrong = serde_json::json!(0.5);
        assert!(check_grads(&case(SIN, vec![Some(wrong)]), &interp).is_err());
        // A program with integer outputs only: nothing to differentiate, no refusal expected.
        let mut int_out = case(SIN, vec![None]);
        int_out.outputs = vec![Tensor {
            dtype: "int32".into(),
            shape: vec![],
            data: vec![0.0],
        }];
        assert_eq!(refused_input(&int_out), None);
    }
}
