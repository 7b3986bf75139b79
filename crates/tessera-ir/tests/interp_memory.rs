//! The reference interpreter refuses, with a typed error, an equation whose results would not fit
//! its memory limit, instead of aborting the process when the allocation fails: JAX's
//! `jnp.sum(jnp.broadcast_to(x, (100000, 100000)))` holds a 40 GB intermediate.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::interp::{MemoryLimit, eval_closed, eval_closed_with_limit};
use tessera_ir::text::parse_closed;
use tessera_ir::{Array, DType, IrError};

/// `jax.make_jaxpr(lambda x: jnp.sum(jnp.broadcast_to(x, (n, n))))(jnp.float32(1.0))`, as
/// JAX 0.10.1 prints it.
fn broadcast_then_sum(n: u64) -> String {
    format!(
        "{{ lambda ; a:f32[]. let
    b:f32[{n},{n}] = broadcast_in_dim a
    c:f32[] = reduce_sum[axes=(0, 1) out_sharding=None] b
  in (c,) }}"
    )
}

fn one() -> Array {
    Array::new(DType::F32, &[], vec![1.0]).unwrap()
}

#[test]
fn a_40_gb_intermediate_is_a_typed_error_not_an_abort() {
    let program = parse_closed(&broadcast_then_sum(100_000)).unwrap();
    let err = eval_closed(&program, &[one()]).unwrap_err();
    let IrError::InterpMemory {
        index,
        eqn,
        results,
        needed,
        limit,
        ..
    } = &err
    else {
        panic!("expected InterpMemory, got {err:?}");
    };
    assert_eq!(*index, 0);
    assert!(eqn.contains("broadcast_in_dim"), "{eqn}");
    assert_eq!(*results, 40_000_000_000);
    assert!(needed >= results && needed > limit, "{err}");
    let message = err.to_string();
    for part in ["40000000000 bytes", "PJRT", "TESSERA_INTERP_MAX_BYTES"] {
        assert!(message.contains(part), "{message}");
    }
}

#[test]
fn the_limit_given_by_the_caller_decides() {
    let program = parse_closed(&broadcast_then_sum(1000)).unwrap();
    // 10^6 f32 results: 4 MB, and the rule's decoded views.
    let small = MemoryLimit::bytes(1 << 20);
    let err = eval_closed_with_limit(&program, &[one()], small).unwrap_err();
    assert!(
        matches!(&err, IrError::InterpMemory { results: 4_000_000, limit, .. } if *limit == 1 << 20),
        "{err:?}"
    );
    assert!(err.to_string().contains("given by the caller"), "{err}");
    let out = eval_closed_with_limit(&program, &[one()], MemoryLimit::bytes(1 << 30)).unwrap();
    assert_eq!(out[0].to_vec(), vec![1e6]);
    // The caller's limit lasts for that call only.
    assert_eq!(
        eval_closed(&program, &[one()]).unwrap()[0].to_vec(),
        vec![1e6]
    );
}

#[test]
fn the_limit_holds_inside_nested_jaxprs() {
    let text = "{ lambda ; a:f32[]. let
    b:f32[] = jit[
      name=big
      jaxpr={ lambda ; c:f32[]. let
          d:f32[1000,1000] = broadcast_in_dim c
          e:f32[] = reduce_sum[axes=(0, 1) out_sharding=None] d
        in (e,) }
    ] a
  in (b,) }";
    let program = parse_closed(text).unwrap();
    let err = eval_closed_with_limit(&program, &[one()], MemoryLimit::bytes(1 << 20)).unwrap_err();
    assert!(
        matches!(&err, IrError::InterpMemory { index: 0, eqn, .. } if eqn.contains("broadcast_in_dim")),
        "{err:?}"
    );
}

#[test]
fn the_limit_comes_from_the_variable_or_the_available_memory() {
    let meminfo =
        "MemTotal:       32000000 kB\nMemFree:         1000000 kB\nMemAvailable:   16000000 kB\n";
    // The variable wins; whole bytes or K/M/G/T (powers of 1024).
    let given = MemoryLimit::from_settings(Some("12345"), Some(meminfo)).unwrap();
    assert_eq!(given.max_bytes(), 12345);
    for (text, bytes) in [
        ("8K", 8 << 10),
        ("3M", 3 << 20),
        ("16G", 16 << 30),
        ("2t", 2 << 40),
    ] {
        let limit = MemoryLimit::from_settings(Some(text), None).unwrap();
        assert_eq!(limit.max_bytes(), bytes, "{text}");
    }
    // Else three quarters of the memory available now.
    let available = MemoryLimit::from_settings(None, Some(meminfo)).unwrap();
    assert_eq!(available.max_bytes(), 16_000_000 * 1024 / 4 * 3);
    assert!(
        available.to_string().contains("MemAvailable"),
        "{available}"
    );
    // Else a conservative 4 GiB.
    let fallback = MemoryLimit::from_settings(None, Some("no such line")).unwrap();
    assert_eq!(fallback.max_bytes(), 4 << 30);
    for bad in ["", "lots", "-1", "12Q", "1.5G", "99999999999T"] {
        let err = MemoryLimit::from_settings(Some(bad), Some(meminfo)).unwrap_err();
        assert!(
            matches!(&err, IrError::MemoryLimitSetting { value } if value == bad),
            "{bad}: {err:?}"
        );
        assert!(
            err.to_string().contains("TESSERA_INTERP_MAX_BYTES"),
            "{err}"
        );
    }
}

/// The process's limit is read from `TESSERA_INTERP_MAX_BYTES`: this test runs itself again as a
/// child process with the variable set (a test cannot set it in its own process safely).
#[test]
fn the_variable_sets_the_process_limit() {
    let program = parse_closed(&broadcast_then_sum(1000)).unwrap();
    if std::env::var_os("TESSERA_INTERP_MEMORY_CHILD").is_some() {
        let err = eval_closed(&program, &[one()]).unwrap_err();
        assert!(
            matches!(&err, IrError::InterpMemory { limit: 3072, .. }),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("set by TESSERA_INTERP_MAX_BYTES"),
            "{err}"
        );
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "the_variable_sets_the_process_limit",
            "--nocapture",
        ])
        .env("TESSERA_INTERP_MEMORY_CHILD", "1")
        .env("TESSERA_INTERP_MAX_BYTES", "3K")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `shard_map` body runs on every simulated device at once, so each equation needs its
/// results once per device.
#[test]
fn the_spmd_interpreter_counts_every_simulated_device() {
    use tessera_ir::ShapedArray;
    use tessera_ir::trace::{Tensor, shard_map_program};
    use tessera_sharding::{AbstractMesh, PartitionSpec};
    let mesh = AbstractMesh::auto(&[("x", 4)]).unwrap();
    let spec = PartitionSpec::parse("P('x')").unwrap();
    let avals = [ShapedArray::new(DType::F32, &[4])];
    let program = shard_map_program(
        &mesh,
        std::slice::from_ref(&spec),
        std::slice::from_ref(&spec),
        &avals,
        |a: &[Tensor]| {
            // Each device: f32[1] -> f32[1,1000,250] (1 MB) -> sum -> f32[1].
            vec![a[0].broadcast_in_dim(&[1, 1000, 250], &[0]).sum(&[1, 2])]
        },
    )
    .unwrap();
    let x = Array::new(DType::F32, &[4], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    // 7 MB a device fits 16 MB, but not four times over.
    let err = eval_closed_with_limit(
        &program,
        std::slice::from_ref(&x),
        MemoryLimit::bytes(16 << 20),
    )
    .unwrap_err();
    assert!(
        matches!(
            &err,
            IrError::InterpMemory {
                results: 4_000_000,
                needed: 28_000_000,
                ..
            }
        ),
        "{err:?}"
    );
    let out = eval_closed_with_limit(&program, &[x], MemoryLimit::bytes(64 << 20)).unwrap();
    assert_eq!(
        out[0].to_vec(),
        vec![250_000.0, 500_000.0, 750_000.0, 1_000_000.0]
    );
}
