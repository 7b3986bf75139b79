//! Memory kinds at a `jit`'s boundary on the PJRT CPU plugin: arguments in host memory
//! (`pinned_host`, `unpinned_host`) are lowered as JAX lowers them (`mhlo.memory_kind`),
//! compile, run, and give the values of the run in the default memory; results in host memory
//! are lowered with `annotate_device_placement`, which XLA's CPU compiler cannot compile, so the
//! CPU plugin's refusal is a typed error saying so and what to do instead (which then works).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera::jit::{Compiled, Jit, JitError, from_host, to_host};
use tessera_ir::trace::trace;
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_pjrt::{Array as DeviceArray, Client};
use tessera_sharding::named::LayoutDifference;
use tessera_sharding::{AbstractMesh, Mesh, NamedSharding, PartitionSpec};

/// `lambda a, b: (tanh(a * 2 + b), a - b)` on `8x4` arrays.
fn program() -> ClosedJaxpr {
    let aval = ShapedArray::new(DType::F32, &[8, 4]);
    trace(&[aval.clone(), aval], |a| {
        vec![(&a[0] * 2.0 + &a[1]).tanh(), &a[0] - &a[1]]
    })
    .unwrap()
}

fn inputs() -> [Array; 2] {
    let values = |s: f64| (0..32).map(|i| (f64::from(i) * s).sin()).collect();
    [
        Array::new(DType::F32, &[8, 4], values(0.37)).unwrap(),
        Array::new(DType::F32, &[8, 4], values(0.11)).unwrap(),
    ]
}

/// `P('x', 'y')` over four devices, in `kind` when given.
fn sharding(kind: Option<&str>) -> NamedSharding {
    let mesh = Mesh::new(
        AbstractMesh::auto(&[("x", 2), ("y", 2)]).unwrap(),
        vec![0, 1, 2, 3],
    );
    let s = NamedSharding::new(&mesh.unwrap(), PartitionSpec::parse("P('x', 'y')").unwrap());
    let s = s.unwrap();
    match kind {
        Some(kind) => s.with_memory_kind(kind),
        None => s,
    }
}

fn put(client: &Client, host: &Array, sharding: &NamedSharding) -> DeviceArray {
    DeviceArray::device_put(client, &to_host(host).unwrap(), sharding).unwrap()
}

/// Runs `exe` on the inputs put in its input shardings; returns the results' values.
fn run(client: &Client, exe: &Compiled) -> Vec<Vec<f64>> {
    let [a, b] = inputs();
    let args = [
        put(client, &a, &exe.input_shardings()[0]),
        put(client, &b, &exe.input_shardings()[1]),
    ];
    values(&exe.call(&[&args[0], &args[1]]).unwrap())
}

fn values(results: &[DeviceArray]) -> Vec<Vec<f64>> {
    results
        .iter()
        .map(|r| {
            from_host(&r.to_host().unwrap(), DType::F32)
                .unwrap()
                .to_vec()
        })
        .collect()
}

/// The memory kind of every buffer of `array`.
fn buffer_kinds(array: &DeviceArray) -> Vec<String> {
    (array.addressable_shards().unwrap().iter())
        .map(|s| s.buffer.memory_kind().unwrap())
        .collect()
}

fn compile(
    client: &Client,
    ins: [Option<&str>; 2],
    outs: [Option<&str>; 2],
) -> Result<Compiled, JitError> {
    Jit::new(
        program(),
        ins.iter().map(|k| sharding(*k)).collect(),
        outs.iter().map(|k| sharding(*k)).collect(),
    )?
    .lower()?
    .compile(client)
}

fn host_memory_kinds(client: &Client) -> Vec<String> {
    let memories = client.device(0).unwrap().memories().unwrap();
    let kinds: Vec<String> = memories.into_iter().map(|m| m.kind).collect();
    assert!(kinds.iter().any(|k| k == "pinned_host"), "{kinds:?}");
    kinds.into_iter().filter(|k| k != "device").collect()
}

#[test]
fn arguments_in_host_memory_compile_run_and_give_the_default_memory_values() {
    let client = Client::cpu(4).unwrap();
    let want = run(
        &client,
        &compile(&client, [None, None], [None, None]).unwrap(),
    );
    assert!(
        !compile(&client, [None, None], [None, None])
            .unwrap()
            .as_text()
            .contains("memory_kind")
    );
    for kind in host_memory_kinds(&client) {
        for ins in [
            [Some(kind.as_str()), None],
            [Some(kind.as_str()), Some(kind.as_str())],
        ] {
            let exe = compile(&client, ins, [None, None]).unwrap();
            assert!(
                exe.as_text()
                    .contains(&format!("mhlo.memory_kind = \"{kind}\"")),
                "{}",
                exe.as_text()
            );
            assert!(!exe.as_text().contains("annotate_device_placement"));
            let [a, b] = inputs();
            let args = [
                put(&client, &a, &exe.input_shardings()[0]),
                put(&client, &b, &exe.input_shardings()[1]),
            ];
            assert_eq!(buffer_kinds(&args[0]), vec![kind.clone(); 4]);
            let out = exe.call(&[&args[0], &args[1]]).unwrap();
            assert_eq!(values(&out), want, "{kind} {ins:?}");
            for r in &out {
                assert_eq!(buffer_kinds(r), vec!["device"; 4]);
                assert_eq!(r.sharding().memory_kind(), None);
            }
            // The same values in the default memory are another layout: refused, then moved.
            let plain = put(&client, &a, &sharding(None));
            let err = exe.call(&[&plain, &args[1]]).err().unwrap();
            assert!(
                matches!(&err, JitError::Layout { index: 0, difference, .. }
                    if matches!(**difference, LayoutDifference::MemoryKind { .. })),
                "{err}"
            );
            let moved = plain.reshard(&client, &exe.input_shardings()[0]).unwrap();
            assert_eq!(buffer_kinds(&moved), vec![kind.clone(); 4]);
            assert_eq!(values(&exe.call(&[&moved, &args[1]]).unwrap()), want);
        }
    }
}

#[test]
fn results_in_host_memory_are_placed_or_refused_with_what_to_do() {
    let client = Client::cpu(4).unwrap();
    let want = run(
        &client,
        &compile(&client, [None, None], [None, None]).unwrap(),
    );
    let jit = Jit::new(
        program(),
        vec![sharding(None), sharding(None)],
        vec![sharding(Some("pinned_host")), sharding(None)],
    )
    .unwrap();
    let lowered = jit.lower().unwrap();
    let text = lowered.as_text();
    assert_eq!(
        text.matches("annotate_device_placement").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains(r#"_xla_buffer_placement = "pinned_host""#),
        "{text}"
    );
    assert!(
        text.contains(r#"mhlo.memory_kind = "pinned_host""#),
        "{text}"
    );
    match client.platform_name().unwrap().as_str() {
        "cpu" => {
            let err = lowered.compile(&client).err().unwrap();
            assert!(
                matches!(&err, JitError::HostResultsUnsupported { results, .. }
                    if results == "result 0 in 'pinned_host'"),
                "{err}"
            );
            let message = err.to_string();
            for part in [
                "--plugin cuda",
                "Array::reshard",
                "annotate_device_placement",
            ] {
                assert!(message.contains(part), "{part}: {message}");
            }
            // What the error says to do: return it in the device memory, then move it.
            let exe = compile(&client, [None, None], [None, None]).unwrap();
            let [a, b] = inputs();
            let args = [
                put(&client, &a, &sharding(None)),
                put(&client, &b, &sharding(None)),
            ];
            let out = exe.call(&[&args[0], &args[1]]).unwrap();
            let host = out[0]
                .reshard(&client, &sharding(Some("pinned_host")))
                .unwrap();
            assert_eq!(buffer_kinds(&host), vec!["pinned_host"; 4]);
            assert_eq!(values(&[host, out[1].clone()]), want);
        }
        _ => {
            let exe = lowered.compile(&client).unwrap();
            let [a, b] = inputs();
            let args = [
                put(&client, &a, &sharding(None)),
                put(&client, &b, &sharding(None)),
            ];
            let out = exe.call(&[&args[0], &args[1]]).unwrap();
            assert_eq!(buffer_kinds(&out[0]), vec!["pinned_host"; 4]);
            assert_eq!(out[0].sharding().memory_kind(), Some("pinned_host"));
            assert_eq!(values(&out), want);
        }
    }
}

/// A program whose result is its host-memory argument, laid out alike, runs without compiling
/// and returns that array, still in host memory; one that moves it to the default memory is
/// compiled and returns it there.
#[test]
fn returning_a_host_argument_keeps_or_moves_its_memory() {
    let client = Client::cpu(4).unwrap();
    let aval = ShapedArray::new(DType::F32, &[8, 4]);
    let identity = trace(&[aval], |a| vec![a[0].clone()]).unwrap();
    let host = sharding(Some("pinned_host"));
    let [a, _] = inputs();
    let x = put(&client, &a, &host);
    let compile = |out: NamedSharding| {
        Jit::new(identity.clone(), vec![host.clone()], vec![out])
            .unwrap()
            .lower()
            .unwrap()
            .compile(&client)
            .unwrap()
    };
    let kept = compile(host.clone());
    assert!(kept.is_trivial());
    let out = kept.call(&[&x]).unwrap();
    assert_eq!(buffer_kinds(&out[0]), vec!["pinned_host"; 4]);
    let moved = compile(sharding(None));
    assert!(!moved.is_trivial());
    let out = moved.call(&[&x]).unwrap();
    assert_eq!(buffer_kinds(&out[0]), vec!["device"; 4]);
    assert_eq!(values(&out), values(&[x]));
}
