//! The CUDA plugin end to end, gated on the machine. With an NVIDIA driver and a CUDA plugin
//! (`cargo xtask setup --cuda`, or JAX's in the `python3` on PATH): `tessera devices` lists the
//! GPUs, JAX's jaxprs run on CUDA with their gradients, the collectives run where there are 8 GPUs,
//! and the GPT trains pipelined over the GPUs. Without a GPU, `tessera devices --plugin cuda`
//! must say that no GPU or driver was found, and the other tests record themselves skipped
//! (`tessera_tests::skip`: `cargo xtask test` counts them as skipped, not passed).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::{Command, Output};

use tessera_tests::{shared_dir, skip, tessera_bin, tessera_last_line};

fn tessera(args: &[&str]) -> Output {
    Command::new(tessera_bin())
        .args(args)
        .env("TF_CPP_MIN_LOG_LEVEL", "2")
        .output()
        .unwrap()
}

/// The number of GPUs the CUDA plugin sees, or `None` (and why) when this machine has none.
fn gpus() -> Result<usize, String> {
    if !tessera::pjrt::nvidia_driver_present() {
        return Err("no NVIDIA driver on this machine".into());
    }
    if let Err(err) = tessera::pjrt::resolve_plugin(Some("cuda")) {
        return Err(format!("no CUDA plugin: {err}"));
    }
    let out = tessera(&["devices", "--plugin", "cuda", "--json"]);
    assert!(
        out.status.success(),
        "a driver and a CUDA plugin are here, so `tessera devices --plugin cuda` must work: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["platform"], "cuda", "{report}");
    Ok(report["devices"].as_array().unwrap().len())
}

#[test]
fn devices_on_cuda_list_gpus_or_say_there_are_none() {
    match gpus() {
        Ok(n) => assert!(n >= 1, "the CUDA client reports no device"),
        Err(why) => {
            let out = tessera(&["devices", "--plugin", "cuda"]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success(),
                "{why}, yet `devices --plugin cuda` succeeded"
            );
            assert!(
                stderr.contains("no usable NVIDIA GPU"),
                "{why}; it said: {stderr}"
            );
        }
    }
}

/// Runs an oracle file of `../shared/oracle/` on the CUDA plugin with gradients; all must pass.
fn oracle_passes_on_cuda(kind: &str, file: &str) {
    let file = shared_dir().join("oracle").join(file);
    let file = file.to_string_lossy();
    let args = [
        "--plugin",
        "cuda",
        "oracle",
        kind,
        "--backend",
        "pjrt",
        "--grads",
        &file,
    ];
    let line = tessera_last_line(&args);
    assert!(line.ends_with(" passed, 0 failed"), "{kind}: {line}");
}

#[test]
fn jax_jaxprs_and_their_gradients_run_on_cuda() {
    match gpus() {
        Ok(_) => oracle_passes_on_cuda("jaxpr", "jaxpr_cases.json"),
        Err(why) => skip(&why),
    }
}

#[test]
fn collectives_run_on_eight_gpus() {
    match gpus() {
        Ok(n) if n >= 8 => oracle_passes_on_cuda("collectives", "collectives_cases.json"),
        Ok(n) => skip(&format!("the collectives cases need 8 GPUs, this has {n}")),
        Err(why) => skip(&why),
    }
}

/// What XLA's CPU backend lacks must run on a GPU, equal to the interpreter: every check of
/// `tessera check collectives` on as many GPUs as there are (`ragged_all_to_all` on one).
#[test]
fn ragged_all_to_all_runs_on_the_gpus() {
    match gpus() {
        Ok(_) => {
            let line = tessera_last_line(&[
                "--plugin",
                "cuda",
                "check",
                "collectives",
                "--require-all",
                "--only",
                "ragged",
            ]);
            assert!(
                !line.starts_with("0 passed")
                    && line.contains(" passed, 0 unsupported by the plugin, ")
                    && line.ends_with(" 0 failed"),
                "{line}"
            );
        }
        Err(why) => skip(&why),
    }
}

/// cuDNN's attention equals the decomposition on the GPU, values and gradients, on every shape
/// of `tessera check attention` (12: bf16 and f16, grouped-query, causal or not, masked).
#[test]
fn cudnn_attention_equals_the_decomposition_on_the_gpu() {
    match gpus() {
        Ok(_) => {
            let line =
                tessera_last_line(&["--plugin", "cuda", "check", "attention", "--require-all"]);
            assert_eq!(
                line,
                "12 passed, 0 unsupported by the plugin, 0 skipped, 0 failed"
            );
        }
        Err(why) => skip(&why),
    }
}

/// `psend`/`precv` need two GPUs: skipped (not passed) on one.
#[test]
fn send_receive_runs_on_two_gpus() {
    match gpus() {
        Ok(n) if n >= 2 => {
            let line =
                tessera_last_line(&["--plugin", "cuda", "check", "collectives", "--require-all"]);
            assert!(
                line.contains(" 0 unsupported by the plugin, 0 skipped ")
                    && line.ends_with(" 0 failed"),
                "{line}"
            );
        }
        Ok(n) => skip(&format!("psend/precv need 2 GPUs, this has {n}")),
        Err(why) => skip(&why),
    }
}

#[test]
fn the_gpt_trains_on_cuda() {
    let n = match gpus() {
        Ok(n) => n,
        Err(why) => return skip(&why),
    };
    let stages = if n >= 2 { "2" } else { "1" };
    let devices = n.to_string();
    let out = tessera(&[
        "--plugin",
        "cuda",
        "train",
        "--model",
        "gpt",
        "--schedule",
        "gpipe",
        "--stages",
        stages,
        "--microbatches",
        "4",
        "--devices",
        &devices,
        "--steps",
        "3",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert!(
        summary["final_loss"].as_f64().is_some_and(f64::is_finite),
        "{summary}"
    );
}
