//! Host callbacks in compiled programs: `pure_callback`, `io_callback` and `debug_callback`
//! lowered to the typed-FFI custom call `tessera_host_callback` run their Rust closures from
//! inside XLA on both CPU plugins (`zml-cpu`, PJRT API 0.106, and `xla-cpu-pjrt`, 0.81), agree
//! with the interpreter, run once per `scan` iteration, keep their order when ordered, and fail
//! with a typed error (never a crash) when a closure returns the wrong shape. Ordered effects on
//! more than one device are refused, as JAX refuses them.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tessera::jit::{Jit, JitError, run_on_device};
use tessera_ir::interp::eval_closed;
use tessera_ir::prim::VmapMethod;
use tessera_ir::trace::{debug_callback, io_callback, pure_callback, scan, trace};
use tessera_ir::{Array, DType, ShapedArray, vmap};
use tessera_pjrt::Client;
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};
use tessera_stablehlo::Partitioner;

fn f32s(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

fn arr(shape: &[i64], values: &[f64]) -> Array {
    Array::new(DType::F32, shape, values.to_vec()).unwrap()
}

fn values(a: &Array) -> Vec<f64> {
    a.values().into_raw_vec_and_offset().0
}

/// A client of each CPU plugin `cargo xtask setup` installs.
fn clients() -> Vec<(&'static str, Client)> {
    ["zml-cpu", "xla-cpu-pjrt"]
        .into_iter()
        .map(|name| (name, Client::open(Some(name), 1).unwrap()))
        .collect()
}

/// A closure squaring its operand (plus one), counting its calls.
fn counting(
    calls: &Arc<AtomicUsize>,
) -> impl Fn(&[Array]) -> Result<Vec<Array>, String> + Send + Sync + 'static {
    let calls = calls.clone();
    move |args: &[Array]| {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok(vec![Array::from_values(
            args[0].dtype(),
            args[0].values().mapv(|v| v * v + 1.0),
        )])
    }
}

#[test]
fn pure_callback_runs_inside_xla_on_both_cpu_plugins_and_matches_the_interpreter() {
    for (name, client) in clients() {
        let calls = Arc::new(AtomicUsize::new(0));
        let f = counting(&calls);
        let program = trace(&[f32s(&[2, 3])], |a| {
            let y = pure_callback(f, &[f32s(&[2, 3])], &[&a[0].sin()], None).remove(0);
            vec![&y * &a[0]]
        })
        .unwrap();
        let x = arr(&[2, 3], &[0.5, -1.0, 2.0, 3.0, 0.0, 1.5]);
        let want = eval_closed(&program, std::slice::from_ref(&x)).unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{name}");
        let got =
            run_on_device(&client, &program, &[x], 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "{name}: the callback ran in XLA"
        );
        for (g, w) in values(&got[0]).iter().zip(values(&want[0])) {
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                "{name}: {g} vs {w}"
            );
        }
    }
}

#[test]
fn a_callback_with_several_operands_and_results_of_other_dtypes_runs_on_pjrt() {
    for (name, client) in clients() {
        let program = trace(&[f32s(&[3]), ShapedArray::new(DType::I32, &[])], |a| {
            pure_callback(
                |args: &[Array]| {
                    let x = args[0].values();
                    let k = args[1].values()[[]];
                    Ok(vec![
                        Array::new(DType::I32, &[3], x.iter().map(|v| v.floor() + k).collect())
                            .map_err(|e| e.to_string())?,
                        Array::new(
                            DType::Bool,
                            &[3],
                            x.iter().map(|&v| f64::from(u8::from(v > 0.0))).collect(),
                        )
                        .map_err(|e| e.to_string())?,
                        Array::new(DType::F64, &[], vec![x.sum()]).map_err(|e| e.to_string())?,
                    ])
                },
                &[
                    ShapedArray::new(DType::I32, &[3]),
                    ShapedArray::new(DType::Bool, &[3]),
                    ShapedArray::new(DType::F64, &[]),
                ],
                &[&a[0], &a[1]],
                None,
            )
        })
        .unwrap();
        let args = [
            arr(&[3], &[1.5, -2.25, 0.0]),
            Array::new(DType::I32, &[], vec![10.0]).unwrap(),
        ];
        let got =
            run_on_device(&client, &program, &args, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(values(&got[0]), [11.0, 7.0, 10.0], "{name}");
        assert_eq!(values(&got[1]), [1.0, 0.0, 0.0], "{name}");
        assert_eq!(values(&got[2]), [-0.75], "{name}");
        assert_eq!(got[1].dtype(), DType::Bool, "{name}");
    }
}

#[test]
fn an_io_callback_without_operands_reads_host_state_on_each_call_on_pjrt() {
    for (name, client) in clients() {
        let counter = Arc::new(AtomicUsize::new(0));
        let c = counter.clone();
        let program = trace(&[f32s(&[])], |a| {
            let next = move |_: &[Array]| {
                let n = c.fetch_add(1, Ordering::SeqCst) + 1;
                Array::new(DType::F32, &[], vec![n as f64])
                    .map(|a| vec![a])
                    .map_err(|e| e.to_string())
            };
            let n = io_callback(next, &[f32s(&[])], &[], true).remove(0);
            vec![&a[0] * &n]
        })
        .unwrap();
        let exe =
            tessera::jit::compile(&client, &program, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        let x = tessera_pjrt::Buffer::from_host_to(&client, &arr(&[], &[10.0]), 0).unwrap();
        for want in [10.0, 20.0, 30.0] {
            let out = exe
                .execute(&[vec![&x]])
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(values(&out[0][0].to_host().unwrap()), [want], "{name}");
        }
    }
}

#[test]
fn an_io_callback_with_unused_results_and_a_debug_callback_run_on_pjrt() {
    for (name, client) in clients() {
        let io_calls = Arc::new(AtomicUsize::new(0));
        let debug_calls = Arc::new(AtomicUsize::new(0));
        let f = counting(&io_calls);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (d, s) = (debug_calls.clone(), seen.clone());
        let program = trace(&[f32s(&[3])], |a| {
            let _unused = io_callback(f, &[f32s(&[3])], &[&a[0]], false);
            let doubled = &a[0] * 2.0;
            debug_callback(
                move |x: &[Array]| {
                    d.fetch_add(1, Ordering::SeqCst);
                    s.lock()
                        .unwrap()
                        .push(x[0].values().into_raw_vec_and_offset().0);
                },
                &[&doubled],
            );
            vec![a[0].cos()]
        })
        .unwrap();
        let out = run_on_device(&client, &program, &[arr(&[3], &[0.0, 1.0, 2.0])], 0)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!((values(&out[0])[0] - 1.0).abs() < 1e-6, "{name}");
        assert_eq!(
            io_calls.load(Ordering::SeqCst),
            1,
            "{name}: io_callback ran"
        );
        assert_eq!(
            debug_calls.load(Ordering::SeqCst),
            1,
            "{name}: debug_callback ran"
        );
        assert_eq!(
            *seen.lock().unwrap(),
            [vec![0.0, 2.0, 4.0]],
            "{name}: it saw the operand"
        );
    }
}

#[test]
fn ordered_io_callbacks_run_in_program_order_across_calls_on_pjrt() {
    for (name, client) in clients() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let program = trace(&[f32s(&[])], |a| {
            // Three ordered callbacks on independent values: only the order token chains them.
            for k in 1..=3 {
                let l = log.clone();
                let _ = io_callback(
                    move |x: &[Array]| {
                        l.lock().unwrap().push(k);
                        Ok(x.to_vec())
                    },
                    &[f32s(&[])],
                    &[&(&a[0] * f64::from(k))],
                    true,
                );
            }
            vec![a[0].sin()]
        })
        .unwrap();
        // The lowering chains the three calls: each takes the token the one before returned.
        let options = tessera_stablehlo::LowerOptions {
            num_partitions: 1,
            ..Default::default()
        };
        let text = tessera_stablehlo::lower_closed(&program, &options)
            .unwrap()
            .text;
        let calls: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("tessera_host_callback"))
            .collect();
        assert_eq!(calls.len(), 3, "{text}");
        for pair in calls.windows(2) {
            let token = pair[0]
                .split_once(":2 = ")
                .map_or("?", |(lhs, _)| lhs.trim());
            assert!(
                pair[1].contains(&format!("{token}#1")),
                "{name}: not chained:\n{text}"
            );
        }
        assert!(
            calls.iter().all(|l| l.contains("order_token = 1")),
            "{text}"
        );
        let exe =
            tessera::jit::compile(&client, &program, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        for call in 0..3 {
            let x = tessera_pjrt::Buffer::from_host_to(&client, &arr(&[], &[f64::from(call)]), 0)
                .unwrap();
            exe.execute(&[vec![&x]])
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        assert_eq!(*log.lock().unwrap(), [1, 2, 3, 1, 2, 3, 1, 2, 3], "{name}");
    }
}

#[test]
fn a_long_call_with_ordered_effects_returns_once_its_callback_has_run() {
    for (name, client) in clients() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        let program = trace(&[f32s(&[256, 256])], |a| {
            // Seconds of work before the callback: an asynchronous launch returns long before.
            let (carry, _) = scan(&[], &[&a[0]], &[], Some(400), false, |_, h, _| {
                (vec![(h[0].matmul(&h[0]) * 0.001).tanh()], vec![])
            });
            let record = move |x: &[Array]| {
                l.lock().unwrap().push(x[0].dims().to_vec());
                Ok(Vec::new())
            };
            let _ = io_callback(record, &[], &[&carry[0]], true);
            vec![carry[0].clone()]
        })
        .unwrap();
        let exe =
            tessera::jit::compile(&client, &program, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        let x = tessera_pjrt::Buffer::from_host_to(
            &client,
            &Array::new(DType::F32, &[256, 256], vec![0.01; 65536]).unwrap(),
            0,
        )
        .unwrap();
        let out = exe
            .execute(&[vec![&x]])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            *log.lock().unwrap(),
            [vec![256, 256]],
            "{name}: returned before the callback ran"
        );
        drop(out);
    }
}

#[test]
fn a_call_with_ordered_effects_returns_once_its_callbacks_have_run() {
    for (name, client) in clients() {
        let program = trace(&[f32s(&[2])], |a| {
            let fail = |_: &[Array]| -> Result<Vec<Array>, String> { Err("sensor offline".into()) };
            let _ = io_callback(fail, &[f32s(&[2])], &[&a[0]], true);
            vec![a[0].sin()]
        })
        .unwrap();
        let exe =
            tessera::jit::compile(&client, &program, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        let x = tessera_pjrt::Buffer::from_host_to(&client, &arr(&[2], &[0.0, 1.0]), 0).unwrap();
        // The execution itself fails: the call waited for its ordered callback.
        let err = exe.execute(&[vec![&x]]).unwrap_err().to_string();
        assert!(err.contains("sensor offline"), "{name}: {err}");
    }
}

#[test]
fn a_callback_in_a_scan_body_runs_once_per_iteration_on_pjrt() {
    for (name, client) in clients() {
        let calls = Arc::new(AtomicUsize::new(0));
        let f = counting(&calls);
        let program = trace(&[f32s(&[5, 2])], |a| {
            let (carry, ys) = scan(
                &[],
                &[&a[0].sum(&[0, 1])],
                &[&a[0]],
                None,
                false,
                |_, h, x| {
                    let y = io_callback(f, &[f32s(&[2])], &[&x[0]], false).remove(0);
                    (vec![&h[0] + &y.sum(&[0])], vec![y])
                },
            );
            vec![carry[0].clone(), ys[0].clone()]
        })
        .unwrap();
        let x = arr(
            &[5, 2],
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0],
        );
        let want = eval_closed(&program, std::slice::from_ref(&x)).unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 5, "{name}: interpreter");
        let got =
            run_on_device(&client, &program, &[x], 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            10,
            "{name}: once per iteration in XLA"
        );
        assert_eq!(values(&got[1]), values(&want[1]), "{name}");
        assert_eq!(values(&got[0]), values(&want[0]), "{name}");
    }
}

#[test]
fn vmap_sequential_of_a_pure_callback_runs_per_element_on_pjrt() {
    let client = Client::cpu(1).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let f = counting(&calls);
    let program = trace(&[f32s(&[2])], |a| {
        pure_callback(f, &[f32s(&[2])], &[&a[0]], Some(VmapMethod::Sequential))
    })
    .unwrap();
    let batched = vmap(&program, &[Some(0)], &[0], 4).unwrap();
    let x = arr(&[4, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let got = run_on_device(&client, &batched, &[x], 0).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert_eq!(
        values(&got[0]),
        [2.0, 5.0, 10.0, 17.0, 26.0, 37.0, 50.0, 65.0]
    );
}

#[test]
fn a_callback_returning_the_wrong_shape_fails_the_execution_with_a_typed_error() {
    for (name, client) in clients() {
        let program = trace(&[f32s(&[4])], |a| {
            pure_callback(
                |_: &[Array]| Ok(vec![Array::new(DType::F32, &[3], vec![0.0; 3]).unwrap()]),
                &[f32s(&[4])],
                &[&a[0]],
                None,
            )
        })
        .unwrap();
        let err = run_on_device(&client, &program, &[arr(&[4], &[0.0; 4])], 0).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, JitError::Pjrt(_)), "{name}: {err:?}");
        assert!(
            text.contains("float32[3]") && text.contains("float32[4]"),
            "{name}: {text}"
        );
    }
}

#[test]
fn ordered_effects_on_eight_devices_are_refused() {
    let program = trace(&[f32s(&[8])], |a| {
        io_callback(|x: &[Array]| Ok(x.to_vec()), &[f32s(&[8])], &[&a[0]], true)
    })
    .unwrap();
    let mesh = Mesh::auto(&[("x", 8)]).unwrap();
    let s = NamedSharding::new(&mesh, PartitionSpec::parse("P()").unwrap()).unwrap();
    let jit = Jit::new(program, vec![s.clone()], vec![s]).unwrap();
    let err = jit.lower().unwrap_err();
    assert!(
        matches!(err, JitError::OrderedEffects { devices: 8 }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("Ordered effects are not supported for more than 1 device")
    );
}

/// A callback of a multi-device `jit` runs as JAX's does (`_callback_op_sharding`): a maximal
/// sharding on device 0, so pure, io and debug callbacks each run once per call on the whole
/// operand, whatever its layout, and their results reach every device. Such a program is
/// lowered for GSPMD whichever partitioner was asked for (XLA's Shardy import keeps a custom
/// call's sharding only for JAX's own callback targets).
#[test]
fn callbacks_of_an_eight_device_jit_run_once_on_the_whole_array() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (c, s) = (calls.clone(), seen.clone());
    let record = move |x: &[Array]| {
        c.fetch_add(1, Ordering::SeqCst);
        s.lock().unwrap().push(x[0].dims().to_vec());
    };
    let (r1, r2, r3) = (record.clone(), record.clone(), record);
    let program = trace(&[f32s(&[8])], |a| {
        let triple = move |x: &[Array]| {
            r1(x);
            Ok(vec![Array::from_values(
                DType::F32,
                x[0].values().mapv(|v| v * 3.0),
            )])
        };
        let y = pure_callback(triple, &[f32s(&[8])], &[&a[0]], None).remove(0);
        let logged = io_callback(
            move |x: &[Array]| {
                r2(x);
                Ok(vec![x[0].clone()])
            },
            &[f32s(&[8])],
            &[&y],
            false,
        )
        .remove(0);
        debug_callback(move |x: &[Array]| r3(x), &[&logged]);
        vec![&logged + 1.0]
    })
    .unwrap();
    let client = Client::cpu(8).unwrap();
    let mesh = Mesh::auto(&[("x", 8)]).unwrap();
    let x = arr(&[8], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let runs = [
        ("P()", None),
        ("P('x')", None),
        ("P('x')", Some(Partitioner::Shardy)),
        ("P('x')", Some(Partitioner::Gspmd)),
    ];
    for (k, (spec, partitioner)) in runs.into_iter().enumerate() {
        let s = NamedSharding::new(&mesh, PartitionSpec::parse(spec).unwrap()).unwrap();
        let mut jit = Jit::new(program.clone(), vec![s.clone()], vec![s.clone()]).unwrap();
        if let Some(p) = partitioner {
            jit = jit.with_partitioner(p);
        }
        let lowered = jit.lower().unwrap();
        assert_eq!(lowered.partitioner(), Partitioner::Gspmd, "{spec}");
        assert!(
            lowered.as_text().contains("{maximal device=0}"),
            "{}",
            lowered.as_text()
        );
        let compiled = lowered.compile(&client).unwrap();
        let arg = tessera_pjrt::Array::device_put(&client, &x, &s).unwrap();
        let out = compiled.call(&[&arg]).unwrap();
        assert_eq!(
            values(&out[0].to_host().unwrap()),
            [4.0, 7.0, 10.0, 13.0, 16.0, 19.0, 22.0, 25.0],
            "{spec}"
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            3 * (k + 1),
            "{spec}: once each"
        );
    }
    assert!(
        seen.lock().unwrap().iter().all(|d| d == &[8]),
        "{:?}",
        seen.lock().unwrap()
    );
}

#[test]
fn a_jit_that_returns_its_argument_still_runs_its_effects() {
    let client = Client::cpu(1).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let f = counting(&calls);
    let program = trace(&[f32s(&[2])], |a| {
        let _ = io_callback(f, &[f32s(&[2])], &[&a[0]], false);
        vec![a[0].clone()]
    })
    .unwrap();
    let s = tessera::jit::single_device_sharding(0).unwrap();
    let compiled = Jit::new(program, vec![s.clone()], vec![s.clone()])
        .unwrap()
        .lower()
        .unwrap()
        .compile(&client)
        .unwrap();
    assert!(!compiled.is_trivial(), "a program with effects is compiled");
    let x = tessera_pjrt::Array::device_put(&client, &arr(&[2], &[1.0, 2.0]), &s).unwrap();
    for k in 1..=2 {
        let out = compiled.call(&[&x]).unwrap();
        assert_eq!(values(&out[0].to_host().unwrap()), [1.0, 2.0]);
        assert_eq!(calls.load(Ordering::SeqCst), k);
    }
}

#[test]
fn callbacks_on_empty_and_zero_dimensional_operands_run_on_pjrt() {
    for (name, client) in clients() {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let program = trace(&[f32s(&[0, 3]), f32s(&[])], |a| {
            pure_callback(
                move |args: &[Array]| {
                    seen.fetch_add(1, Ordering::SeqCst);
                    let s = args[1].values()[[]];
                    Ok(vec![
                        Array::new(DType::F32, &[3, 0], Vec::new()).map_err(|e| e.to_string())?,
                        Array::new(DType::F32, &[], vec![s * 2.0 + args[0].dims()[0] as f64])
                            .map_err(|e| e.to_string())?,
                    ])
                },
                &[f32s(&[3, 0]), f32s(&[])],
                &[&a[0], &a[1]],
                None,
            )
        })
        .unwrap();
        let args = [arr(&[0, 3], &[]), arr(&[], &[1.5])];
        let got =
            run_on_device(&client, &program, &args, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{name}");
        assert_eq!(got[0].dims(), [3, 0], "{name}");
        assert_eq!(values(&got[1]), [3.0], "{name}");
    }
}

#[test]
fn a_callback_that_panics_fails_the_execution_with_a_typed_error() {
    for (name, client) in clients() {
        let program = trace(&[f32s(&[2])], |a| {
            pure_callback(
                |_: &[Array]| -> Result<Vec<Array>, String> { panic!("a closure's bug") },
                &[f32s(&[2])],
                &[&a[0]],
                None,
            )
        })
        .unwrap();
        let err = run_on_device(&client, &program, &[arr(&[2], &[1.0, 2.0])], 0).unwrap_err();
        assert!(matches!(err, JitError::Pjrt(_)), "{name}: {err:?}");
        assert!(err.to_string().contains("panicked"), "{name}: {err}");
    }
}

#[test]
fn a_deserialized_executable_runs_its_ordered_callbacks_in_call_order() {
    for (name, client) in clients() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let program = trace(&[f32s(&[])], |a| {
            for k in 1..=2 {
                let l = log.clone();
                let _ = io_callback(
                    move |x: &[Array]| {
                        l.lock().unwrap().push((k, x[0].values()[[]]));
                        Ok(Vec::new())
                    },
                    &[],
                    &[&(&a[0] * f64::from(k))],
                    true,
                );
            }
            vec![a[0].sin()]
        })
        .unwrap();
        let exe =
            tessera::jit::compile(&client, &program, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        let bytes = exe.serialize().unwrap_or_else(|e| panic!("{name}: {e}"));
        let exe = client
            .deserialize_executable(&bytes)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for call in 0..3 {
            let x = tessera_pjrt::Buffer::from_host_to(&client, &arr(&[], &[f64::from(call)]), 0)
                .unwrap();
            exe.execute(&[vec![&x]])
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let want: Vec<(i32, f64)> = (0..3)
            .flat_map(|c| [(1, f64::from(c)), (2, 2.0 * f64::from(c))])
            .collect();
        assert_eq!(*log.lock().unwrap(), want, "{name}");
    }
}
