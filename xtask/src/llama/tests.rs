//! The Llama rows' command lines and their rendering from a run file.

use super::*;

#[test]
fn the_tessera_and_jax_command_lines_name_one_device_and_the_sizes() {
    let model = MODELS[1];
    let args = model.tessera_args(7).join(" ");
    assert!(args.starts_with("train --model llama --layers 4 --d-model 256 --heads 8"));
    for part in [
        "--seq-len 128 --batch 16",
        "--microbatches 1 --stages 1 --mpmd-dim 1 --devices 1",
        "--optimizer adamw --lr 0.001 --no-reference --eval-every 0 --json --steps 7",
    ] {
        assert!(args.contains(part), "{args}");
    }
    let jax = model.jax_args(7, Path::new("c.txt")).join(" ");
    assert_eq!(
        jax,
        "--layers 4 --d-model 256 --heads 8 --seq-len 128 --batch 16 --steps 7 --lr 0.001 \
         --data c.txt"
    );
    assert_eq!(model.tokens_per_step(), 2048.0);
}

/// A run file of the two models: JAX's step `jax` (jemalloc) and 1.2 × that (glibc) in every
/// round, Tessera's `tessera` by round.
pub(crate) fn fake_run(jax: f64, tessera: [f64; 3]) -> Value {
    let models: Vec<Value> = MODELS
        .iter()
        .map(|m| {
            let rounds: Vec<Value> = (1..=3)
                .map(|r| {
                    serde_json::json!({"round": r,
                        "order": crate::jax::order(r).map(Side::key),
                        "jax_glibc_s": jax * 1.2, "jax_jemalloc_s": jax,
                        "tessera_s": tessera[r - 1]})
                })
                .collect();
            serde_json::json!({"layers": m.layers, "d_model": m.d_model, "heads": m.heads,
                "seq_len": m.seq_len, "batch": m.batch, "parameters": 25_728_000,
                "check": {"tessera": [4.8625807, 4.0976877], "jax": [4.8625807, 4.0976863]},
                "rounds": rounds})
        })
        .collect();
    serde_json::json!({"benchmark": "cpu-llama",
        "meta": {"commit": "abc", "machine": "Test CPU", "date": "D"},
        "data": {"jax": "jax 0.10.1", "steps": 10, "lr": "0.001", "command": "tessera train",
                 "models": models}})
}

#[test]
fn rows_give_every_round_the_verdict_and_the_glibc_ratio() {
    let mut md = String::new();
    render_run(&mut md, &fake_run(0.100, [0.080, 0.090, 0.085])).unwrap();
    let line = md
        .lines()
        .find(|l| l.starts_with(&format!("| {} |", MODELS[0].label())))
        .unwrap_or_default();
    assert_eq!(
        line,
        "| Llama train step, 1 device: 2 layers, d_model 1024, 16 heads, seq_len 16, batch 2 \
         | 25,728,000 | 100 ms | 85.0 ms | 1.25×, 1.11×, 1.18× | 1.18× (1.11×–1.25×) | ≥ 1.0× \
         | met in every round | 120 ms | 1.41× (1.33×–1.50×) |"
    );
    assert!(md.contains("(JAX first, Tessera first, JAX first)"), "{md}");
    assert!(md.contains("| 4.8625807 | 4.8625807 |"), "{md}");

    let mut md = String::new();
    render_run(&mut md, &fake_run(0.100, [0.095, 0.105, 0.099])).unwrap();
    assert!(md.contains("tie (0.95×–1.05×)"), "{md}");
    assert!(md.contains("not settled: 2 of 3 rounds met"), "{md}");
}

#[test]
fn a_run_without_rounds_is_refused() {
    let mut run = fake_run(0.1, [0.1; 3]);
    run["data"]["models"][0]["rounds"] = serde_json::json!([]);
    assert!(render_run(&mut String::new(), &run).is_err());
}
