//! `jit` with `donate_argnums`: a donated argument's buffers become a result's (the module
//! aliases them), the array passed for it is deleted, and using it again is an error naming it;
//! arguments no result can replace are refused.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::jit::Jit;
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::trace;
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_pjrt::{Array as DeviceArray, Client};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

/// `(w, g) -> w - 0.1 g`, an SGD update.
fn update() -> ClosedJaxpr {
    let f32 = ShapedArray::new(DType::F32, &[16, 4]);
    trace(&[f32.clone(), f32], |a| vec![&a[0] - &(&a[1] * 0.1)]).unwrap()
}

fn values(seed: f64) -> Array {
    Array::new(
        DType::F32,
        &[16, 4],
        (0..64).map(|i| (i as f64 * 0.37 + seed).sin()).collect(),
    )
    .unwrap()
}

fn jit(mesh: &Mesh) -> Jit {
    let rows = NamedSharding::new(mesh, PartitionSpec::parse("P('data')").unwrap()).unwrap();
    Jit::new(update(), vec![rows.clone(), rows.clone()], vec![rows]).unwrap()
}

#[test]
fn a_donated_parameter_is_consumed_and_its_later_use_is_an_error_naming_it() {
    let client = Client::cpu(8).unwrap();
    let mesh = Mesh::auto(&[("data", 8)]).unwrap();
    let donating = jit(&mesh).donate_argnums(&[0]).unwrap();
    let lowered = donating.lower().unwrap();
    assert!(
        lowered.as_text().contains("tf.aliasing_output = 0 : i32"),
        "{}",
        lowered.as_text()
    );
    let compiled = lowered.compile(&client).unwrap();
    let sharding = NamedSharding::new(&mesh, PartitionSpec::parse("P('data')").unwrap()).unwrap();
    let put = |a: &Array| DeviceArray::device_put(&client, a, &sharding).unwrap();
    let (w, g) = (values(0.5), values(2.0));
    let mut args = vec![put(&w), put(&g)];
    let alias = args[0].clone();
    // A donating program does not run on borrowed arrays.
    let refs: Vec<&DeviceArray> = args.iter().collect();
    let err = compiled.call(&refs).unwrap_err().to_string();
    assert!(err.contains("call_donated"), "{err}");
    let out = compiled.call_donated(&mut args).unwrap();
    let want = eval_closed(&update(), &[w, g]).unwrap();
    let got = out[0].to_host().unwrap();
    for (a, b) in got.to_vec().iter().zip(want[0].to_vec()) {
        assert!((a - b).abs() <= 1e-6, "{a} vs {b}");
    }
    assert!(args[0].is_deleted() && !args[1].is_deleted());
    // The donated buffers now hold the result: a copy of the handle made before reads nothing.
    let stale = alias
        .to_host()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(stale.contains("deleted or donated"), "{stale}");
    // Passing the donated array again names it.
    let err = compiled.call_donated(&mut args).unwrap_err().to_string();
    assert!(
        err.contains("argument 0") && err.contains("donated to an earlier call"),
        "{err}"
    );
    // The result can be donated to the next step.
    args[0] = out.into_iter().next().unwrap();
    assert!(compiled.call_donated(&mut args).is_ok());
}

#[test]
fn donating_what_no_result_can_reuse_is_refused() {
    let mesh = Mesh::auto(&[("data", 8)]).unwrap();
    let err = jit(&mesh)
        .donate_argnums(&[0, 1])
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("argument 1") && err.contains("no result left"),
        "{err}"
    );
    let err = jit(&mesh).donate_argnums(&[2]).err().unwrap().to_string();
    assert!(err.contains("names argument 2"), "{err}");
}

/// XLA's memory analysis of the compiled step shows the donation: the donated parameter's
/// bytes (per device, 2 of the 16 rows) alias the result, and nothing aliases without it.
#[test]
fn the_memory_analysis_counts_the_donated_bytes_as_aliased() {
    let client = Client::cpu(8).unwrap();
    let mesh = Mesh::auto(&[("data", 8)]).unwrap();
    let per_device = 2 * 4 * 4;
    let donating = jit(&mesh).donate_argnums(&[0]).unwrap();
    let memory = donating
        .lower()
        .unwrap()
        .compile(&client)
        .unwrap()
        .memory_analysis()
        .unwrap();
    assert_eq!(memory.alias_bytes, per_device, "{memory:?}");
    assert_eq!(memory.argument_bytes, 2 * per_device, "{memory:?}");
    assert_eq!(memory.output_bytes, per_device, "{memory:?}");
    let plain = jit(&mesh)
        .lower()
        .unwrap()
        .compile(&client)
        .unwrap()
        .memory_analysis()
        .unwrap();
    assert_eq!(plain.alias_bytes, 0, "{plain:?}");
}
