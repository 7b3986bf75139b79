//! Every case of `jaxpr_real_cases.json` (JAX programs written the way JAX users write them:
//! `jax.nn`, loops, `jax.random`, top-k, convolution, pooling, scatters, closures), through the
//! `tessera oracle jaxpr` runner a user would call, with gradients, on the interpreter and on
//! PJRT: every case passes on both. The same for `jaxpr_sharded_cases.json` (programs with
//! sharding constraints, each compiled for its mesh on 8 devices by the PJRT backend) and
//! `jaxpr_collectives_cases.json` (`shard_map` and `pmap` programs with the collectives of
//! `lax.parallel` over meshes of 8 devices; where JAX recorded no gradient, Tessera must refuse
//! reverse mode too).

use tessera_tests::{shared_dir, tessera_last_line};

#[test]
fn every_real_jax_case_passes_with_gradients_on_both_backends() {
    every_case_passes("jaxpr_real_cases.json", 42);
}

#[test]
fn every_sharded_jax_case_passes_with_gradients_on_both_backends() {
    every_case_passes("jaxpr_sharded_cases.json", 6);
}

#[test]
fn every_collectives_jax_case_passes_with_gradients_on_both_backends() {
    every_case_passes("jaxpr_collectives_cases.json", 34);
}

fn every_case_passes(name: &str, at_least: usize) {
    let path = shared_dir().join("oracle").join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let file: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let cases = file["cases"].as_array().map_or(0, Vec::len);
    assert!(cases >= at_least, "{} holds {cases} cases", path.display());
    let file = path.to_string_lossy();
    for backend in ["interp", "pjrt"] {
        let line = tessera_last_line(&["oracle", "jaxpr", "--backend", backend, "--grads", &file]);
        assert_eq!(line, format!("{cases} passed, 0 failed"), "{backend}");
    }
}
