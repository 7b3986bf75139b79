//! `dot_product_attention` on the CPU plugin: compiled (its decomposed lowering) and
//! interpreted, it equals the attention the model library computed before the operation
//! existed (scores divided by `sqrt(dh)`, softmax in float32 masked with -1e9, weights cast
//! back) with grouped-query heads, causally, with a sliding-window mask, in float32 and
//! bfloat16; its gradients (through `dot_product_attention_bwd`) equal that attention's; and
//! its programs print and parse back unchanged. `tessera train --attention` picks XLA's
//! decomposition on the CPU plugin and refuses cuDNN there.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::autodiff::value_and_grad;
use tessera_ir::interp::eval_closed;
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::{
    Tensor, dot_product_attention, dot_product_attention_with_stats, trace, where_,
};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_pjrt::Client;
use tessera_sharding::Mesh;

const B: i64 = 2;
const HEADS: i64 = 4;
const KV_HEADS: i64 = 2;
const T: i64 = 6;
const DH: i64 = 8;

/// Which keys each query sees: causal, and within `window` positions where given.
fn visible(anchor: &Tensor, window: Option<i64>) -> Tensor {
    let rows = anchor.iota_along(&[T, T], 0);
    let cols = anchor.iota_along(&[T, T], 1);
    let mut seen = rows.ge(&cols);
    if let Some(w) = window {
        let near = (&rows - &cols).lt(&rows.full_like_scalar(w as f64));
        seen = seen.binary(tessera_ir::Prim::And, &near);
    }
    seen
}

/// The model library's attention before the operation (`Attention::attend` as it was).
fn reference(q: &Tensor, k: &Tensor, v: &Tensor, seen: &Tensor) -> Tensor {
    let repeat = |x: &Tensor| {
        let g = HEADS / KV_HEADS;
        x.broadcast_in_dim(&[B, KV_HEADS, g, T, DH], &[0, 1, 3, 4])
            .reshape(&[B, HEADS, T, DH])
    };
    let (k, v) = (repeat(k), repeat(v));
    let scores = q.dot_general(&k, (&[3], &[3]), (&[0, 1], &[0, 1])) / (DH as f64).sqrt();
    let scores = scores.astype(DType::F32);
    let masked = where_(seen, &scores, &scores.full_like_scalar(-1e9));
    let weights = masked.softmax(3).astype(v.dtype());
    weights.dot_general(&v, (&[3], &[2]), (&[0, 1], &[0, 1]))
}

/// `(q, k, v) -> attention`, by the operation or by the reference, causal or windowed.
fn program(dtype: DType, operation: bool, window: Option<i64>) -> ClosedJaxpr {
    let q = ShapedArray::new(dtype, &[B, HEADS, T, DH]);
    let kv = ShapedArray::new(dtype, &[B, KV_HEADS, T, DH]);
    trace(&[q, kv.clone(), kv], |a| {
        let seen = visible(&a[0], window);
        let scale = 1.0 / (DH as f64).sqrt();
        vec![match (operation, window) {
            (false, _) => reference(&a[0], &a[1], &a[2], &seen),
            (true, None) => dot_product_attention(&a[0], &a[1], &a[2], None, scale, true),
            (true, Some(_)) => {
                dot_product_attention(&a[0], &a[1], &a[2], Some(&seen), scale, false)
            }
        }]
    })
    .unwrap()
}

/// `sum(attention * w)`'s value and gradients in `q`, `k` and `v`.
fn loss(dtype: DType, operation: bool, window: Option<i64>) -> ClosedJaxpr {
    let attention = program(dtype, operation, window);
    let mut avals = attention.jaxpr.in_avals();
    avals.push(ShapedArray::new(dtype, &[B, HEADS, T, DH]));
    let summed = trace(&avals, |a| {
        let out = tessera_ir::trace::call_closed(&attention, &[&a[0], &a[1], &a[2]]).remove(0);
        vec![(&out * &a[3]).astype(DType::F32).sum(&[0, 1, 2, 3])]
    })
    .unwrap();
    value_and_grad(&summed, &[0, 1, 2]).unwrap()
}

fn inputs(dtype: DType, with_weights: bool) -> Vec<Array> {
    let array = |dims: &[i64], seed: f64| {
        let n: i64 = dims.iter().product();
        let values = (0..n).map(|i| (i as f64 * 0.37 + seed).sin());
        Array::new(dtype, dims, values.collect()).unwrap()
    };
    let mut out = vec![
        array(&[B, HEADS, T, DH], 0.1),
        array(&[B, KV_HEADS, T, DH], 1.3),
        array(&[B, KV_HEADS, T, DH], 2.9),
    ];
    if with_weights {
        out.push(array(&[B, HEADS, T, DH], 4.1));
    }
    out
}

/// The program compiled for one CPU device, run on `args`.
fn on_device(client: &Client, program: &ClosedJaxpr, args: &[Array]) -> Vec<Vec<f64>> {
    tessera_tests::run_replicated(client, &Mesh::auto(&[("x", 1)]).unwrap(), program, args)
}

fn assert_close(got: &[Vec<f64>], want: &[Vec<f64>], tolerance: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        let scale = w.iter().fold(1.0_f64, |m, x| m.max(x.abs()));
        for (a, b) in g.iter().zip(w) {
            assert!((a - b).abs() <= tolerance * scale, "{what}: {a} vs {b}");
        }
    }
}

#[test]
fn the_operation_equals_the_attention_it_replaced() {
    let client = Client::cpu(1).unwrap();
    for (dtype, tolerance) in [(DType::F32, 1e-6), (DType::BF16, 2e-2)] {
        for window in [None, Some(3)] {
            let what = format!("{dtype} window {window:?}");
            let args = inputs(dtype, false);
            let want = on_device(&client, &program(dtype, false, window), &args);
            let op = program(dtype, true, window);
            assert_close(&on_device(&client, &op, &args), &want, tolerance, &what);
            let interpreted: Vec<Vec<f64>> = eval_closed(&op, &args)
                .unwrap()
                .iter()
                .map(Array::to_vec)
                .collect();
            assert_close(
                &interpreted,
                &want,
                tolerance.max(1e-5),
                &format!("{what}, interpreted"),
            );
        }
    }
}

/// The statistics result, compiled and interpreted, is each query's log-sum-exp of its scaled,
/// masked scores.
#[test]
fn the_statistics_are_the_scores_log_sum_exp() {
    let client = Client::cpu(1).unwrap();
    let q = ShapedArray::new(DType::F32, &[B, HEADS, T, DH]);
    let kv = ShapedArray::new(DType::F32, &[B, KV_HEADS, T, DH]);
    let scale = 1.0 / (DH as f64).sqrt();
    let both = trace(&[q, kv.clone(), kv], |a| {
        let params = tessera_ir::prim::AttentionParams {
            scale,
            is_causal: true,
            implementation: tessera_ir::prim::AttentionImpl::Xla,
        };
        let (_, lse) = dot_product_attention_with_stats(&a[0], &a[1], &a[2], None, params);
        // The same from the scores.
        let g = HEADS / KV_HEADS;
        let k = a[1]
            .broadcast_in_dim(&[B, KV_HEADS, g, T, DH], &[0, 1, 3, 4])
            .reshape(&[B, HEADS, T, DH]);
        let scores = a[0].dot_general(&k, (&[3], &[3]), (&[0, 1], &[0, 1])) * scale;
        let seen = visible(&a[0], None);
        let masked = where_(&seen, &scores, &scores.full_like_scalar(-1e9));
        vec![lse, masked.logsumexp(3).reshape(&[B, HEADS, T])]
    })
    .unwrap();
    let args = inputs(DType::F32, false);
    let got = on_device(&client, &both, &args);
    assert_close(&got[..1], &got[1..], 1e-6, "compiled");
    let interpreted: Vec<Vec<f64>> = eval_closed(&both, &args)
        .unwrap()
        .iter()
        .map(Array::to_vec)
        .collect();
    assert_close(&interpreted[..1], &got[1..], 1e-5, "interpreted");
}

#[test]
fn its_gradients_equal_those_of_the_attention_it_replaced() {
    let client = Client::cpu(1).unwrap();
    for window in [None, Some(2)] {
        let args = inputs(DType::F32, true);
        let want = on_device(&client, &loss(DType::F32, false, window), &args);
        let grads = loss(DType::F32, true, window);
        let text = print_closed(&grads, 0);
        assert!(text.contains("dot_product_attention_bwd"), "{text}");
        let got = on_device(&client, &grads, &args);
        assert_close(&got, &want, 1e-5, &format!("gradients, window {window:?}"));
    }
}

#[test]
fn its_programs_print_and_parse_back() {
    for window in [None, Some(3)] {
        let grads = loss(DType::F32, true, window);
        let printed = print_closed(&grads, 0);
        assert_eq!(parse_closed(&printed).unwrap(), grads, "{printed}");
    }
    let bad = "{ lambda ; q:f32[1,3,2,4] k:f32[1,2,2,4] v:f32[1,2,2,4]. let\n    o:f32[1,3,2,4] l:f32[1,3,2] = dot_product_attention[is_causal=True scale=0.5] q k v\n  in (o,) }";
    let err = parse_closed(bad).unwrap_err().to_string();
    assert!(err.contains("must divide"), "{err}");
}

#[test]
fn train_picks_the_decomposition_on_the_cpu_and_refuses_cudnn_there() {
    let small = [
        "--model",
        "llama",
        "--layers",
        "1",
        "--d-model",
        "32",
        "--heads",
        "2",
        "--seq-len",
        "8",
        "--batch",
        "4",
        "--stages",
        "1",
        "--devices",
        "1",
        "--microbatches",
        "1",
        "--steps",
        "1",
        "--eval-every",
        "0",
        "--json",
    ];
    let s = tessera_tests::train_summary(&tessera_tests::tessera_train(&small), "auto");
    assert_eq!(s["attention"], "xla", "{s}");
    let out = tessera_tests::tessera_train(&[&small[..], &["--attention", "cudnn"]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("CUDA plugin"),
        "{err}"
    );
}

/// A config file's grouped-query heads and vocabulary (what the 1B presets of `configs/` use)
/// train pipelined like the unpipelined step.
#[test]
fn a_grouped_query_config_trains_pipelined_like_unpipelined() {
    let dir = std::env::temp_dir().join(format!("tessera-gqa-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gqa.toml");
    std::fs::write(
        &path,
        "model = \"llama\"\nlayers = 2\nd_model = 32\nheads = 4\nkv_heads = 2\nffn = 64\n\
         vocab = 300\nseq_len = 8\n",
    )
    .unwrap();
    let s = tessera_tests::train_summary(
        &tessera_tests::tessera_train(&[
            "--config",
            path.to_str().unwrap(),
            "--stages",
            "2",
            "--batch",
            "4",
            "--microbatches",
            "2",
            "--steps",
            "2",
            "--eval-every",
            "0",
            "--json",
        ]),
        "gqa config",
    );
    let (losses, reference) = (
        tessera_tests::summary_numbers(&s, "losses"),
        tessera_tests::summary_numbers(&s, "reference_losses"),
    );
    assert_eq!(losses.len(), 2);
    for (a, b) in losses.iter().zip(&reference) {
        assert!((a - b).abs() <= 1e-4 * b.abs(), "{a} vs {b}");
    }
    // ln(300) at the start: the vocabulary is the config's.
    assert!((losses[0] - 300f64.ln()).abs() < 0.5, "{losses:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
