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
    ),
    (
        "reduce windows",
        "{ lambda ; a:f32[4,5]. let b:f32[7,2] = reduce_window_sum[base_dilation=(2, 1) padding=((1, 0), (1, 1)) window_dilation=(1, 2) window_dimensions=(2, 3) window_strides=(1, 2)] a
    c:f32[2,3] = reduce_window_max[base_dilation=(1, 1) padding=((0, 1), (1, 1)) window_dilation=(1, 1) window_dimensions=(2, 2) window_strides=(2, 2)] a
    d:f32[6,4] = reduce_window_min[base_dilation=(2, 1) padding=((0, 0), (0, 0)) window_dilation=(1, 1) window_dimensions=(2, 2) window_strides=(1, 1)] a
    e:f32[3,2] = reduce_window[base_dilation=(1, 1) consts=() jaxpr={ lambda ; x:f32[] y:f32[]. let z:f32[] = mul x y in (z,) } padding=((0, 0), (1, 0)) window_dilation=(1, 1) window_dimensions=(2, 3) window_strides=(1, 2)] a 1.0:f32[]
    f:f32[] = reduce_sum[axes=(0, 1)] b
    g:f32[] = reduce_sum[axes=(0, 1)] c
    h:f32[] = reduce_sum[axes=(0, 1)] d
    i:f32[3,2] = mul e f
    j:f32[3,2] = mul i g
    k:f32[3,2] = mul j h
  in (k,) }",
    ),
    (
        "select_and_scatter_add",
        "{ lambda ; s:f32[2,3] a:f32[4,5]. let b:f32[4,5] = select_and_scatter_add[padding=((0, 1), (1, 1)) select_prim=ge window_dimensions=(2, 2) window_strides=(2, 2)] s a
    c:f32[4,5] = select_and_scatter_add[padding=((0, 0), (0, 0)) select_prim=le window_dimensions=(2, 3) window_strides=(2, 1)] s a
    d:f32[4,5] = add b c
  in (d,) }",
    ),
    (
        "convolutions",
        "{ lambda ; a:f32[2,7,6,3] b:f32[3,2,3,4] d:f32[2,4,5,5] e:f32[6,2,3,3] g:f32[4,3,5] h:f32[6,3,2]. let
    c:f32[2,2,11,4] = conv_general_dilated[batch_group_count=1 dimension_numbers=ConvDimensionNumbers(lhs_spec=(0, 3, 1, 2), rhs_spec=(3, 2, 0, 1), out_spec=(0, 3, 1, 2)) feature_group_count=1 lhs_dilation=(1, 2) padding=((1, 0), (0, 1)) precision=None preferred_element_type=None rhs_dilation=(2, 1) window_strides=(2, 1)] a b
    f:f32[2,6,5,3] = conv_general_dilated[batch_group_count=1 dimension_numbers=ConvDimensionNumbers(lhs_spec=(0, 1, 2, 3), rhs_spec=(0, 1, 2, 3), out_spec=(0, 1, 2, 3)) feature_group_count=2 lhs_dilation=(1, 1) padding=((1, 1), (0, 0)) precision=None preferred_element_type=None rhs_dilation=(1, 1) window_strides=(1, 1)] d e
    i:f32[2,6,4] = conv_general_dilated[batch_group_count=2 dimension_numbers=ConvDimensionNumbers(lhs_spec=(0, 1, 2), rhs_spec=(0, 1, 2), out_spec=(0, 1, 2)) feature_group_count=1 lhs_dilation=(1,) padding=((0, 0),) precision=None preferred_element_type=None rhs_dilation=(1,) window_strides=(1,)] g h
  in (c, f, i) }",
    ),
];

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
fn jaxs_cumulative_scatter_pooling_and_conv_cases_match_on_both_backends() {
    let names = [
        "cumulative_0",
        "cumulative_1",
        "scatter_set_0",
        "scatter_set_1",
        "take_modes_0",
        "take_modes_1",
        "max_pool_0",
        "max_pool_1",
        "conv2d_0",
        "conv2d_1",
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

/// The windowed tracing API: a generic `reduce_window` of `add` equals `reduce_window_sum`,
/// and `scatter` places updates where `scatter-add` adds them into zeros.
#[test]
fn the_tracing_api_records_windows_and_scatters() {
    use tessera_ir::prim::{GatherScatterMode, ScatterDims, ScatterParams, WindowParams};
    let window = WindowParams {
        dimensions: vec![2, 2],
        strides: vec![1, 2],
        padding: vec![(1, 0), (0, 1)],
        base_dilation: vec![1, 1],
        window_dilation: vec![1, 1],
    };
    let scatter = ScatterParams {
        dims: ScatterDims {
            update_window_dims: vec![1],
            inserted_window_dims: vec![0],
            scatter_dims_to_operand_dims: vec![0],
            operand_batching_dims: vec![],
            scatter_indices_batching_dims: vec![],
        },
        mode: GatherScatterMode::FillOrDrop,
        indices_are_sorted: false,
        unique_indices: true,
    };
    let f32 = |s: &[i64]| ShapedArray::new(DType::F32, s);
    let program = tessera_ir::trace::trace(
        &[
            f32(&[3, 4]),
            ShapedArray::new(DType::I32, &[2, 1]),
            f32(&[2, 4]),
        ],
        |a| {
            let x = &a[0];
            let zero = a[0].sum(&[0, 1]) * 0.0;
            let generic = x.reduce_window(&zero, |p, q| p + q, &window);
            let sum = x.reduce_window_sum(&window);
            let zeros = x * 0.0;
            let set = zeros.scatter(&a[1], &a[2], &scatter);
            let added = zeros.scatter_add(&a[1], &a[2], &scatter);
            vec![
                &generic - &sum,
                &set - &added,
                x.reduce_window_max(&window),
                x.reduce_window_min(&window),
                x.scatter_mul(&a[1], &a[2], &scatter),
                x.scatter_min(&a[1], &a[2], &scatter),
                x.scatter_max(&a[1], &a[2], &scatter),
            ]
        },
    )
    .unwrap();
    let text = tessera_ir::text::print_closed(&program, 0);
    for prim in [
        "reduce_window[",
        "reduce_window_sum",
        "reduce_window_max",
        "scatter-mul",
    ] {
        assert!(text.contains(prim), "{prim} missing from\n{text}");
    }
    let args: Vec<Array> = program
        .jaxpr
        .in_avals()
        .iter()
        .enumerate()
        .map(|(i, a)| values(a, 3 + i as u64))
        .collect();
    let args = vec![
        args[0].clone(),
        Array::new(DType::I32, &[2, 1], vec![2.0, 0.0]).unwrap(),
        args[2].clone(),
    ];
    let out = eval_closed(&program, &args).unwrap();
    for difference in &out[..2] {
        let v = difference.to_vec();
        assert!(v.iter().all(|v| v.abs() < 1e-6), "{v:?}");
    }
}

/// `Tensor::conv` (NCHW/OIHW) records JAX's `conv_general_dilated` and computes a convolution:
/// an all-ones 2x2 kernel over a 3x3 input of ones sums each window.
#[test]
fn the_tracing_api_records_convolutions() {
    let f32 = |s: &[i64]| ShapedArray::new(DType::F32, s);
    let program = tessera_ir::trace::trace(&[f32(&[1, 1, 3, 3]), f32(&[2, 1, 2, 2])], |a| {
        vec![a[0].conv(&a[1], &[1, 1], &[(0, 1), (0, 0)])]
    })
    .unwrap();
    let text = tessera_ir::text::print_closed(&program, 0);
    assert!(
        text.contains("conv_general_dilated[") && text.contains("f32[1,2,3,2]"),
        "{text}"
    );
    let ones = |s: &[i64]| {
        Array::new(DType::F32, s, vec![1.0; s.iter().product::<i64>() as usize]).unwrap()
    };
    let out = eval_closed(&program, &[ones(&[1, 1, 3, 3]), ones(&[2, 1, 2, 2])]).unwrap();
    assert_eq!(
        out[0].to_vec(),
        vec![4.0, 4.0, 4.0, 4.0, 2.0, 2.0, 4.0, 4.0, 4.0, 4.0, 2.0, 2.0]
    );
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    agree("Tensor::conv", &program, &client);
}

/// The bfloat16 VJP of the table: the VJP program of JAX's `bf16_sum` takes a `bf16[]`
/// cotangent. Given one as float32 (as the oracle file spells it), `run_on_device` names the
/// argument and both types instead of PJRT's "expected parameter 1 of size 2 but got buffer
/// with incompatible size 4"; given its result's dtype, PJRT agrees with the interpreter.
#[test]
fn the_bf16_vjp_takes_a_bf16_cotangent_and_names_a_mismatch() {
    let program = parse_closed(
        "{ lambda ; a:f32[1000]. let b:bf16[1000] = convert_element_type[new_dtype=bfloat16 weak_type=False] a
    c:f32[1000] = convert_element_type[new_dtype=float32 weak_type=False] b
    d:f32[] = reduce_sum[axes=(0,) out_sharding=None] c
    e:bf16[] = convert_element_type[new_dtype=bfloat16 weak_type=False] d
  in (e,) }",
    )
    .unwrap();
    let backward = vjp(&program).unwrap();
    let x = Array::new(DType::F32, &[1000], vec![1.0; 1000]).unwrap();
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let f32_ct = Array::new(DType::F32, &[], vec![0.5]).unwrap();
    let err = tessera::jit::run_on_device(&client, &backward, &[x.clone(), f32_ct], 0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("argument 1 is f32[] but the program takes bf16[]"),
        "{err}"
    );
    let bf16_ct = Array::new(DType::BF16, &[], vec![0.5]).unwrap();
    let args = [x, bf16_ct];
    let got = tessera::jit::run_on_device(&client, &backward, &args, 0).unwrap();
    let want = eval_closed(&backward, &args).unwrap();
    assert_eq!(got[0].to_vec(), want[0].to_vec());
    assert!(want[0].to_vec().iter().all(|&g| g == 0.5));
}

/// `scatter-mul` with duplicate indices and zero updates: its JVP equals central finite
/// differences (in float64) and its VJP is the JVP's transpose, on the interpreter and on PJRT.
#[test]
fn scatter_mul_derivatives_are_exact_with_duplicates_and_zeros() {
    let program = parse_closed(&format!(
        "{{ lambda ; a:f64[3,2] i:i32[5,1] u:f64[5,2]. let b:f64[3,2] = scatter-mul[{SCATTER_DIMS} mode=GatherScatterMode.FILL_OR_DROP] a i u in (b,) }}"
    ))
    .unwrap();
    let f64s = |s: &[i64], v: &[f64]| Array::new(DType::F64, s, v.to_vec()).unwrap();
    let x = f64s(&[3, 2], &[1.5, -2.0, 0.5, 3.0, 2.0, 1.0]);
    // Place 0 gets three updates (one zero in column 0), place 1 one, index 7 is dropped.
    let i = Array::new(DType::I32, &[5, 1], vec![0.0, 0.0, 1.0, 0.0, 7.0]).unwrap();
    let u = f64s(
        &[5, 2],
        &[0.0, 2.0, 1.5, -1.0, 3.0, 0.5, 2.5, 4.0, 9.0, 9.0],
    );
    let (tx, tu) = (
        f64s(&[3, 2], &[0.3, -0.1, 0.2, 0.5, -0.4, 0.7]),
        f64s(
            &[5, 2],
            &[0.9, -0.3, 0.4, 0.1, -0.6, 0.2, 0.8, -0.5, 0.3, 0.3],
        ),
    );
    let at = |s: f64| {
        let shift =
            |a: &Array, t: &Array| Array::from_values(DType::F64, &a.values() + &(&t.values() * s));
        eval_closed(&program, &[shift(&x, &tx), i.clone(), shift(&u, &tu)]).unwrap()[0].clone()
    };
    let eps = 1e-6;
    let fd: Vec<f64> = at(eps)
        .to_vec()
        .iter()
        .zip(at(-eps).to_vec())
        .map(|(p, m)| (p - m) / (2.0 * eps))
        .collect();
    let ti = Array::new(DType::I32, &[5, 1], vec![0.0; 5]).unwrap();
    let j = jvp(&program).unwrap();
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let args = [x.clone(), i.clone(), u.clone(), tx.clone(), ti, tu.clone()];
    for (backend, out) in [
        ("interpreter", eval_closed(&j, &args).unwrap()),
        (
            "pjrt",
            tessera::jit::run_on_device(&client, &j, &args, 0).unwrap(),
        ),
    ] {
        for (k, (d, want)) in out[1].to_vec().iter().zip(&fd).enumerate() {
            assert!(
                (d - want).abs() < 1e-6,
                "{backend}: tangent {k}: {d} vs {want}"
            );
        }
    }
    let ct = f64s(&[3, 2], &[1.0, -2.0, 0.5, 0.25, 3.0, -1.0]);
    let back = eval_closed(&vjp(&program).unwrap(), &[x, i, u, ct.clone()]).unwrap();
    let dot = |a: &Array, b: &Array| -> f64 {
        a.to_vec().iter().zip(b.to_vec()).map(|(p, q)| p * q).sum()
    };
    let lhs = dot(&back[0], &tx) + dot(&back[2], &tu);
    let rhs: f64 = ct.to_vec().iter().zip(&fd).map(|(c, d)| c * d).sum();
    assert!(
        (lhs - rhs).abs() < 1e-6,
        "<vjp(ct), t> = {lhs} but <ct, jvp(t)> = {rhs}"
    );
}
