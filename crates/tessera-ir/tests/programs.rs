//! The MLP, softmax cross-entropy and causal attention of the JAX oracle, written with the Rust
//! tracing API: printed jaxprs (snapshots), the verifier after every pass, and values equal to
//! JAX's on the oracle inputs.

use expect_test::{Expect, expect};
use tessera_ir::interp::{Array, eval_closed};
use tessera_ir::passes::{
    eliminate_common_subexpressions, eliminate_dead_code, fold_constants, inline_calls,
};
use tessera_ir::trace::{Tensor, full, iota, jit, jnp, trace, where_};
use tessera_ir::verify::verify_closed;
use tessera_ir::{ClosedJaxpr, DType, ShapedArray};

fn f32s(shape: &[usize]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

fn mlp(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor) -> Tensor {
    let h = (x.matmul(&w1) + b1).tanh().max_scalar(0.0);
    h.matmul(&w2).integer_pow(2).sum(&[1], false)
}

fn softmax_xent(logits: Tensor, labels: Tensor) -> Tensor {
    let per_example = (jnp::log_softmax(&logits, 1) * labels).sum(&[1], false);
    -jnp::mean(&per_example, &[0], false)
}

fn causal_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor {
    let (t, d) = (q.shape()[1], q.shape()[2]);
    let scores = q.dot_general(&k, (&[2], &[2]), (&[0], &[0])) / (d as f64).sqrt();
    let ones = full(&[t, t], true, DType::Bool);
    let mask = jit("tril", &[&ones], |m: Tensor| {
        let rows = iota(DType::I32, &[t, t], 0) + 0;
        let cols = iota(DType::I32, &[t, t], 1);
        where_(&rows.ge(&cols), &m, &full(&[t, t], false, DType::Bool))
    });
    let masked = jit("_where", &[&mask[0], &scores], |m: Tensor, s: Tensor| {
        let neg = full(s.shape(), -1e9, DType::F32);
        where_(&m, &s, &neg)
    });
    jnp::softmax(&masked[0], 2).dot_general(&v, (&[2], &[1]), (&[0], &[0]))
}

/// Verifies `cj`, runs every pass with the verifier after each, and snapshots the printed jaxpr.
fn check(cj: &ClosedJaxpr, expect: Expect) {
    verify_closed(cj).expect("the traced jaxpr verifies");
    let mut j = cj.jaxpr.clone();
    for pass in [
        inline_calls,
        fold_constants,
        eliminate_common_subexpressions,
        eliminate_dead_code,
    ] {
        j = pass(&j);
        verify_closed(&ClosedJaxpr::new(j.clone())).expect("the pass keeps the jaxpr valid");
    }
    expect.assert_eq(&cj.to_string());
}

fn oracle_cases(prefix: &str) -> Vec<(Vec<Array>, Vec<Vec<f64>>)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/oracle/jaxpr_cases.json");
    let text = std::fs::read_to_string(path).expect("the oracle file is readable");
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let tensor = |t: &serde_json::Value| {
        let shape: Vec<usize> = t["shape"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_u64())
            .map(|x| x as usize)
            .collect();
        let data: Vec<f64> = t["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_f64())
            .collect();
        let dtype = DType::from_name(t["dtype"].as_str().unwrap_or("")).expect("known dtype");
        Array::from_f64(dtype, &shape, &data).expect("data fills the shape")
    };
    json["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
        .map(|c| {
            let ins = c["inputs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(tensor)
                .collect();
            let outs = c["outputs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| tensor(t).to_f64_vec())
                .collect();
            (ins, outs)
        })
        .collect()
}

fn assert_close(got: &[Array], want: &[Vec<f64>]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        let g = g.to_f64_vec();
        assert_eq!(g.len(), w.len());
        for (a, b) in g.iter().zip(w) {
            assert!(
                (a - b).abs() <= 1e-4 * a.abs().max(b.abs()) + 1e-5,
                "{a} vs {b}"
            );
        }
    }
}

/// Traces `f` on each oracle case of `prefix` and compares the values with JAX's.
fn matches_jax<M>(prefix: &str, f: impl tessera_ir::trace::TraceFn<M> + Copy) {
    let cases = oracle_cases(prefix);
    assert_eq!(cases.len(), 3);
    for (ins, outs) in cases {
        let avals: Vec<ShapedArray> = ins.iter().map(Array::aval).collect();
        let cj = trace(&avals, f).expect("traces");
        let got = eval_closed(&cj, &ins).expect("evaluates");
        assert_close(&got, &outs);
        let inlined = ClosedJaxpr::new(eliminate_dead_code(&inline_calls(&cj.jaxpr)));
        assert_close(&eval_closed(&inlined, &ins).expect("evaluates"), &outs);
    }
}

#[test]
fn mlp_prints_and_matches_jax() {
    let cj = trace(
        &[f32s(&[2, 5]), f32s(&[5, 4]), f32s(&[4]), f32s(&[4, 5])],
        mlp,
    )
    .expect("traces");
    check(
        &cj,
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
    matches_jax("mlp_", mlp);
}

#[test]
fn softmax_xent_prints_and_matches_jax() {
    let cj = trace(&[f32s(&[2, 5]), f32s(&[2, 5])], softmax_xent).expect("traces");
    check(
        &cj,
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
    matches_jax("softmax_xent_", softmax_xent);
}

#[test]
fn causal_attention_prints_and_matches_jax() {
    let cj = trace(
        &[f32s(&[2, 2, 5]), f32s(&[2, 2, 5]), f32s(&[2, 2, 5])],
        causal_attention,
    )
    .expect("traces");
    check(
        &cj,
        expect![[r#"
        { lambda ; a:f32[2,2,5] b:f32[2,2,5] c:f32[2,2,5]. let
            d:f32[2,2,2] = dot_general[
              dimension_numbers=(([2], [2]), ([0], [0]))
              preferred_element_type=float32
            ] a b
            e:f32[2,2,2] = div d 2.2360680103302:f32[]
            f:bool[2,2] = broadcast_in_dim True:bool[]
            g:bool[2,2] = jit[
              name=tril
              jaxpr={ lambda ; f:bool[2,2]. let
                  h:i32[2,2] = iota[dimension=0 dtype=int32 shape=(2, 2) sharding=None] 
                  i:i32[2,2] = add h 0:i32[]
                  j:i32[2,2] = iota[dimension=1 dtype=int32 shape=(2, 2) sharding=None] 
                  k:bool[2,2] = ge i j
                  l:bool[2,2] = broadcast_in_dim False:bool[]
                  g:bool[2,2] = select_n k l f
                in (g,) }
            ] f
            m:f32[2,2,2] = jit[
              name=_where
              jaxpr={ lambda ; g:bool[2,2] e:f32[2,2,2]. let
                  n:f32[2,2,2] = broadcast_in_dim -1000000000.0:f32[]
                  o:bool[2,2,2] = broadcast_in_dim[broadcast_dimensions=(1, 2)] g
                  m:f32[2,2,2] = select_n o n e
                in (m,) }
            ] g e
            p:f32[2,2] = reduce_max[axes=(2,)] m
            q:f32[2,2,1] = broadcast_in_dim[broadcast_dimensions=(0, 1)] p
            r:f32[2,2,2] = sub m q
            s:f32[2,2,2] = exp r
            t:f32[2,2] = reduce_sum[axes=(2,) out_sharding=None] s
            u:f32[2,2,1] = broadcast_in_dim[broadcast_dimensions=(0, 1)] t
            v:f32[2,2,2] = div s u
            w:f32[2,2,5] = dot_general[
              dimension_numbers=(([2], [1]), ([0], [0]))
              preferred_element_type=float32
            ] v c
          in (w,) }"#]],
    );
    matches_jax("causal_attention_", causal_attention);
}
