//! `dot_product_attention` laid out per shard (`AttentionShards`: batch over `data`, heads over
//! `model`): the layout changes no value (the interpreter and the decomposed lowering read past
//! it), the per-shard program the cuDNN lowering wraps its calls in (`shard_map` of the
//! operation over the blocks) equals the operation, forward and backward, interpreted and
//! compiled for 4 CPU devices; the layout prints and parses back, and a layout whose axes do
//! not divide the batch or heads, or are not in the mesh, is refused with what to change.
//! (The cuDNN calls inside the region are checked in tessera-stablehlo's `cudnn_attention`.)

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::autodiff::value_and_grad;
use tessera_ir::interp::{PrimEval, eval_closed};
use tessera_ir::passes::shard_attention;
use tessera_ir::prim::{AttentionOp, AttentionShards, attention_per_shard_program};
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::{dot_product_attention, trace};
use tessera_ir::{Array, ClosedJaxpr, DType, Prim, ShapedArray, verify};
use tessera_pjrt::Client;
use tessera_sharding::{AbstractMesh, Mesh};

const B: i64 = 4;
const HEADS: i64 = 4;
const KV_HEADS: i64 = 2;
const T: i64 = 6;
const DH: i64 = 8;

fn shards(batch: &[&str], heads: &[&str]) -> AttentionShards {
    AttentionShards {
        mesh: AbstractMesh::auto(&[("data", 2), ("model", 2)]).unwrap(),
        batch: batch.iter().map(|a| a.to_string()).collect(),
        heads: heads.iter().map(|a| a.to_string()).collect(),
    }
}

/// The gradient of `sum(attention(q, k, v) * w)`, causal, grouped-query heads.
fn gradient(batch: i64) -> ClosedJaxpr {
    let q = ShapedArray::new(DType::F32, &[batch, HEADS, T, DH]);
    let kv = ShapedArray::new(DType::F32, &[batch, KV_HEADS, T, DH]);
    let summed = trace(&[q.clone(), kv.clone(), kv, q], |a| {
        let out = dot_product_attention(&a[0], &a[1], &a[2], None, 0.35, true);
        vec![(&out * &a[3]).sum(&[0, 1, 2, 3])]
    })
    .unwrap();
    value_and_grad(&summed, &[0, 1, 2]).unwrap()
}

fn values(avals: &[ShapedArray]) -> Vec<Array> {
    avals
        .iter()
        .enumerate()
        .map(|(k, a)| {
            let n: i64 = a.shape.iter().product();
            let v = (0..n).map(|i| (i as f64 * 0.37 + k as f64 * 1.7).sin());
            Array::new(a.dtype, &a.shape, v.collect()).unwrap()
        })
        .collect()
}

/// `program` compiled for the 4 devices of `client`, its arguments and results replicated.
fn on_four_devices(client: &Client, program: &ClosedJaxpr, args: &[Array]) -> Vec<Vec<f64>> {
    let mesh = Mesh::auto(&[("data", 2), ("model", 2)]).unwrap();
    tessera_tests::run_replicated(client, &mesh, program, args)
}

fn assert_close(got: &[Vec<f64>], want: &[Vec<f64>], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.len(), w.len(), "{what}");
        for (a, b) in g.iter().zip(w) {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "{what}: {a} vs {b}"
            );
        }
    }
}

fn interpreted(program: &ClosedJaxpr, args: &[Array]) -> Vec<Vec<f64>> {
    let out = eval_closed(program, args).unwrap();
    out.iter().map(Array::to_vec).collect()
}

#[test]
fn the_layout_changes_no_value() {
    let whole = gradient(B);
    let sharded = shard_attention(&whole, &shards(&["data"], &["model"]));
    let text = print_closed(&sharded, 0);
    // The forward and its backward both carry the layout.
    assert_eq!(text.matches("shard_heads=(model,)").count(), 2, "{text}");
    let args = values(&whole.jaxpr.in_avals());
    assert_eq!(interpreted(&sharded, &args), interpreted(&whole, &args));
    let client = Client::cpu(4).unwrap();
    assert_close(
        &on_four_devices(&client, &sharded, &args),
        &interpreted(&whole, &args),
        "compiled",
    );
}

/// Each attention equation of the sharded gradient, as the per-shard program the cuDNN lowering
/// wraps: interpreted and compiled over 4 devices, it equals the equation itself.
#[test]
fn the_per_shard_program_equals_the_operation() {
    let client = Client::cpu(4).unwrap();
    for (batch, heads) in [
        (&["data"][..], &["model"][..]),
        (&["data", "model"][..], &[][..]),
    ] {
        let sharded = shard_attention(&gradient(B), &shards(batch, heads));
        let eqns: Vec<_> = sharded
            .jaxpr
            .eqns
            .iter()
            .filter(|e| {
                matches!(
                    e.prim,
                    Prim::DotProductAttention | Prim::DotProductAttentionBwd
                )
            })
            .collect();
        assert_eq!(eqns.len(), 2);
        for eqn in eqns {
            let op = AttentionOp::of(eqn.prim);
            let avals: Vec<ShapedArray> = eqn
                .inputs
                .iter()
                .map(|a| sharded.jaxpr.atom_aval(a).clone())
                .collect();
            let per_shard = attention_per_shard_program(op, &eqn.params, &avals)
                .unwrap()
                .unwrap();
            let text = print_closed(&per_shard, 0);
            assert!(text.contains("shard_map"), "{text}");
            // The backward's operands include the forward's results: take them from a run.
            let args = match op {
                AttentionOp::Forward => values(&avals),
                AttentionOp::Backward => {
                    let mut args = values(&avals[..3]);
                    let plain = AttentionShards::strip(&eqn.params);
                    let types = [avals[3].clone(), avals[4].clone()];
                    let forward = Prim::DotProductAttention.eval(&plain, &args, &types);
                    args.extend(forward.unwrap());
                    args.extend(values(&avals[5..]));
                    args
                }
            };
            let types: Vec<ShapedArray> = eqn
                .outputs
                .iter()
                .map(|v| sharded.jaxpr.aval(*v).clone())
                .collect();
            let want: Vec<Vec<f64>> = eqn
                .prim
                .eval(&eqn.params, &args, &types)
                .unwrap()
                .iter()
                .map(Array::to_vec)
                .collect();
            let what = format!("{op:?} over {batch:?} / {heads:?}");
            assert_close(&interpreted(&per_shard, &args), &want, &what);
            assert_close(&on_four_devices(&client, &per_shard, &args), &want, &what);
        }
    }
}

#[test]
fn the_layout_prints_and_parses_back() {
    let sharded = shard_attention(&gradient(B), &shards(&["data"], &["model"]));
    let printed = print_closed(&sharded, 0);
    assert_eq!(parse_closed(&printed).unwrap(), sharded, "{printed}");
}

#[test]
fn a_layout_that_does_not_fit_is_refused() {
    // 3 rows over the 2 devices of `data`.
    let odd = shard_attention(&gradient(3), &shards(&["data"], &["model"]));
    let err = verify(&odd).unwrap_err().to_string();
    assert!(
        err.contains("3 rows") && err.contains("shard_batch"),
        "{err}"
    );
    // 2 key/value heads over the 4 devices of both axes.
    let wide = shard_attention(&gradient(B), &shards(&[], &["data", "model"]));
    let err = verify(&wide).unwrap_err().to_string();
    assert!(
        err.contains("2 heads") && err.contains("shard_heads"),
        "{err}"
    );
    let mut unknown = shards(&["data"], &["model"]);
    unknown.heads = vec!["tensor".into()];
    let err = verify(&shard_attention(&gradient(B), &unknown))
        .unwrap_err()
        .to_string();
    assert!(err.contains("'tensor'") && err.contains("lacks"), "{err}");
    let mut twice = shards(&["data"], &["model"]);
    twice.heads = vec!["data".into()];
    let err = verify(&shard_attention(&gradient(B), &twice))
        .unwrap_err()
        .to_string();
    assert!(err.contains("twice"), "{err}");
}
