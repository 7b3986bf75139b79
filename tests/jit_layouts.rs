//! The layouts `jit` executables take and return, on typed shardings: an array laid out over
//! the same devices in another order, with logical device ids that move its blocks, or in
//! another memory kind, is refused with what differs and how to move it (and gives the right
//! values once resharded to the executable's input sharding); an equivalent spelling of the spec
//! is accepted, and the `JitCache` gives it the executable compiled for the other spelling;
//! shardings on different device assignments do not lower; a mesh on devices the client lacks
//! is refused before compiling, naming them; a program without shardings runs on the default
//! device; an array held only in part is refused; XLA chooses `UNSPECIFIED` results'
//! and `AUTO` arguments' layouts, read back from the executable.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::jit::{Jit, JitCache, JitError, from_host, to_host};
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::trace;
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_pjrt::{Array as DeviceArray, Client};
use tessera_sharding::named::LayoutDifference;
use tessera_sharding::{AbstractMesh, Mesh, NamedSharding, PartitionSpec};

fn program() -> ClosedJaxpr {
    trace(&[ShapedArray::new(DType::F32, &[8, 4])], |a| {
        vec![(&a[0] * 2.0 + 1.0).tanh()]
    })
    .unwrap()
}

fn host() -> Array {
    Array::new(
        DType::F32,
        &[8, 4],
        (0..32).map(|i| (f64::from(i) * 0.37).sin()).collect(),
    )
    .unwrap()
}

fn mesh(devices: &[i64]) -> Mesh {
    let shape = AbstractMesh::auto(&[("x", 2), ("y", 2)]).unwrap();
    Mesh::new(shape, devices.to_vec()).unwrap()
}

fn sharding(mesh: &Mesh, spec: &str) -> NamedSharding {
    NamedSharding::new(mesh, PartitionSpec::parse(spec).unwrap()).unwrap()
}

/// Runs `exe` on `x` and checks the values against the interpreter.
fn assert_right_values(exe: &tessera::jit::Compiled, x: &DeviceArray) {
    let out = exe.call(&[x]).unwrap();
    let got = from_host(&out[0].to_host().unwrap(), DType::F32).unwrap();
    let want = eval_closed(&program(), &[host()]).unwrap();
    for (g, w) in got.to_vec().iter().zip(want[0].to_vec()) {
        assert!((g - w).abs() < 1e-6, "{g} vs {w}");
    }
}

#[test]
fn an_array_over_the_devices_in_another_order_is_refused_until_resharded() {
    let client = Client::cpu(4).unwrap();
    let want = sharding(&mesh(&[0, 1, 2, 3]), "P('x', 'y')");
    let exe = Jit::new(program(), vec![want.clone()], vec![want.clone()])
        .unwrap()
        .lower()
        .unwrap()
        .compile(&client)
        .unwrap();
    assert_eq!(exe.input_shardings(), std::slice::from_ref(&want));
    let other = sharding(&mesh(&[1, 0, 3, 2]), "P('x', 'y')");
    let x = DeviceArray::device_put(&client, &to_host(&host()).unwrap(), &other).unwrap();
    let err = exe.call(&[&x]).err().unwrap();
    let JitError::Layout {
        index, difference, ..
    } = &err
    else {
        panic!("not a layout error: {err}");
    };
    assert_eq!(*index, 0);
    assert_eq!(
        **difference,
        LayoutDifference::Devices {
            have: vec![1, 0, 3, 2],
            want: vec![0, 1, 2, 3]
        }
    );
    let text = err.to_string();
    assert!(
        text.contains("[1, 0, 3, 2]")
            && text.contains("reshard")
            && text.contains("input_shardings"),
        "{text}"
    );
    let moved = x.reshard(&client, &exe.input_shardings()[0]).unwrap();
    assert_right_values(&exe, &moved);
}

/// Logical device ids on the executable's own mesh put the blocks on other devices: the array
/// has the mesh and the spec of the executable's input, and is still refused.
#[test]
fn logical_device_ids_that_move_blocks_are_refused_until_resharded() {
    let client = Client::cpu(4).unwrap();
    let plain = mesh(&[0, 1, 2, 3]);
    let want = sharding(&plain, "P('x', 'y')");
    let exe = Jit::new(program(), vec![want.clone()], vec![want.clone()])
        .unwrap()
        .lower()
        .unwrap()
        .compile(&client)
        .unwrap();
    let permuted = want
        .clone()
        .with_logical_device_ids(vec![1, 0, 3, 2])
        .unwrap();
    assert_eq!(permuted.concrete_mesh(), want.concrete_mesh());
    assert_eq!(permuted.spec(), want.spec());
    let x = DeviceArray::device_put(&client, &to_host(&host()).unwrap(), &permuted).unwrap();
    let err = exe.call(&[&x]).err().unwrap();
    assert!(
        matches!(
            &err,
            JitError::Layout { difference, .. }
                if matches!(**difference, LayoutDifference::Layout { .. })
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("logical device ids [1, 0, 3, 2]"),
        "{err}"
    );
    let moved = x.reshard(&client, &exe.input_shardings()[0]).unwrap();
    assert_right_values(&exe, &moved);
    // The identity permutation is the plain layout: accepted as is.
    let identity = want.with_logical_device_ids(vec![0, 1, 2, 3]).unwrap();
    let y = DeviceArray::device_put(&client, &to_host(&host()).unwrap(), &identity).unwrap();
    assert_right_values(&exe, &y);
}

#[test]
fn equivalent_spellings_of_a_spec_are_accepted_and_share_one_executable() {
    let client = Client::cpu(4).unwrap();
    let m = mesh(&[0, 1, 2, 3]);
    let (long, short) = (sharding(&m, "P('x', None)"), sharding(&m, "P('x')"));
    assert_ne!(long, short);
    let cache = JitCache::default();
    let jit_long = Jit::new(program(), vec![long.clone()], vec![long.clone()]).unwrap();
    let jit_short = Jit::new(program(), vec![short.clone()], vec![short.clone()]).unwrap();
    let first = cache.get_or_compile(&client, &jit_long).unwrap();
    let second = cache.get_or_compile(&client, &jit_short).unwrap();
    assert_eq!(
        cache.len(),
        1,
        "P('x') hits the executable compiled for P('x', None)"
    );
    assert_eq!(second.input_shardings(), std::slice::from_ref(&short));
    let x_short = DeviceArray::device_put(&client, &to_host(&host()).unwrap(), &short).unwrap();
    let x_long = DeviceArray::device_put(&client, &to_host(&host()).unwrap(), &long).unwrap();
    assert_right_values(&first, &x_short);
    assert_right_values(&second, &x_long);
    assert_eq!(second.call(&[&x_long]).unwrap()[0].sharding(), &short);
    // Another layout still compiles its own executable.
    let rows = sharding(&m, "P('y')");
    cache
        .get_or_compile(
            &client,
            &Jit::new(program(), vec![rows.clone()], vec![rows]).unwrap(),
        )
        .unwrap();
    assert_eq!(cache.len(), 2);
}

/// Memory kinds are part of the layout: the default kind written out is the same layout; an
/// array in another memory the device has is refused until resharded into the executable's; a
/// program whose shardings name a memory the devices lack does not compile, and the error names
/// the kinds they have.
#[test]
fn memory_kinds_are_compared_and_checked_against_the_devices() {
    let client = Client::cpu(4).unwrap();
    let kinds: Vec<String> = (client.device(0).unwrap().memories().unwrap())
        .into_iter()
        .map(|m| m.kind)
        .collect();
    let m = mesh(&[0, 1, 2, 3]);
    let plain = sharding(&m, "P('x')");
    let explicit = plain.clone().with_memory_kind(&kinds[0]);
    let exe = Jit::new(program(), vec![explicit.clone()], vec![plain.clone()])
        .unwrap()
        .lower()
        .unwrap()
        .compile(&client)
        .unwrap();
    let x = DeviceArray::device_put(&client, &to_host(&host()).unwrap(), &plain).unwrap();
    assert_right_values(&exe, &x);
    for other in kinds.iter().skip(1) {
        let s = plain.clone().with_memory_kind(other);
        let y = DeviceArray::device_put(&client, &to_host(&host()).unwrap(), &s).unwrap();
        let err = exe.call(&[&y]).err().unwrap();
        assert!(
            matches!(
                &err,
                JitError::Layout { difference, .. }
                if matches!(**difference, LayoutDifference::MemoryKind { .. })
            ),
            "{err}"
        );
        assert!(err.to_string().contains(&format!("'{other}'")), "{err}");
        let moved = y.reshard(&client, &exe.input_shardings()[0]).unwrap();
        assert_right_values(&exe, &moved);
    }
    let nowhere = plain.clone().with_memory_kind("far_away");
    let err = Jit::new(program(), vec![nowhere], vec![plain])
        .unwrap()
        .lower()
        .unwrap()
        .compile(&client)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("far_away") && err.contains(&format!("{:?}", kinds[0])),
        "{err}"
    );
}

/// The argument shardings XLA compiled, read back from the executable, are the layouts the
/// check demands: equivalent to the declared input shardings, and not to another layout.
#[test]
fn compiled_input_shardings_are_the_declared_layouts() {
    let client = Client::cpu(4).unwrap();
    let m = mesh(&[0, 1, 2, 3]);
    for spec in ["P('x', 'y')", "P('y', None)", "P()"] {
        let s = sharding(&m, spec);
        let exe = Jit::new(program(), vec![s.clone()], vec![s.clone()])
            .unwrap()
            .lower()
            .unwrap()
            .compile(&client)
            .unwrap();
        let compiled = exe.compiled_input_shardings().unwrap();
        assert_eq!(compiled.len(), 1);
        assert!(
            compiled[0].is_equivalent_to(&s, 2).unwrap(),
            "{spec}: {}",
            compiled[0]
        );
        if spec != "P()" {
            assert!(
                !compiled[0]
                    .is_equivalent_to(&sharding(&m, "P()"), 2)
                    .unwrap(),
                "{spec}"
            );
        }
    }
}

/// `UNSPECIFIED` results: XLA chooses their layout (under both partitioners), the executable's
/// output shardings say which, and the returned arrays carry it and hold the right values.
#[test]
fn xla_chooses_unspecified_output_shardings_and_the_arrays_carry_them() {
    let client = Client::cpu(4).unwrap();
    let m = mesh(&[0, 1, 2, 3]);
    let input = sharding(&m, "P('x', 'y')");
    let placeholder = sharding(&m, "P()");
    for partitioner in [
        tessera_stablehlo::Partitioner::Shardy,
        tessera_stablehlo::Partitioner::Gspmd,
    ] {
        let jit = Jit::new(program(), vec![input.clone()], vec![placeholder.clone()])
            .unwrap()
            .with_partitioner(partitioner)
            .with_unspecified_outputs(&[0])
            .unwrap();
        assert_eq!(jit.unspecified_outputs(), [true]);
        let lowered = jit.lower().unwrap();
        let exe = lowered.compile(&client).unwrap();
        let chosen = exe.output_shardings()[0].clone();
        // An elementwise program keeps its input's layout: XLA propagates it to the result.
        assert!(
            chosen.is_equivalent_to(&input, 2).unwrap(),
            "{partitioner}: XLA chose {chosen}"
        );
        assert!(!chosen.is_equivalent_to(&placeholder, 2).unwrap());
        let x = DeviceArray::device_put(&client, &to_host(&host()).unwrap(), &input).unwrap();
        let out = exe.call(&[&x]).unwrap();
        assert_eq!(out[0].sharding(), &chosen);
        assert_eq!(
            out[0].addressable_shards().unwrap()[1].block,
            [(0, 4), (2, 4)]
        );
        assert_right_values(&exe, &x);
        // A specified result keeps the declared layout, which XLA then follows.
        let fixed = Jit::new(program(), vec![input.clone()], vec![placeholder.clone()])
            .unwrap()
            .with_partitioner(partitioner)
            .lower()
            .unwrap()
            .compile(&client)
            .unwrap();
        assert_eq!(fixed.output_shardings(), std::slice::from_ref(&placeholder));
        assert!(
            fixed.compiled_output_shardings().unwrap()[0]
                .is_equivalent_to(&placeholder, 2)
                .unwrap()
        );
    }
    let err = Jit::new(program(), vec![input], vec![placeholder])
        .unwrap()
        .with_unspecified_outputs(&[1])
        .err()
        .unwrap();
    assert!(err.to_string().contains("returns 1"), "{err}");
}

/// `AUTO` arguments: XLA's propagation chooses the layout of `y` in `tanh(x) + y` from `x`'s
/// (under both partitioners); the executable's input shardings say which, an array in the
/// placeholder layout is refused, and once moved there the values are right.
#[test]
fn xla_chooses_auto_input_shardings_and_arguments_are_checked_against_them() {
    let client = Client::cpu(4).unwrap();
    let f32 = ShapedArray::new(DType::F32, &[8, 4]);
    let sum = trace(&[f32.clone(), f32], |a| vec![a[0].tanh() + &a[1]]).unwrap();
    let m = mesh(&[0, 1, 2, 3]);
    let tiled = sharding(&m, "P('x', 'y')");
    let placeholder = sharding(&m, "P()");
    let (xs, ys) = (host(), values_plus_one());
    let want = eval_closed(&sum, &[xs.clone(), ys.clone()]).unwrap();
    for partitioner in [
        tessera_stablehlo::Partitioner::Shardy,
        tessera_stablehlo::Partitioner::Gspmd,
    ] {
        let jit = Jit::new(
            sum.clone(),
            vec![tiled.clone(), placeholder.clone()],
            vec![tiled.clone()],
        )
        .unwrap()
        .with_partitioner(partitioner)
        .with_auto_inputs(&[1])
        .unwrap();
        assert_eq!(jit.auto_inputs(), [false, true]);
        let exe = jit.lower().unwrap().compile(&client).unwrap();
        let chosen = exe.input_shardings()[1].clone();
        assert!(
            chosen.is_equivalent_to(&tiled, 2).unwrap(),
            "{partitioner}: XLA chose {chosen}"
        );
        let x = DeviceArray::device_put(&client, &to_host(&xs).unwrap(), &tiled).unwrap();
        let y = DeviceArray::device_put(&client, &to_host(&ys).unwrap(), &placeholder).unwrap();
        let err = exe.call(&[&x, &y]).err().unwrap();
        assert!(matches!(&err, JitError::Layout { index: 1, .. }), "{err}");
        let y = y.reshard(&client, &chosen).unwrap();
        let out = exe.call(&[&x, &y]).unwrap();
        let got = from_host(&out[0].to_host().unwrap(), DType::F32).unwrap();
        for (g, w) in got.to_vec().iter().zip(want[0].to_vec()) {
            assert!((g - w).abs() < 1e-6, "{partitioner}: {g} vs {w}");
        }
    }
    let donated = Jit::new(sum, vec![tiled.clone(), tiled.clone()], vec![tiled])
        .unwrap()
        .with_auto_inputs(&[0])
        .unwrap()
        .donate_argnums(&[0]);
    assert!(donated.is_err());
}

fn values_plus_one() -> Array {
    Array::new(
        DType::F32,
        &[8, 4],
        (0..32).map(|i| (f64::from(i) * 0.11).cos() + 1.0).collect(),
    )
    .unwrap()
}

/// JAX's `DeviceAssignmentMismatchError`: shardings over the same devices in other orders give
/// no single device assignment, so the program does not lower.
#[test]
fn shardings_on_different_device_assignments_do_not_lower() {
    let f32 = ShapedArray::new(DType::F32, &[8, 4]);
    let sum = trace(&[f32.clone(), f32], |a| vec![a[0].tanh() + &a[1]]).unwrap();
    let a = sharding(&mesh(&[0, 1, 2, 3]), "P('x')");
    let b = sharding(&mesh(&[1, 0, 3, 2]), "P('x')");
    let err = Jit::new(sum, vec![a.clone(), b], vec![a])
        .unwrap()
        .lower()
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("different device assignments")
            && err.contains("[0, 1, 2, 3]")
            && err.contains("[1, 0, 3, 2]"),
        "{err}"
    );
}

/// A program whose mesh names devices the client lacks is refused before XLA sees it, naming
/// the missing devices (JAX: "requires N logical devices, but only M XLA devices are
/// available"); the same program on a mesh of the client's devices compiles and runs.
#[test]
fn a_mesh_on_devices_the_client_lacks_is_refused_before_compiling() {
    let client = Client::cpu(4).unwrap();
    let eight = Mesh::new(
        AbstractMesh::auto(&[("x", 2), ("y", 4)]).unwrap(),
        (0..8).collect(),
    )
    .unwrap();
    let cases = [
        (eight, 8, vec![4, 5, 6, 7]),
        (mesh(&[0, 1, 2, 5]), 4, vec![5]),
    ];
    for (m, needed, missing) in cases {
        let s = sharding(&m, "P('x', 'y')");
        let lowered = Jit::new(program(), vec![s.clone()], vec![s])
            .unwrap()
            .lower()
            .unwrap();
        let err = lowered.compile(&client).err().unwrap();
        match &err {
            JitError::Devices {
                needed: n,
                available,
                have,
                missing: m,
                ..
            } => {
                assert_eq!((*n, *available), (needed, 4), "{err}");
                assert_eq!(have, &[0, 1, 2, 3], "{err}");
                assert_eq!(m, &missing, "{err}");
            }
            other => panic!("not a device error: {other}"),
        }
        let text = err.to_string();
        assert!(
            text.contains(&format!("needs {needed} devices")) && text.contains("Client::cpu"),
            "{text}"
        );
    }
    let fits = sharding(&mesh(&[3, 2, 1, 0]), "P('x', 'y')");
    let exe = Jit::new(program(), vec![fits.clone()], vec![fits.clone()])
        .unwrap()
        .lower()
        .unwrap()
        .compile(&client)
        .unwrap();
    let x = DeviceArray::device_put(&client, &to_host(&host()).unwrap(), &fits).unwrap();
    assert_right_values(&exe, &x);
}

/// JAX's default device: a program without shardings runs whole on the client's first device
/// (`Jit::on_default_device`) or on the device named (`Jit::on_device`, as with
/// `jax_default_device`); an array on another device is refused until moved there, and a
/// device the client lacks is refused before compiling.
#[test]
fn a_program_without_shardings_runs_on_the_default_device() {
    use tessera::jit::default_device;
    let client = Client::cpu(4).unwrap();
    assert_eq!(default_device(&client).unwrap(), 0);
    let exe = Jit::on_default_device(program(), &client)
        .unwrap()
        .lower()
        .unwrap()
        .compile(&client)
        .unwrap();
    let whole = exe.input_shardings()[0].clone();
    assert_eq!(whole.device_set().unwrap(), [0]);
    assert!(whole.is_fully_replicated());
    let x = DeviceArray::device_put(&client, &to_host(&host()).unwrap(), &whole).unwrap();
    assert_eq!(exe.call(&[&x]).unwrap()[0].sharding(), &whole);
    assert_right_values(&exe, &x);

    let on_two = Jit::on_device(program(), 2)
        .unwrap()
        .lower()
        .unwrap()
        .compile(&client)
        .unwrap();
    assert_eq!(on_two.output_shardings()[0].device_set().unwrap(), [2]);
    let err = on_two.call(&[&x]).err().unwrap();
    assert!(matches!(err, JitError::Layout { index: 0, .. }), "{err}");
    let moved = x.reshard(&client, &on_two.input_shardings()[0]).unwrap();
    assert_right_values(&on_two, &moved);

    let err = Jit::on_device(program(), 9)
        .unwrap()
        .lower()
        .unwrap()
        .compile(&client)
        .err()
        .unwrap();
    assert!(
        matches!(&err, JitError::Devices { missing, .. } if missing == &[9]),
        "{err}"
    );
}

/// An array this process holds only in part (as a process of a job holds its devices' shards)
/// is refused by a call, naming how many shards it holds, never run on the shards it has; the
/// whole array runs.
#[test]
fn an_array_held_only_in_part_is_refused() {
    let client = Client::cpu(4).unwrap();
    let want = sharding(&mesh(&[0, 1, 2, 3]), "P('x', 'y')");
    let exe = Jit::new(program(), vec![want.clone()], vec![want.clone()])
        .unwrap()
        .lower()
        .unwrap()
        .compile(&client)
        .unwrap();
    let x = DeviceArray::device_put(&client, &to_host(&host()).unwrap(), &want).unwrap();
    let half = (x.addressable_shards().unwrap().iter())
        .filter(|s| s.device < 2)
        .map(|s| (s.device, s.buffer.clone()))
        .collect();
    let part = DeviceArray::from_shared_shards(x.shape(), x.element_type(), &want, half).unwrap();
    assert!(!part.is_fully_addressable().unwrap());
    let err = exe.call(&[&part]).err().unwrap();
    assert!(
        matches!(
            err,
            JitError::NotAddressable {
                index: 0,
                held: 2,
                total: 4
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("2 of its 4 shards"), "{err}");
    assert_right_values(&exe, &x);
}
