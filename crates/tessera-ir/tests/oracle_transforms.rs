//! `jvp` and `vmap` on every JAX-made oracle program: the JVP agrees with JAX's gradients
//! through `<ct, jvp(t)> = <jax_grad(ct), t>`, and `vmap` over a batch of scaled inputs equals a
//! loop over the batch.

#![cfg(feature = "oracle")]
#![allow(clippy::unwrap_used, missing_docs)]

mod prims;

use prims::{Rng, assert_close, axpy, dot, index_axis, stack};
use tessera_ir::interp::eval_closed;
use tessera_ir::oracle::Case;
use tessera_ir::text::parse_closed;
use tessera_ir::{Array, jvp, verify, vmap};

#[derive(serde::Deserialize)]
struct File {
    cases: Vec<Case>,
}

fn cases() -> Vec<Case> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/oracle/jaxpr_cases.json");
    let file: File = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    file.cases
}

fn flatten(v: &serde_json::Value, out: &mut Vec<f64>) {
    match v {
        serde_json::Value::Array(items) => items.iter().for_each(|i| flatten(i, out)),
        other => out.push(other.as_f64().unwrap_or(f64::NAN)),
    }
}

#[test]
fn jvp_agrees_with_jax_gradients_on_oracle_programs() {
    let mut rng = Rng(99);
    let mut checked = 0;
    for case in cases() {
        if case.cotangents.is_empty() || case.grads.iter().all(Option::is_none) {
            continue;
        }
        let program = parse_closed(&case.jaxpr).unwrap();
        let j = jvp(&program).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        verify(&j).unwrap();
        let x: Vec<Array> = case.inputs.iter().map(|t| t.to_array().unwrap()).collect();
        let t: Vec<Array> = x.iter().map(|a| rng.direction(&a.aval())).collect();
        let args: Vec<Array> = x.iter().chain(&t).cloned().collect();
        let outs = eval_closed(&j, &args).unwrap();
        let n_out = program.jaxpr.outvars.len();
        let dys = &outs[n_out..];
        let rhs: f64 = case
            .cotangents
            .iter()
            .zip(dys)
            .map(|(c, d)| dot(&c.to_array().unwrap(), d))
            .sum();
        let mut lhs = 0.0;
        for (g, ti) in case.grads.iter().zip(&t) {
            if let Some(g) = g {
                let mut flat = Vec::new();
                flatten(g, &mut flat);
                lhs += flat
                    .iter()
                    .zip(ti.to_vec())
                    .map(|(a, b)| a * b)
                    .sum::<f64>();
            }
        }
        let scale = 1.0 + lhs.abs().max(rhs.abs());
        // Tangents through half-precision values are rounded like the values.
        let rtol = if case.jaxpr.contains("f16[") {
            3e-2
        } else {
            2e-3
        };
        assert!(
            (lhs - rhs).abs() <= rtol * scale,
            "{}: <jax grad, t> = {lhs} but <ct, jvp(t)> = {rhs}",
            case.name
        );
        checked += 1;
    }
    assert!(checked > 5, "only {checked} oracle cases have gradients");
}

#[test]
fn vmap_of_oracle_programs_matches_a_loop() {
    const B: usize = 3;
    for case in cases() {
        let program = parse_closed(&case.jaxpr).unwrap();
        let n = program.jaxpr.invars.len();
        if n == 0 {
            continue;
        }
        let x: Vec<Array> = case.inputs.iter().map(|t| t.to_array().unwrap()).collect();
        // Batch element b scales the float inputs by (1 + b/10); integer inputs are shared.
        let in_axes: Vec<Option<usize>> = x
            .iter()
            .map(|a| a.dtype().is_float().then_some(0))
            .collect();
        if in_axes.iter().all(Option::is_none) {
            continue;
        }
        let element =
            |b: usize| -> Vec<Array> { x.iter().map(|a| axpy(a, b as f64 / 10.0, a)).collect() };
        let batched: Vec<Array> = (0..n)
            .map(|i| match in_axes[i] {
                Some(_) => {
                    let parts: Vec<Array> = (0..B).map(|b| element(b)[i].clone()).collect();
                    stack(&parts, 0, &x[i].aval())
                }
                None => x[i].clone(),
            })
            .collect();
        let out_axes: Vec<usize> = program.jaxpr.out_avals().iter().map(|a| a.rank()).collect();
        let g = vmap(&program, &in_axes, &out_axes, B as i64)
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        verify(&g).unwrap();
        let got = eval_closed(&g, &batched).unwrap();
        let loops: Vec<Vec<Array>> = (0..B)
            .map(|b| {
                let args: Vec<Array> = (0..n)
                    .map(|i| match in_axes[i] {
                        Some(_) => index_axis(&batched[i], 0, b),
                        None => x[i].clone(),
                    })
                    .collect();
                eval_closed(&program, &args).unwrap()
            })
            .collect();
        for (k, aval) in program.jaxpr.out_avals().iter().enumerate() {
            let parts: Vec<Array> = loops.iter().map(|o| o[k].clone()).collect();
            let want = stack(&parts, out_axes[k], aval);
            let tol = if aval.dtype.is_float() { 1e-5 } else { 0.0 };
            assert_close(&format!("{} result {k}", case.name), &got[k], &want, tol);
        }
    }
}
