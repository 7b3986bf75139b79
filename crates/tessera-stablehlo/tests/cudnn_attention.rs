//! The cuDNN lowering of `dot_product_attention` against JAX's own: for each shape of
//! `tests/data/cudnn/jax_cudnn_lowering.json` (JAX 0.10.2's `implementation='cudnn'` lowering
//! for CUDA, grouped-query and plain heads, causal and not, bfloat16 and float16), the forward
//! and the gradient lowered with `AttentionLowering::Cudnn` hold the same custom calls as JAX's:
//! targets, `backend_config` (as JSON), operand and result layouts, operand and result types.
//! With a boolean mask, JAX passes cuDNN an additive bias (`__cudnn$fmhaScaleBiasSoftmax` and its
//! backward), and so does Tessera. Shapes cuDNN does not take (float32, a head dimension not a
//! multiple of 8, a mask over odd lengths) and the default lowering stay decomposed.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use serde_json::Value as Json;
use tessera_ir::autodiff::value_and_grad;
use tessera_ir::trace::{dot_product_attention, trace};
use tessera_ir::{ClosedJaxpr, DType, ShapedArray};
use tessera_stablehlo::{AttentionLowering, LowerOptions, lower_closed};

/// One custom call, as both texts give it.
#[derive(Debug, PartialEq)]
struct Call {
    target: String,
    config: Json,
    layouts: Vec<String>,
    types: String,
}

/// The text between `open` and its matching `close`, from `start` (at `open`).
fn balanced(text: &str, start: usize, open: char, close: char) -> &str {
    let mut depth = 0;
    for (i, c) in text[start..].char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return &text[start..=start + i];
            }
        }
    }
    &text[start..]
}

/// The cuDNN custom calls of `text` (JAX's pretty form or Tessera's generic one).
fn calls(text: &str) -> Vec<Call> {
    text.lines()
        .filter(|l| l.contains("stablehlo.custom_call") && l.contains("__cudnn$"))
        .map(|line| {
            let target = match line.find("call_target_name = \"") {
                Some(at) => line[at + 20..].split('"').next().unwrap().to_string(),
                None => line
                    .split('@')
                    .nth(1)
                    .unwrap()
                    .split('(')
                    .next()
                    .unwrap()
                    .to_string(),
            };
            let at = line.find("backend_config = \"").unwrap() + 18;
            let end = line[at..].find("\", ").unwrap() + at;
            let config = serde_json::from_str(&line[at..end].replace("\\22", "\"")).unwrap();
            let mut layouts = Vec::new();
            for key in ["operand_layouts = ", "result_layouts = "] {
                let at = line.find(key).unwrap() + key.len();
                layouts.push(balanced(line, at, '[', ']').replace(' ', ""));
            }
            let types = line[line.rfind(" : (").unwrap() + 3..].trim().to_string();
            Call {
                target,
                config,
                layouts,
                types,
            }
        })
        .collect()
}

fn dtype(name: &str) -> DType {
    match name {
        "bfloat16" => DType::BF16,
        "float16" => DType::F16,
        other => panic!("{other}"),
    }
}

/// `(q, k, v) -> attention` in the operation's `[batch, heads, seq, head_dim]` layout.
fn attention(case: &Json, dt: DType, causal: bool, scale: f64) -> ClosedJaxpr {
    let n = |k: &str| case[k].as_i64().unwrap();
    let (b, t, s, h, kv, d) = (
        n("batch"),
        n("q_len"),
        n("kv_len"),
        n("q_heads"),
        n("kv_heads"),
        n("head_dim"),
    );
    let q = ShapedArray::new(dt, &[b, h, t, d]);
    let k = ShapedArray::new(dt, &[b, kv, s, d]);
    let mut avals = vec![q, k.clone(), k];
    // A masked case's mask is one more operand (`bool[q_len, kv_len]`).
    if case["masked"].as_bool() == Some(true) {
        avals.push(ShapedArray::new(DType::Bool, &[t, s]));
    }
    trace(&avals, |a| {
        vec![dot_product_attention(
            &a[0],
            &a[1],
            &a[2],
            a.get(3),
            scale,
            causal,
        )]
    })
    .unwrap()
}

fn lowered(program: &ClosedJaxpr, attention: AttentionLowering) -> String {
    let options = LowerOptions {
        num_partitions: 1,
        attention,
        ..LowerOptions::default()
    };
    lower_closed(program, &options).unwrap().text
}

fn fixture() -> Json {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/cudnn/jax_cudnn_lowering.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn the_custom_calls_are_jaxs() {
    let fixture = fixture();
    let mut masked = 0;
    for case in fixture["cases"].as_array().unwrap() {
        let dt = dtype(case["dtype"].as_str().unwrap());
        let causal = case["causal"].as_bool().unwrap();
        let scale = case["scale"].as_f64().unwrap();
        let forward = attention(case, dt, causal, scale);
        let summed = {
            let avals = forward.jaxpr.in_avals();
            trace(&avals, |a| {
                let refs: Vec<_> = a.iter().collect();
                let out = tessera_ir::trace::call_closed(&forward, &refs).remove(0);
                vec![out.astype(DType::F32).sum(&[0, 1, 2, 3])]
            })
            .unwrap()
        };
        let gradient = value_and_grad(&summed, &[0, 1, 2]).unwrap();
        masked += usize::from(forward.jaxpr.invars.len() == 4);
        let jax: Vec<String> = case["gradient"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap().to_string())
            .collect();
        let want = calls(&jax.join("\n"));
        assert_eq!(want.len(), 2, "{case}");
        let got = calls(&lowered(&gradient, AttentionLowering::Cudnn));
        assert_eq!(got, want, "{}", case["dtype"]);
        // The forward alone: JAX's training forward (with the statistics).
        let got = calls(&lowered(&forward, AttentionLowering::Cudnn));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0], want[0]);
        // The default lowering has no custom call.
        assert!(calls(&lowered(&forward, AttentionLowering::Decomposed)).is_empty());
    }
    assert!(masked >= 2, "the fixture's masked cases were not run");
}

#[test]
fn shapes_cudnn_does_not_take_stay_decomposed() {
    let case: Json = serde_json::json!({
        "batch": 1, "q_len": 16, "kv_len": 16, "q_heads": 4, "kv_heads": 2, "head_dim": 64
    });
    let float32 = attention(&case, DType::F32, true, 0.125);
    assert!(lowered(&float32, AttentionLowering::Cudnn).contains("stablehlo.exponential"));
    assert!(calls(&lowered(&float32, AttentionLowering::Cudnn)).is_empty());
    let odd = serde_json::json!({
        "batch": 1, "q_len": 16, "kv_len": 16, "q_heads": 4, "kv_heads": 2, "head_dim": 12
    });
    let odd = attention(&odd, DType::BF16, true, 0.25);
    assert!(calls(&lowered(&odd, AttentionLowering::Cudnn)).is_empty());
    // A mask (a bias for cuDNN) over odd lengths.
    let odd_masked = serde_json::json!({
        "batch": 1, "q_len": 15, "kv_len": 15, "q_heads": 4, "kv_heads": 2, "head_dim": 64,
        "masked": true
    });
    let odd_masked = attention(&odd_masked, DType::BF16, true, 0.125);
    assert!(calls(&lowered(&odd_masked, AttentionLowering::Cudnn)).is_empty());
}

/// The gradient of a grouped-query attention (`[batch 4, heads 4 | 2 kv, 16, 64]`, bfloat16) at
/// `batch` rows: the cuDNN calls of a program whose blocks are these sizes.
fn gradient_at(batch: i64, heads: i64, kv_heads: i64) -> ClosedJaxpr {
    let case = serde_json::json!({
        "batch": batch, "q_len": 16, "kv_len": 16, "q_heads": heads, "kv_heads": kv_heads,
        "head_dim": 64
    });
    let forward = attention(&case, DType::BF16, true, 0.125);
    let avals = forward.jaxpr.in_avals();
    let summed = trace(&avals, |a| {
        let refs: Vec<_> = a.iter().collect();
        let out = tessera_ir::trace::call_closed(&forward, &refs).remove(0);
        vec![out.astype(DType::F32).sum(&[0, 1, 2, 3])]
    })
    .unwrap();
    value_and_grad(&summed, &[0, 1, 2]).unwrap()
}

fn lowered_over(
    program: &ClosedJaxpr,
    partitions: usize,
    partitioner: tessera_stablehlo::Partitioner,
    attention: AttentionLowering,
) -> String {
    let options = LowerOptions {
        num_partitions: partitions,
        partitioner,
        attention,
        ..LowerOptions::default()
    };
    lower_closed(program, &options).unwrap().text
}

/// In a module over 4 devices, an attention whose parameters lay it out over `data` (batch)
/// and `model` (heads) runs cuDNN on each device's block inside a manual region: the calls are
/// those of the block-sized program on one device. Without the layout it stays decomposed
/// (XLA cannot partition the calls), and the decomposed lowering ignores the layout.
#[test]
fn a_sharded_attention_runs_cudnn_per_shard() {
    use tessera_ir::passes::shard_attention;
    use tessera_ir::prim::AttentionShards;
    use tessera_stablehlo::Partitioner;
    let shards = AttentionShards {
        mesh: tessera_sharding::AbstractMesh::auto(&[("data", 2), ("model", 2)]).unwrap(),
        batch: vec!["data".into()],
        heads: vec!["model".into()],
    };
    let whole = gradient_at(4, 4, 2);
    let sharded = shard_attention(&whole, &shards);
    let block = calls(&lowered(&gradient_at(2, 2, 1), AttentionLowering::Cudnn));
    assert_eq!(block.len(), 2);
    for (partitioner, region) in [
        (Partitioner::Shardy, "sdy.manual_computation"),
        (Partitioner::Gspmd, "SPMDFullToShardShape"),
    ] {
        let text = lowered_over(&sharded, 4, partitioner, AttentionLowering::Cudnn);
        assert_eq!(calls(&text), block, "{partitioner}");
        assert!(text.contains(region), "{partitioner}: {text}");
        let plain = lowered_over(&whole, 4, partitioner, AttentionLowering::Cudnn);
        assert!(calls(&plain).is_empty(), "{partitioner}");
        assert_eq!(
            lowered_over(&sharded, 4, partitioner, AttentionLowering::Decomposed),
            lowered_over(&whole, 4, partitioner, AttentionLowering::Decomposed),
            "{partitioner}"
        );
    }
    // A layout over another number of devices than the module's is not used.
    let text = lowered_over(&sharded, 8, Partitioner::Shardy, AttentionLowering::Cudnn);
    assert!(calls(&text).is_empty());
}

/// Inside a user's `shard_map` over every device, the attention takes each device's blocks and
/// runs cuDNN on them: the forward's call is the block-sized program's.
#[test]
fn an_attention_in_a_shard_map_body_runs_cudnn_on_its_blocks() {
    use tessera_sharding::{AbstractMesh, PartitionSpec};
    let mesh = AbstractMesh::auto(&[("data", 2), ("model", 2)]).unwrap();
    let spec = PartitionSpec::from_axes(&[&["data"], &["model"], &[], &[]]);
    let q = ShapedArray::new(DType::BF16, &[4, 4, 16, 64]);
    let k = ShapedArray::new(DType::BF16, &[4, 2, 16, 64]);
    let program = trace(&[q, k.clone(), k], |a| {
        let refs: Vec<_> = a.iter().collect();
        tessera_ir::trace::shard_map(
            &mesh,
            &[spec.clone(), spec.clone(), spec.clone()],
            std::slice::from_ref(&spec),
            &refs,
            |b| {
                vec![dot_product_attention(
                    &b[0], &b[1], &b[2], None, 0.125, true,
                )]
            },
        )
    })
    .unwrap();
    let block = serde_json::json!({
        "batch": 2, "q_len": 16, "kv_len": 16, "q_heads": 2, "kv_heads": 1, "head_dim": 64
    });
    let want = calls(&lowered(
        &attention(&block, DType::BF16, true, 0.125),
        AttentionLowering::Cudnn,
    ));
    assert_eq!(want.len(), 1);
    for partitioner in [
        tessera_stablehlo::Partitioner::Shardy,
        tessera_stablehlo::Partitioner::Gspmd,
    ] {
        let got = calls(&lowered_over(
            &program,
            4,
            partitioner,
            AttentionLowering::Cudnn,
        ));
        assert_eq!(got, want, "{partitioner}");
    }
}

/// A mask becomes the bias JAX gives cuDNN: 0 where a query sees a key, else JAX's large
/// negative number for the dtype (`get_large_negative_number`: -2^41 in bfloat16, -2^15 in
/// float16), selected by the mask broadcast to `[1, 1, q_len, kv_len]`.
#[test]
fn a_mask_becomes_jaxs_bias() {
    let case = serde_json::json!({
        "batch": 1, "q_len": 16, "kv_len": 16, "q_heads": 4, "kv_heads": 2, "head_dim": 64,
        "masked": true
    });
    for (dt, hidden, name) in [
        (DType::BF16, "-2.199020e+12", "bf16"),
        (DType::F16, "-3.276800e+04", "f16"),
    ] {
        let text = lowered(&attention(&case, dt, true, 0.125), AttentionLowering::Cudnn);
        let bias = format!("tensor<1x1x16x16x{name}>");
        let select = text
            .lines()
            .find(|l| l.contains("stablehlo.select"))
            .unwrap();
        assert!(
            select.contains(&format!("(tensor<1x1x16x16xi1>, {bias}, {bias})")),
            "{select}"
        );
        // The select takes 0 where the mask is true, the large negative number elsewhere.
        let name_of = |value: &str| {
            let line = text
                .lines()
                .find(|l| l.contains(&format!("dense<{value}> : {bias}")))
                .unwrap();
            line.trim().split(' ').next().unwrap().to_string()
        };
        let (zero, negative) = (name_of("0.000000e+00"), name_of(hidden));
        assert!(
            select.contains(&format!(", {zero}, {negative})")),
            "{select}"
        );
    }
}
