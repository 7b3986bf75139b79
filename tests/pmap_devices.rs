//! `pmap` on PJRT with JAX's `devices=` and `donate_argnums=` (tessera::pmap::PmapRun). Nested
//! `pmap` is tested in `pmap_nested.rs`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::pmap::{PmapError, PmapRun};
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{pmap, trace};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_pjrt::Client;

/// `pmap(lambda x, y: (x * 2 + y, psum(x)))` over 4 devices, rows of 3.
fn program() -> ClosedJaxpr {
    let aval = ShapedArray::new(DType::F32, &[4, 3]);
    trace(&[aval.clone(), aval], |a| {
        pmap("i", &[&a[0], &a[1]], |s| {
            vec![&(&s[0] * 2.0) + &s[1], s[0].psum(&["i"])]
        })
    })
    .unwrap()
}

fn values(seed: f64) -> Array {
    Array::new(
        DType::F32,
        &[4, 3],
        (0..12)
            .map(|i| (f64::from(i) * 0.37 + seed).sin())
            .collect(),
    )
    .unwrap()
}

fn host(a: &tessera_pjrt::Array) -> Array {
    tessera::jit::from_host(&a.to_host().unwrap(), DType::F32).unwrap()
}

fn close(a: &Array, b: &Array) -> bool {
    a.shape() == b.shape()
        && a.to_vec()
            .iter()
            .zip(b.to_vec())
            .all(|(p, q)| (p - q).abs() <= 1e-5 * (1.0 + q.abs()))
}

#[test]
fn a_pmap_on_devices_4_to_7_equals_the_interpreter_and_its_arrays_live_there() {
    let client = Client::cpu(8).unwrap();
    let run = PmapRun::new(&client, &program(), Some(&[4, 5, 6, 7]), &[]).unwrap();
    assert_eq!(run.devices(), vec![4, 5, 6, 7]);
    let args = [values(0.5), values(2.0)];
    let want = eval_closed(&program(), &args).unwrap();
    let got = run.run(&args).unwrap();
    assert!(got.iter().zip(&want).all(|(g, w)| close(g, w)));
    // The device arrays live on devices 4..8 only.
    let mut device = vec![run.put(&args[0]).unwrap(), run.put(&args[1]).unwrap()];
    let out = run.call(&mut device).unwrap();
    for a in device.iter().chain(&out) {
        let mut on: Vec<i64> = a
            .addressable_shards()
            .unwrap()
            .iter()
            .map(|s| i64::from(s.device))
            .collect();
        on.sort_unstable();
        assert_eq!(on, vec![4, 5, 6, 7]);
    }
    assert!(close(&host(&out[0]), &want[0]));
    // In another order, the same values.
    let run = PmapRun::new(&client, &program(), Some(&[7, 2, 5, 0]), &[]).unwrap();
    let got = run.run(&args).unwrap();
    assert!(got.iter().zip(&want).all(|(g, w)| close(g, w)));
}

#[test]
fn a_device_list_of_the_wrong_length_repeated_or_unknown_devices_are_refused() {
    let client = Client::cpu(8).unwrap();
    let refused = |devices: &[i64]| match PmapRun::new(&client, &program(), Some(devices), &[]) {
        Err(e) => e,
        Ok(_) => panic!("{devices:?} was accepted"),
    };
    let e = refused(&[0, 1, 2]);
    assert!(
        matches!(
            e,
            PmapError::DeviceCount {
                size: 4,
                given: 3,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("give exactly 4 devices"), "{e}");
    let e = refused(&[0, 1, 2, 3, 4]);
    assert!(matches!(e, PmapError::DeviceCount { given: 5, .. }), "{e}");
    let e = refused(&[0, 1, 1, 3]);
    assert!(matches!(e, PmapError::RepeatedDevice { id: 1 }), "{e}");
    assert!(e.to_string().contains("list each device once"), "{e}");
    let e = refused(&[0, 1, 2, 8]);
    assert!(matches!(e, PmapError::UnknownDevice { id: 8, .. }), "{e}");
    let e = refused(&[-1, 1, 2, 3]);
    assert!(matches!(e, PmapError::UnknownDevice { id: -1, .. }), "{e}");
    // Without a list, a client with too few devices.
    let small = Client::cpu(2).unwrap();
    let e = PmapRun::new(&small, &program(), None, &[]).err().unwrap();
    assert!(
        matches!(
            e,
            PmapError::TooFewDevices {
                size: 4,
                available: 2,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_donated_pmap_argument_is_consumed_and_using_it_again_is_a_typed_error() {
    let client = Client::cpu(8).unwrap();
    let run = PmapRun::new(&client, &program(), Some(&[4, 5, 6, 7]), &[0]).unwrap();
    let args = [values(0.5), values(2.0)];
    let want = eval_closed(&program(), &args).unwrap();
    let mut device = vec![run.put(&args[0]).unwrap(), run.put(&args[1]).unwrap()];
    let out = run.call(&mut device).unwrap();
    assert!(device[0].is_deleted() && !device[1].is_deleted());
    for (g, w) in out.iter().zip(&want) {
        assert!(close(&host(g), w));
    }
    let e = run.call(&mut device).unwrap_err();
    assert!(matches!(e, PmapError::Donated { index: 0 }), "{e}");
    // The result that holds the buffers can be donated to the next call.
    device[0] = out.into_iter().next().unwrap();
    assert!(run.call(&mut device).is_ok());
    // An argument no result can take is refused.
    let aval = ShapedArray::new(DType::F32, &[4, 3]);
    let sums = trace(&[aval], |a| pmap("i", &[&a[0]], |s| vec![s[0].sum(&[0])])).unwrap();
    let e = PmapRun::new(&client, &sums, None, &[0]).err().unwrap();
    assert!(e.to_string().contains("no result left has its type"), "{e}");
}
