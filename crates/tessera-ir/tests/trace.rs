//! Programs written with the tracing API: an MLP, a softmax cross-entropy and a causal attention
//! block print as jaxprs (snapshots) and evaluate to JAX's values for the same functions (the
//! `mlp_*`, `softmax_xent_*` and `causal_attention_*` oracle cases); misuse is an error.

#![allow(clippy::unwrap_used, missing_docs)]

use expect_test::{Expect, expect};
use tessera_ir::interp::eval_closed;
use tessera_ir::text::print_closed;
use tessera_ir::trace::{Tensor, jit, trace, where_};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};

#[derive(serde::Deserialize)]
struct T {
    dtype: String,
    shape: Vec<i64>,
    data: Vec<f64>,
}

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    inputs: Vec<T>,
    outputs: Vec<T>,
}

#[derive(serde::Deserialize)]
struct File {
    cases: Vec<Case>,
}

fn cases(prefix: &str) -> Vec<Case> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/oracle/jaxpr_cases.json");
    let file: File = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    file.cases
        .into_iter()
        .filter(|c| c.name.starts_with(prefix))
        .collect()
}

fn arr(t: &T) -> Array {
    Array::new(DType::parse(&t.dtype).unwrap(), &t.shape, t.data.clone()).unwrap()
}

fn f32s(shapes: &[&[i64]]) -> Vec<ShapedArray> {
    shapes
        .iter()
        .map(|s| ShapedArray::new(DType::F32, s))
        .collect()
}

/// Traces `f` for each JAX case of `prefix` (with its input types) and compares values.
fn check_against_jax(prefix: &str, f: fn(&[Tensor]) -> Vec<Tensor>) -> ClosedJaxpr {
    let all = cases(prefix);
    assert!(!all.is_empty());
    let mut first = None;
    for case in &all {
        let avals: Vec<ShapedArray> = case.inputs.iter().map(|t| arr(t).aval()).collect();
        let program = trace(&avals, f).unwrap();
        let inputs: Vec<Array> = case.inputs.iter().map(arr).collect();
        let got = eval_closed(&program, &inputs).unwrap();
        for (g, w) in got.iter().zip(&case.outputs) {
            assert_eq!(g.shape(), w.shape, "{}", case.name);
            for (a, b) in g.to_vec().iter().zip(&w.data) {
                assert!(
                    (a - b).abs() <= 1e-4 * a.abs().max(b.abs()) + 1e-7,
                    "{}: {a} vs JAX {b}",
                    case.name
                );
            }
        }
        first.get_or_insert(program);
    }
    first.unwrap()
}

fn check(program: &ClosedJaxpr, expected: Expect) {
    expected.assert_eq(&print_closed(program, 0));
}

fn mlp(a: &[Tensor]) -> Vec<Tensor> {
    let h = (a[0].matmul(&a[1]) + &a[2]).tanh().relu();
    vec![h.matmul(&a[3]).integer_pow(2).sum(&[1])]
}

fn softmax_xent(a: &[Tensor]) -> Vec<Tensor> {
    let (logits, labels) = (&a[0], &a[1]);
    vec![-((logits.log_softmax(1) * labels).sum(&[1]).mean(&[0]))]
}

fn causal_attention(a: &[Tensor]) -> Vec<Tensor> {
    let (q, k, v) = (&a[0], &a[1], &a[2]);
    let scores = q.dot_general(k, (&[2], &[2]), (&[0], &[0])) / (q.shape()[2] as f64).sqrt();
    let n = scores.shape()[1];
    let mask = jit("tril", &[&scores], |s| {
        let rows = s[0].iota_along(&[n, n], 0);
        let cols = s[0].iota_along(&[n, n], 1);
        vec![rows.ge(&cols)]
    });
    let masked = where_(&mask[0], &scores, &scores.full_like_scalar(-1e9));
    let weights = masked.softmax(2);
    vec![weights.dot_general(v, (&[2], &[1]), (&[0], &[0]))]
}

#[test]
fn mlp_matches_jax() {
    let program = check_against_jax("mlp_", mlp);
    check(
        &program,
        expect![[r#"
        { lambda ; a:f32[2,5] b:f32[5,4] c:f32[4] d:f32[4,5]. let
            e:f32[2,4] = dot_general[
              dimension_numbers=(([1], [0]), ([], []))
              preferred_element_type=float32
            ] a b
            f:f32[1,4] = broadcast_in_dim[broadcast_dimensions=(1,)] c
            g:f32[2,4] = add e f
            h:f32[2,4] = tanh g
            i:f32[2,4] = max h 0.0:f32[]
            j:f32[2,5] = dot_general[
              dimension_numbers=(([1], [0]), ([], []))
              preferred_element_type=float32
            ] i d
            k:f32[2,5] = integer_pow[y=2] j
            l:f32[2] = reduce_sum[axes=(1,) out_sharding=None] k
          in (l,) }"#]],
    );
}

#[test]
fn softmax_cross_entropy_matches_jax() {
    let program = check_against_jax("softmax_xent_", softmax_xent);
    check(
        &program,
        expect![[r#"
        { lambda ; a:f32[2,5] b:f32[2,5]. let
            c:f32[2] = reduce_max[axes=(1,)] a
            d:f32[2,1] = broadcast_in_dim[broadcast_dimensions=(0,)] c
            e:f32[2,1] = stop_gradient d
            f:f32[2,5] = sub a e
            g:f32[2,5] = exp f
            h:f32[2] = reduce_sum[axes=(1,) out_sharding=None] g
            i:f32[2,1] = broadcast_in_dim[broadcast_dimensions=(0,)] h
            j:f32[2,1] = log i
            k:f32[2,5] = sub f j
            l:f32[2,5] = mul k b
            m:f32[2] = reduce_sum[axes=(1,) out_sharding=None] l
            n:f32[] = reduce_sum[axes=(0,) out_sharding=None] m
            o:f32[] = div n 2.0:f32[]
            p:f32[] = neg o
          in (p,) }"#]],
    );
}

#[test]
fn causal_attention_matches_jax() {
    let program = check_against_jax("causal_attention_", causal_attention);
    check(
        &program,
        expect![[r#"
            { lambda ; a:f32[2,2,5] b:f32[2,2,5] c:f32[2,2,5]. let
                d:f32[2,2,2] = dot_general[
                  dimension_numbers=(([2], [2]), ([0], [0]))
                  preferred_element_type=float32
                ] a b
                e:f32[2,2,2] = div d 2.2360680103302:f32[]
                f:bool[2,2] = jit[
                  name=tril
                  jaxpr={ lambda ; g:f32[2,2,2]. let
                      h:i32[2,2] = iota[dimension=0 dtype=int32 shape=(2, 2) sharding=None] 
                      i:i32[2,2] = iota[dimension=1 dtype=int32 shape=(2, 2) sharding=None] 
                      j:bool[2,2] = ge h i
                    in (j,) }
                ] e
                k:bool[2,2,2] = broadcast_in_dim[broadcast_dimensions=(1, 2)] f
                l:f32[2,2,2] = broadcast_in_dim -1000000000.0:f32[]
                m:f32[2,2,2] = select_n k l e
                n:f32[2,2] = reduce_max[axes=(2,)] m
                o:f32[2,2,1] = broadcast_in_dim[broadcast_dimensions=(0, 1)] n
                p:f32[2,2,1] = stop_gradient o
                q:f32[2,2,2] = sub m p
                r:f32[2,2,2] = exp q
                s:f32[2,2] = reduce_sum[axes=(2,) out_sharding=None] r
                t:f32[2,2,1] = broadcast_in_dim[broadcast_dimensions=(0, 1)] s
                u:f32[2,2,1] = div 1.0:f32[] t
                v:f32[2,2,2] = mul r u
                w:f32[2,2,5] = dot_general[
                  dimension_numbers=(([2], [1]), ([0], [0]))
                  preferred_element_type=float32
                ] v c
              in (w,) }"#]],
    );
}

#[test]
fn shape_errors_name_the_operation_and_the_shapes() {
    let err = trace(&f32s(&[&[2, 3], &[4, 3]]), |a| vec![&a[0] + &a[1]]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "add: shapes [2, 3] and [4, 3] do not broadcast"
    );
    let err = trace(&f32s(&[&[2, 3]]), |a| vec![a[0].sum(&[2])]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "reduce_sum: axis 2 is out of range for shape [2, 3]"
    );
    let err = trace(&f32s(&[&[2, 3], &[2, 3]]), |a| vec![a[0].matmul(&a[1])]).unwrap_err();
    assert!(err.to_string().contains("dot_general"), "{err}");
}

#[test]
fn rust_numbers_are_weakly_typed_and_promotion_follows_jax() {
    let program = trace(
        &[
            ShapedArray::new(DType::I32, &[3]),
            ShapedArray::new(DType::F32, &[3]),
        ],
        |a| vec![(&a[0] * 2.0) + &a[1]],
    )
    .unwrap();
    check(
        &program,
        expect![[r#"
        { lambda ; a:i32[3] b:f32[3]. let
            c:f32[3] = convert_element_type[new_dtype=float32 weak_type=False] a
            d:f32[3] = mul c 2.0:f32[]
            e:f32[3] = add d b
          in (e,) }"#]],
    );
}

/// Operators take owned and borrowed tensors on either side, and Rust integers as weak scalars:
/// `int + 1` stays int32, `float * 2` stays float32 (as JAX's weak types).
#[test]
fn operators_read_like_the_math() {
    let avals = [
        ShapedArray::new(DType::F32, &[2]),
        ShapedArray::new(DType::F32, &[2]),
        ShapedArray::new(DType::I32, &[2]),
    ];
    let program = trace(&avals, |a| {
        let (x, y, i) = (&a[0], &a[1], &a[2]);
        vec![x - y * 2 + 1.5, 3 * (x + y), i + 1, 2 - i]
    })
    .unwrap();
    check(
        &program,
        expect![[r#"
            { lambda ; a:f32[2] b:f32[2] c:i32[2]. let
                d:f32[2] = mul b 2.0:f32[]
                e:f32[2] = sub a d
                f:f32[2] = add e 1.5:f32[]
                g:f32[2] = add a b
                h:f32[2] = mul 3.0:f32[] g
                i:i32[2] = add c 1:i32[]
                j:i32[2] = sub 2:i32[] c
              in (f, h, i, j) }"#]],
    );
    let args = [
        Array::new(DType::F32, &[2], vec![1.0, 2.0]).unwrap(),
        Array::new(DType::F32, &[2], vec![0.5, 0.25]).unwrap(),
        Array::new(DType::I32, &[2], vec![7.0, -3.0]).unwrap(),
    ];
    let out = eval_closed(&program, &args).unwrap();
    assert_eq!(out[0].to_vec(), vec![1.5, 3.0]);
    assert_eq!(out[1].to_vec(), vec![4.5, 6.75]);
    assert_eq!(out[2].to_vec(), vec![8.0, -2.0]);
    assert_eq!(out[3].to_vec(), vec![-5.0, 5.0]);
}
