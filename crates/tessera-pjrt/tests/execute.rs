//! Compiles and runs StableHLO on the PJRT CPU plugin's devices: one device, SPMD over eight with
//! a cross-device reduction, executable serialisation, and compile errors.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_pjrt::{Buffer, Client, CompileOptions, ElementType, HostArray, PjrtError};

fn client() -> Client {
    Client::cpu(8).expect("the PJRT CPU plugin (run `cargo xtask setup`)")
}

const ADD: &str = r#"
module @add attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%a: tensor<2x2xf32>, %b: tensor<2x2xf32>) -> tensor<2x2xf32> {
    %0 = stablehlo.add %a, %b : tensor<2x2xf32>
    return %0 : tensor<2x2xf32>
  }
}
"#;

/// Sums an 8-element vector sharded one element per device; the result is replicated, so XLA's
/// SPMD partitioner inserts an all-reduce across the eight devices.
const SHARDED_SUM: &str = r#"
module @sharded_sum attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%x: tensor<8xf32> {mhlo.sharding = "{devices=[8]<=[8]}"}) -> (tensor<f32> {mhlo.sharding = "{replicated}"}) {
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<8xf32>, tensor<f32>) -> tensor<f32>
    return %0 : tensor<f32>
  }
}
"#;

#[test]
fn adds_on_one_device() {
    let client = client();
    let exe = client
        .compile(ADD.as_bytes(), &CompileOptions::spmd(&[3]))
        .unwrap();
    assert_eq!(exe.device_ids(), [3]);
    let a = Buffer::from_host_to(
        &client,
        &HostArray::from_slice(&[2, 2], &[1f32, 2., 3., 4.]).unwrap(),
        3,
    )
    .unwrap();
    let b = Buffer::from_host_to(
        &client,
        &HostArray::from_slice(&[2, 2], &[10f32, 20., 30., 40.]).unwrap(),
        3,
    )
    .unwrap();
    let out = exe.execute(&[vec![&a, &b]]).unwrap();
    let host = out[0][0].to_host().unwrap();
    assert_eq!(host.dims(), [2, 2]);
    assert_eq!(host.to_typed::<f32>().unwrap(), [11., 22., 33., 44.]);
    assert_eq!(out[0][0].device_id().unwrap(), 3);
}

#[test]
fn spmd_reduction_communicates_across_eight_devices() {
    let client = client();
    let devices: Vec<i64> = (0..8).rev().collect();
    let exe = client
        .compile(SHARDED_SUM.as_bytes(), &CompileOptions::spmd(&devices))
        .unwrap();
    assert_eq!(exe.device_ids(), [7, 6, 5, 4, 3, 2, 1, 0]);
    let shards: Vec<Buffer> = exe
        .device_ids()
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            Buffer::from_host_to(
                &client,
                &HostArray::from_slice(&[1], &[(i + 1) as f32]).unwrap(),
                d,
            )
            .unwrap()
        })
        .collect();
    let args: Vec<Vec<&Buffer>> = shards.iter().map(|b| vec![b]).collect();
    let out = exe.execute(&args).unwrap();
    assert_eq!(out.len(), 8);
    for (per_device, &device) in out.iter().zip(exe.device_ids()) {
        assert_eq!(per_device[0].device_id().unwrap(), device);
        assert_eq!(
            per_device[0].to_host().unwrap().to_typed::<f32>().unwrap(),
            [36.0]
        );
    }
}

#[test]
fn executables_survive_serialisation() {
    let client = client();
    let exe = client
        .compile(ADD.as_bytes(), &CompileOptions::spmd(&[0]))
        .unwrap();
    let bytes = exe.serialize().unwrap();
    assert!(!bytes.is_empty());
    let again = client.deserialize_executable(&bytes).unwrap();
    let x = Buffer::from_host_to(
        &client,
        &HostArray::from_slice(&[2, 2], &[1f32; 4]).unwrap(),
        0,
    )
    .unwrap();
    let out = again.execute(&[vec![&x, &x]]).unwrap();
    assert_eq!(
        out[0][0].to_host().unwrap().to_typed::<f32>().unwrap(),
        [2.0; 4]
    );
}

const SINE: &str = r#"
module @sine attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.sine %a : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"#;

/// A deserialized executable serialized again (what a program loaded from the persistent cache
/// gives `serialize`) loads and runs on both CPU plugins: zml-cpu writes such an executable
/// without its compiled kernels ("Function wrapped_sine not found" when run), so `serialize`
/// gives back the bytes it was loaded from.
#[test]
fn a_deserialized_executable_serializes_to_bytes_that_run() {
    for name in ["zml-cpu", "xla-cpu-pjrt"] {
        let client = Client::open(Some(name), 1).unwrap();
        let exe = client
            .compile(SINE.as_bytes(), &CompileOptions::spmd(&[0]))
            .unwrap();
        let loaded = client
            .deserialize_executable(&exe.serialize().unwrap())
            .unwrap();
        let again = client
            .deserialize_executable(&loaded.serialize().unwrap())
            .unwrap();
        let x = Buffer::from_host_to(
            &client,
            &HostArray::from_slice(&[4], &[0f32, 0.5, 1.0, 2.0]).unwrap(),
            0,
        )
        .unwrap();
        let out = again
            .execute(&[vec![&x]])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = out[0][0].to_host().unwrap().to_typed::<f32>().unwrap();
        for (g, x) in got.iter().zip([0f32, 0.5, 1.0, 2.0]) {
            assert!((g - x.sin()).abs() < 1e-6, "{name}: {got:?}");
        }
    }
}

#[test]
fn a_bf16_array_crosses_as_its_own_two_bytes_per_element() {
    let client = client();
    let values = [1.0, -2.5, 0.099_609_375, 3.0e38];
    let host = HostArray::new(tessera_ir::DType::BF16, &[2, 2], values.to_vec()).unwrap();
    assert_eq!(host.bytes().len(), 8);
    let buffer = Buffer::from_host_to(&client, &host, 0).unwrap();
    assert_eq!(buffer.element_type().unwrap(), ElementType::BF16);
    let back = buffer.to_host().unwrap();
    assert_eq!(back.bytes(), host.bytes());
    assert_eq!(back.to_vec(), host.to_vec());
}

#[test]
fn keys_cross_to_a_device_as_their_words_and_back() {
    let words: Vec<u32> = vec![0, 42, 7, 9];
    let keys = HostArray::from_slice(&[2, 2], &words)
        .unwrap()
        .keys_from_words()
        .unwrap();
    assert_eq!(keys.dims(), [2]);
    let buffer = Buffer::from_host_to(&client(), &keys, 1).unwrap();
    assert_eq!(buffer.element_type().unwrap(), ElementType::U32);
    assert_eq!(buffer.dims().unwrap(), [2, 2]);
    let back = buffer.to_host().unwrap();
    assert_eq!(back.to_typed::<u32>().unwrap(), words);
    assert_eq!(back.keys_from_words().unwrap(), keys);
}

#[test]
fn every_element_type_round_trips_through_a_device() {
    let client = client();
    for ty in ElementType::ALL {
        let bytes: Vec<u8> = (0..6 * ty.size_in_bytes()).map(|i| (i % 2) as u8).collect();
        let host = HostArray::from_bytes(ty.dtype(), &[2, 3], bytes).unwrap();
        let buffer = Buffer::from_host_to(&client, &host, 1).unwrap();
        assert_eq!(buffer.element_type().unwrap(), ty);
        let back = buffer.to_host().unwrap();
        assert_eq!(
            (back.dtype(), back.dims(), back.bytes()),
            (host.dtype(), host.dims(), host.bytes()),
            "{ty:?}"
        );
    }
}

#[test]
fn a_bad_program_is_a_typed_error_with_the_plugins_message() {
    let client = client();
    let err = client
        .compile(b"module { this is not mlir }", &CompileOptions::spmd(&[0]))
        .unwrap_err();
    match &err {
        PjrtError::Call {
            function, message, ..
        } => {
            assert_eq!(*function, "PJRT_Client_Compile");
            assert!(!message.is_empty());
        }
        other => panic!("expected a PJRT call error, got {other:?}"),
    }
}

/// JAX compiles a shape-polymorphic module only after `jax.export` refines its symbolic
/// dimensions (the reference's `refine_shape_polymorphism` itself raises `NotImplementedError`);
/// the plugins refuse one with unrefined dimensions, and that reaches the caller as a typed error
/// with the plugin's reason, never a crash.
#[test]
fn a_module_with_dynamic_dimensions_is_a_typed_error() {
    let dynamic = ADD.replace("2x2xf32", "?x2xf32");
    let err = client()
        .compile(dynamic.as_bytes(), &CompileOptions::spmd(&[0]))
        .unwrap_err();
    match &err {
        PjrtError::Call {
            function, message, ..
        } => {
            assert_eq!(*function, "PJRT_Client_Compile");
            assert!(message.contains("dynamism"), "{message}");
        }
        other => panic!("expected a PJRT call error, got {other:?}"),
    }
}

#[test]
fn wrong_argument_counts_are_refused_before_reaching_pjrt() {
    let client = client();
    let exe = client
        .compile(ADD.as_bytes(), &CompileOptions::spmd(&[0]))
        .unwrap();
    let err = exe.execute(&[]).unwrap_err();
    assert!(
        matches!(
            err,
            PjrtError::Arity {
                expected: 1,
                actual: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(matches!(
        client.device(42),
        Err(PjrtError::UnknownDevice { id: 42, .. })
    ));
}

#[test]
fn the_compile_cache_stores_and_reloads_executables() {
    use tessera_pjrt::{CacheOutcome, CompileCache};
    let client = client();
    let dir = std::env::temp_dir().join(format!("tessera-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = CompileCache::new(&dir);
    let options = CompileOptions::spmd(&[2]);
    let (_, first) = cache
        .get_or_compile(&client, ADD.as_bytes(), &options)
        .unwrap();
    let (again, second) = cache
        .get_or_compile(&client, ADD.as_bytes(), &options)
        .unwrap();
    assert_eq!((first, second), (CacheOutcome::Miss, CacheOutcome::Hit));
    let (_, other) = cache
        .get_or_compile(&client, ADD.as_bytes(), &CompileOptions::spmd(&[3]))
        .unwrap();
    assert_eq!(
        other,
        CacheOutcome::Miss,
        "different devices are a different entry"
    );
    let x = Buffer::from_host_to(
        &client,
        &HostArray::from_slice(&[2, 2], &[2f32; 4]).unwrap(),
        2,
    )
    .unwrap();
    let out = again.execute(&[vec![&x, &x]]).unwrap();
    assert_eq!(
        out[0][0].to_host().unwrap().to_typed::<f32>().unwrap(),
        [4.0; 4]
    );
    for entry in std::fs::read_dir(&dir).unwrap() {
        std::fs::write(entry.unwrap().path(), b"garbage").unwrap();
    }
    let (_, damaged) = cache
        .get_or_compile(&client, ADD.as_bytes(), &options)
        .unwrap();
    assert_eq!(damaged, CacheOutcome::Miss, "a damaged entry is recompiled");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cpu_devices_report_their_memories() {
    let client = client();
    let memories = client.device(0).unwrap().memories().unwrap();
    assert!(!memories.is_empty());
    assert!(memories[0].is_default, "{memories:?}");
    assert!(memories.iter().all(|m| !m.kind.is_empty()), "{memories:?}");
}

#[test]
fn concurrent_spmd_launches_on_the_same_devices_do_not_share_collectives() {
    // Each launch needs its own rendezvous in XLA's CPU collectives; with a shared launch id,
    // concurrent all-reduces over the same devices abort the process.
    let devices: Vec<i64> = (0..8).collect();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let devices = devices.clone();
            scope.spawn(move || {
                let client = client();
                let exe = client
                    .compile(SHARDED_SUM.as_bytes(), &CompileOptions::spmd(&devices))
                    .unwrap();
                let shards: Vec<Buffer> = (0..8)
                    .map(|d| {
                        Buffer::from_host_to(
                            &client,
                            &HostArray::from_slice(&[1], &[(t + 1) as f32]).unwrap(),
                            d,
                        )
                        .unwrap()
                    })
                    .collect();
                let args: Vec<Vec<&Buffer>> = shards.iter().map(|b| vec![b]).collect();
                for _ in 0..200 {
                    let out = exe.execute(&args).unwrap();
                    assert_eq!(
                        out[3][0].to_host().unwrap().to_typed::<f32>().unwrap(),
                        [8.0 * (t + 1) as f32]
                    );
                }
            });
        }
    });
}

/// Runs `acc = acc * 0.999999 + 1` for `n` steps: a chain of dependent float operations that
/// the compiler cannot fold, so a computation that takes a while; on two devices, because
/// the CPU plugin runs a one-device program inside the execute call.
const SPIN: &str = r#"
module @spin attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%n: tensor<i32> {mhlo.sharding = "{replicated}"}) -> (tensor<f32> {mhlo.sharding = "{replicated}"}) {
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %start = stablehlo.constant dense<0.0> : tensor<f32>
    %decay = stablehlo.constant dense<0.999999> : tensor<f32>
    %step = stablehlo.constant dense<1.0> : tensor<f32>
    %r:2 = stablehlo.while(%i = %zero, %acc = %start) : tensor<i32>, tensor<f32>
      cond {
        %c = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %c : tensor<i1>
      } do {
        %next = stablehlo.add %i, %one : tensor<i32>
        %scaled = stablehlo.multiply %acc, %decay : tensor<f32>
        %sum = stablehlo.add %scaled, %step : tensor<f32>
        stablehlo.return %next, %sum : tensor<i32>, tensor<f32>
      }
    return %r#1 : tensor<f32>
  }
}
"#;

#[test]
fn readiness_is_learnt_from_callbacks_and_a_wait_can_stop_before_the_device_does() {
    use std::time::{Duration, Instant};
    use tessera_pjrt::Readiness;
    let client = client();
    let exe = client
        .compile(SPIN.as_bytes(), &CompileOptions::spmd(&[0, 1]))
        .unwrap();
    let n = HostArray::from_slice(&[], &[200_000_000]).unwrap();
    let count = [0, 1].map(|d| Buffer::from_host_to(&client, &n, d).unwrap());
    let started = Instant::now();
    let out = exe.execute(&[vec![&count[0]], vec![&count[1]]]).unwrap();
    let dispatched = started.elapsed();
    let readiness = Readiness::watch(&[&out[0][0], &out[1][0]]).unwrap();
    // Told to stop at once, the wait gives up while the device still counts.
    let stopped = readiness
        .wait_unless(&|| true, Duration::from_millis(1))
        .unwrap();
    let gave_up = started.elapsed();
    // Then it learns, from the callback, when the count is done.
    assert!(readiness.wait_for(Duration::from_secs(300)).unwrap());
    let done = started.elapsed();
    eprintln!("dispatched in {dispatched:?}, gave up at {gave_up:?}, done at {done:?}");
    assert!(
        !stopped,
        "the count was done before the wait stopped ({done:?})"
    );
    let acc = out[0][0].to_host().unwrap().to_typed::<f32>().unwrap()[0];
    assert!(acc > 1000.0 && acc.is_finite(), "{acc}");
    // A buffer that is already computed is ready at once.
    let ready = Readiness::watch(&[&count[0]]).unwrap();
    assert!(ready.wait_for(Duration::ZERO).unwrap());
}

#[test]
fn a_copy_to_the_host_asked_for_at_launch_arrives_when_the_program_ends() {
    use std::time::Instant;
    let client = client();
    let exe = client
        .compile(SPIN.as_bytes(), &CompileOptions::spmd(&[0, 1]))
        .unwrap();
    let n = HostArray::from_slice(&[], &[20_000_000]).unwrap();
    let count = [0, 1].map(|d| Buffer::from_host_to(&client, &n, d).unwrap());
    let started = Instant::now();
    let out = exe.execute(&[vec![&count[0]], vec![&count[1]]]).unwrap();
    // Asked for while the program still counts: the copy waits for the result, not a stale value.
    let copy = out[0][0].to_host_started().unwrap();
    let asked = started.elapsed();
    let early = copy.wait().unwrap().to_typed::<f32>().unwrap()[0];
    let later = out[0][0].to_host().unwrap().to_typed::<f32>().unwrap()[0];
    eprintln!(
        "asked for after {asked:?}, arrived after {:?}",
        started.elapsed()
    );
    assert_eq!(early, later);
    assert!(early > 1000.0 && early.is_finite(), "{early}");
    // Dropping a copy that was never waited for waits for it (the plugin writes into its memory).
    drop(out[1][0].to_host_started().unwrap());
}
