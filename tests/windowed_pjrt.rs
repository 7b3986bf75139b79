//! Issue 20 C on PJRT: JAX's cases for the cumulative reductions, scatters, windowed reductions
//! and convolutions (values and gradients, interpreter and PJRT), and for each new primitive a
//! small program whose results, JVP and VJP programs agree between the interpreter and PJRT.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::interp::eval_closed;
use tessera_ir::text::parse_closed;
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray, jvp, vjp};
use tessera_tests::named_real_cases;

/// Deterministic values in `[-1.5, 1.5)` (integers in `0..4` for index arrays, with a few
/// out-of-range ones).
fn values(aval: &ShapedArray, seed: u64) -> Array {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let data = (0..aval.size())
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let u = (state >> 11) as f64 / (1u64 << 53) as f64;
            if aval.dtype.is_float() {
                3.0 * u - 1.5
            } else {
                (u * 6.0).floor() - 1.0
            }
        })
        .collect();
    Array::new(aval.dtype, &aval.shape, data).unwrap()
}

fn agree(what: &str, program: &ClosedJaxpr, client: &tessera_pjrt::Client) {
    let args: Vec<Array> = program
        .jaxpr
        .in_avals()
        .iter()
        .enumerate()
        .map(|(i, a)| values(a, 7 + i as u64))
        .collect();
    let want = eval_closed(program, &args).unwrap_or_else(|e| panic!("{what}: {e}"));
    let got = tessera::jit::run_on_device(client, program, &args, 0)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.shape(), w.shape(), "{what}: result {k}");
        for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
            assert!(
                (a - b).abs() <= 1e-4 * b.abs().max(1.0) || (a.is_nan() && b.is_nan()),
                "{what}: result {k}: PJRT {:?} vs interpreter {:?}",
                g.to_vec(),
                w.to_vec()
            );
        }
    }
}

const SCATTER_DIMS: &str = "dimension_numbers=ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), operand_batching_dims=(), scatter_indices_batching_dims=()) indices_are_sorted=False unique_indices=False update_consts=() update_jaxpr=None";

/// Each scatter in each mode, on indices with duplicates and out-of-range entries.
fn scatter_programs() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for prim in [
        "scatter",
        "scatter-mul",
        "scatter-min",
        "scatter-max",
        "scatter-add",
    ] {
        for mode in ["CLIP", "FILL_OR_DROP", "PROMISE_IN_BOUNDS"] {
            let text = format!(
                "{{ lambda ; a:f32[4,3] i:i32[6,1] u:f32[6,3]. let b:f32[4,3] = {prim}[{SCATTER_DIMS} mode=GatherScatterMode.{mode}] a i u\n c:f32[4,3] = sin b\n in (c,) }}"
            );
            out.push((format!("{prim} {mode}"), text));
        }
    }
    out
}

const PROGRAMS: &[(&str, &str)] = &[(
    "cumulative",
    "{ lambda ; a:f32[4,5]. let b:f32[4,5] = cumprod[axis=1 reverse=False] a
    c:f32[4,5] = cummax[axis=0 reverse=True] a
    d:f32[4,5] = cummin[axis=1 reverse=True] a
    e:f32[4,5] = cumlogsumexp[axis=0 reverse=False] a
    f:f32[4,5] = add b c
    g:f32[4,5] = add d e
    h:f32[4,5] = mul f g
  in (h,) }",
)];

#[test]
fn new_primitives_and_their_derivatives_agree_on_pjrt() {
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let owned: Vec<(String, String)> = PROGRAMS
        .iter()
        .map(|&(n, t)| (n.to_owned(), t.to_owned()))
        .chain(scatter_programs())
        .collect();
    for (name, text) in &owned {
        let program = parse_closed(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        agree(name, &program, &client);
        agree(&format!("{name} (jvp)"), &jvp(&program).unwrap(), &client);
        agree(&format!("{name} (vjp)"), &vjp(&program).unwrap(), &client);
    }
}

#[test]
fn jaxs_cumulative_and_scatter_cases_match_on_both_backends() {
    let names = [
        "cumulative_0",
        "cumulative_1",
        "scatter_set_0",
        "scatter_set_1",
        "take_modes_0",
        "take_modes_1",
    ];
    assert_eq!(named_real_cases(&names), 2 * names.len());
}

/// The tracing API records the primitives JAX prints.
#[test]
fn the_tracing_api_records_the_cumulative_primitives() {
    let aval = ShapedArray::new(DType::F32, &[2, 3]);
    let program = tessera_ir::trace::trace(&[aval], |a| {
        let x = &a[0];
        vec![
            &(&x.cumprod(1, false) + &x.cummax(0, true))
                + &(&x.cummin(1, true) + &x.cumlogsumexp(0, false).cumsum(1, false)),
        ]
    })
    .unwrap();
    let text = tessera_ir::text::print_closed(&program, 0);
    for prim in [
        "cumprod[axis=1 reverse=False]",
        "cummax[axis=0 reverse=True]",
        "cummin",
        "cumlogsumexp",
        "cumsum",
    ] {
        assert!(text.contains(prim), "{prim} missing from\n{text}");
    }
}
