//! `tessera train --model gpt --mesh stage=2,data=2,model=2`: a GPT pipelined over 2 MPMD
//! groups, each splitting its stage Megatron style over `model` and its rows over `data`
//! (and, with `--fsdp`, every parameter over `data` too), on 8 CPU devices. Over 10 steps its
//! losses equal the unpipelined `jit` run of the same sharded step within 1e-4 relative, and
//! the unsharded model's, under 1f1b and zero-bubble, with and without `--fsdp`; each device
//! holds the parameter bytes the library's specs give it, and bad meshes are refused.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::nn::{DecoderConfig, ParallelAxes};
use tessera_sharding::PartitionSpec;
use tessera_tests::{summary_numbers, tessera_train, train_summary};

/// The GPT of these runs: tiny, so that 10 steps take seconds.
const SIZES: [&str; 16] = [
    "--model",
    "gpt",
    "--stages",
    "2",
    "--layers",
    "2",
    "--d-model",
    "32",
    "--heads",
    "4",
    "--seq-len",
    "16",
    "--batch",
    "8",
    "--microbatches",
    "4",
];

fn run(extra: &[&str]) -> serde_json::Value {
    let mut args: Vec<&str> = SIZES.to_vec();
    args.extend(["--steps", "10", "--eval-every", "0", "--json"]);
    args.extend(extra);
    train_summary(&tessera_train(&args), &format!("{extra:?}"))
}

fn assert_close(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(b) {
        assert!(
            (x - y).abs() <= 1e-4 * y.abs(),
            "{what}: {a:?} against {b:?}"
        );
    }
}

/// What every device of the 8 holds together by the library's specs: each parameter's bytes
/// over its sharding factor, on each of its group's 4 devices.
fn bytes_on_all_devices(fsdp: bool) -> u64 {
    let config = DecoderConfig::gpt2(256, 2, 32, 4, 16);
    let mut axes = ParallelAxes::tensor("model", 2);
    if fsdp {
        axes = axes.with_fsdp("data", 2);
    }
    let specs = config.param_specs(&axes).unwrap();
    let factor = |s: &PartitionSpec| 2u64.pow(s.used_axes().count() as u32);
    config
        .avals()
        .leaves()
        .iter()
        .zip(specs.leaves())
        .map(|(a, s)| 4 * a.shape.iter().product::<i64>() as u64 * 4 / factor(s))
        .sum()
}

#[test]
fn a_tensor_parallel_gpt_trains_like_its_unpipelined_run_and_shards_its_parameters() {
    let unsharded = summary_numbers(&run(&["--schedule", "1f1b"]), "losses");
    for (schedule, fsdp) in [
        ("1f1b", false),
        ("zero-bubble", false),
        ("1f1b", true),
        ("zero-bubble", true),
    ] {
        let what = format!("{schedule}, fsdp {fsdp}");
        let mut extra = vec!["--schedule", schedule, "--mesh", "stage=2,data=2,model=2"];
        if fsdp {
            extra.push("--fsdp");
        }
        let s = run(&extra);
        let losses = summary_numbers(&s, "losses");
        assert_eq!(losses.len(), 10, "{what}");
        assert_close(&losses, &summary_numbers(&s, "reference_losses"), &what);
        assert_close(
            &losses,
            &unsharded,
            &format!("{what} against the unsharded GPT"),
        );
        assert!(
            losses[9] < losses[0] * 0.9,
            "{what}: the loss falls: {losses:?}"
        );
        assert_eq!(s["order_matches_schedule"], true, "{what}");
        // Every device holds what the specs give it, and together what the library says.
        let measured = summary_numbers(&s, "parameter_bytes_per_device");
        let expected = summary_numbers(&s, "parameter_bytes_per_device_expected");
        assert_eq!(measured, expected, "{what}");
        assert_eq!(measured.len(), 8, "{what}");
        let all: f64 = measured.iter().sum();
        assert_eq!(all as u64, bytes_on_all_devices(fsdp), "{what}");
        assert_eq!(s["parameter_bytes"], s["parameters"].as_u64().unwrap() * 4);
        // Each group's bytes over its fullest device's: TP halves all but the norms, the
        // position table and some biases; FSDP halves again.
        let floor = if fsdp { 3.5 } else { 1.9 };
        for factor in summary_numbers(&s, "parameter_sharding_factor") {
            assert!(factor > floor && factor <= 4.0, "{what}: factor {factor}");
        }
    }
}

#[test]
fn bad_meshes_are_refused_with_the_fix() {
    let refused = |extra: &[&str], says: &str| {
        let mut args: Vec<&str> = SIZES.to_vec();
        args.extend(["--steps", "1"]);
        args.extend(extra);
        let out = tessera_train(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} was accepted");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
    };
    refused(&["--mesh", "stage=2,data=2,tensor=2"], "axis 'tensor'");
    refused(&["--mesh", "data=4,model=2"], "no axis 'stage'");
    refused(
        &["--mesh", "stage=2,data=2,model=2", "--devices", "4"],
        "pass --devices 8",
    );
    refused(
        &["--mesh", "stage=2,model=8", "--devices", "16"],
        "the 4 heads",
    );
    // 8 rows in 4 micro-batches: 2 rows each, over 4 data devices.
    refused(&["--mesh", "stage=2,data=4,model=1"], "do not divide");
    refused(
        &["--mesh", "stage=2,model=4", "--fsdp"],
        "--fsdp shards parameters",
    );
    let mut mlp = vec!["--model", "mlp", "--stages", "2", "--steps", "1"];
    mlp.extend(["--mesh", "stage=2,data=2,model=2"]);
    let out = tessera_train(&mlp);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--model mlp has no sharded layout"));
}
