//! Variables whose names are the grammar's words (`in`, `let`, `lambda`): JAX names variables
//! `a`..`z`, `ba`, ... with no exception, so the 222nd is `in` and the 7560th `let`. The parser
//! tells a keyword from a variable by where it stands; the printer names as JAX does. A real
//! JAX program of 1560 variables (`tests/data/gen_many_vars_case.py`) is parsed, printed,
//! parsed again and run against JAX's values and gradients.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::interp::eval_closed;
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::{Array, DType};

fn f32s(shape: &[i64], values: &[f64]) -> Array {
    Array::new(DType::F32, shape, values.to_vec()).unwrap()
}

fn case_file() -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/many_vars_case.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn tensor(t: &serde_json::Value) -> Array {
    let shape: Vec<i64> = t["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_i64().unwrap())
        .collect();
    let data: Vec<f64> = t["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(t["dtype"], "float32");
    f32s(&shape, &data)
}

fn flatten(value: &serde_json::Value, out: &mut Vec<f64>) {
    match value {
        serde_json::Value::Array(items) => items.iter().for_each(|v| flatten(v, out)),
        other => out.push(other.as_f64().unwrap()),
    }
}

fn assert_close(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 * a.abs().max(b.abs()) + 1e-7,
            "{what}[{i}]: {a} vs JAX {b}"
        );
    }
}

#[test]
fn a_jax_program_of_1560_variables_parses_prints_parses_and_runs() {
    let file = case_file();
    let case = &file["cases"][0];
    let text = case["jaxpr"].as_str().unwrap();
    // JAX's own text names variables `in`, `is`, `if`, ... (the 222nd is `in`).
    assert!(text.contains("\n    in:f32[4,8] = "), "{}", &text[..200]);
    assert!(text.lines().count() > 1500);
    let program = parse_closed(text).unwrap();
    assert!(
        program.jaxpr.vars.len() > 1500,
        "{}",
        program.jaxpr.vars.len()
    );
    let printed = print_closed(&program, 0);
    assert!(printed.contains(" in:f32[4,8] = "));
    let again = parse_closed(&printed).unwrap();
    assert_eq!(again, program);
    assert_eq!(print_closed(&again, 0), printed);

    let inputs: Vec<Array> = case["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(tensor)
        .collect();
    let outputs = eval_closed(&program, &inputs).unwrap();
    let want: Vec<Array> = case["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(tensor)
        .collect();
    assert_eq!(outputs.len(), want.len());
    for (k, (got, want)) in outputs.iter().zip(&want).enumerate() {
        assert_eq!(got.shape(), want.shape());
        assert_close(&format!("output {k}"), &got.to_vec(), &want.to_vec());
    }

    // Gradients of `sum_k sum(outputs_k * cotangents_k)`, as JAX computed them.
    let vjp = tessera_ir::vjp(&program).unwrap();
    let mut args = inputs;
    args.extend(case["cotangents"].as_array().unwrap().iter().map(tensor));
    let grads = eval_closed(&vjp, &args).unwrap();
    for (k, want) in case["grads"].as_array().unwrap().iter().enumerate() {
        let mut flat = Vec::new();
        flatten(want, &mut flat);
        assert_close(&format!("gradient {k}"), &grads[k].to_vec(), &flat);
    }
}

/// `in`, `let` and `lambda` as binders (arguments, results), as operands (first, last, alone on
/// a wrapped line, before the closing `in (`) and as results, in a multi-line jaxpr and in a
/// nested one printed on one line as JAX prints short jaxprs.
const KEYWORD_NAMES: &str = "{ lambda ; in:f32[2] let:f32[2] lambda:f32[2]. let
    is:f32[2] = add in let
    if:f32[2] = jit[
      name=f
      jaxpr={ lambda ; in:f32[2] let:f32[2]. let lambda:f32[2] = mul in let in (lambda,) }
    ] is lambda
    in_:f32[2] = add if
      in
    let_:f32[2] = sub in_ let
    j:f32[2] = mul let_ in in (j, in, let, lambda) }";

#[test]
fn variables_named_in_let_and_lambda_parse_wherever_a_variable_stands() {
    let program = parse_closed(KEYWORD_NAMES).unwrap();
    assert_eq!(program.jaxpr.eqns.len(), 5);
    let x = f32s(&[2], &[1.0, 2.0]);
    let y = f32s(&[2], &[3.0, 5.0]);
    let z = f32s(&[2], &[7.0, 11.0]);
    let out = eval_closed(&program, &[x.clone(), y.clone(), z.clone()]).unwrap();
    // is = x + y = [4, 7]; if = is * z = [28, 77]; in_ = if + x = [29, 79];
    // let_ = in_ - y = [26, 74]; j = let_ * x
    assert_eq!(out[0].to_vec(), vec![26.0, 148.0]);
    assert_eq!(out[1..], [x, y, z]);
    let printed = print_closed(&program, 0);
    assert_eq!(parse_closed(&printed).unwrap(), program);
}

/// A chain of `n` negations with variables named `v0`, `v1`, ...
fn neg_chain(n: usize) -> String {
    let mut text = String::from("{ lambda ; v0:f32[]. let\n");
    for k in 1..n {
        text.push_str(&format!("    v{k}:f32[] = neg v{}\n", k - 1));
    }
    text.push_str(&format!("  in (v{},) }}", n - 1));
    text
}

#[test]
fn printed_programs_past_the_variable_named_let_parse_back() {
    // JAX's 7560th name is `let` (11 * 26^2 + 4 * 26 + 19 = 7559, counting from 0).
    let program = parse_closed(&neg_chain(7600)).unwrap();
    let printed = print_closed(&program, 0);
    for binder in ["    in:f32[] = neg im\n", "    let:f32[] = neg les\n"] {
        assert!(printed.contains(binder), "{binder}");
    }
    assert_eq!(parse_closed(&printed).unwrap(), program);
    let out = eval_closed(&program, &[f32s(&[], &[2.0])]).unwrap();
    assert_eq!(out[0].to_vec(), vec![-2.0]); // 7599 negations
}

/// JAX names no variable after a sub-jaxpr printed before the program (`JaxprPpContext` skips
/// the shared jaxprs' names), so `let b = ...` leaves `b` to the sub-jaxpr. The text is JAX
/// 0.10.1's for `jax.make_jaxpr(lambda x: b(b(x)))` with `b = jax.jit(lambda x: x * 2)` named
/// `b`.
const SHARED_NAMED_B: &str =
    "let b = { lambda ; a:f32[3]. let c:f32[3] = mul a 2.0:f32[] in (c,) } in
{ lambda ; d:f32[3]. let
    e:f32[3] = jit[name=b jaxpr=b] d
    f:f32[3] = jit[name=b jaxpr=b] e
  in (f,) }";

#[test]
fn variable_names_skip_the_names_of_shared_jaxprs_as_jax_does() {
    let program = parse_closed(SHARED_NAMED_B).unwrap();
    let printed = print_closed(&program, 0);
    assert!(!printed.contains(" b:f32"), "{printed}");
    assert!(printed.contains("{ lambda ; a:f32[3]. let\n    c:f32[3] = mul a 2.0:f32[]"));
    assert!(printed.contains("{ lambda ; d:f32[3]. let\n    e:f32[3] = jit[name=b jaxpr=b] d"));
    assert_eq!(parse_closed(&printed).unwrap(), program);
}
