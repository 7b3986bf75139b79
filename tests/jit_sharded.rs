//! `jit` with NamedShardings: a data- and tensor-parallel MLP (mesh data=2 × model=4, weights
//! sharded on `model`, batch on `data`) runs SPMD on 8 CPU devices and matches the interpreter
//! under both partitioners; the entry's shardings are pinned in a snapshot per partitioner
//! (Shardy's `sdy.sharding`, GSPMD's `mhlo.sharding`); executables are cached; a layout mismatch
//! is refused with both layouts named.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use expect_test::expect;
use tessera::jit::{Jit, JitCache, from_host, to_host};
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::trace;
use tessera_ir::{Array, DType, ShapedArray};
use tessera_pjrt::{Array as DeviceArray, Client};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};
use tessera_stablehlo::Partitioner;

fn mlp() -> tessera_ir::ClosedJaxpr {
    let f32 = |s: &[i64]| ShapedArray::new(DType::F32, s);
    trace(
        &[f32(&[8, 16]), f32(&[16, 32]), f32(&[32]), f32(&[32, 4])],
        |a| {
            let hidden = (a[0].matmul(&a[1]) + &a[2]).tanh();
            let logits = hidden.matmul(&a[3]);
            let loss = logits.integer_pow(2).sum(&[0, 1]) / 32.0;
            vec![logits, loss]
        },
    )
    .unwrap()
}

fn values(shape: &[i64], seed: f64) -> Array {
    let n: i64 = shape.iter().product();
    Array::new(
        DType::F32,
        shape,
        (0..n)
            .map(|i| ((i as f64 * 0.37 + seed).sin()) * 0.5)
            .collect(),
    )
    .unwrap()
}

fn sharding(mesh: &Mesh, spec: &str) -> NamedSharding {
    NamedSharding::new(mesh, PartitionSpec::parse(spec).unwrap()).unwrap()
}

#[test]
fn a_data_and_tensor_parallel_mlp_matches_the_interpreter_on_eight_devices() {
    let shardy = mlp_on_eight_devices(Partitioner::Shardy);
    expect![[r#"
        module @jit_main attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
          "sdy.mesh"() {mesh = #sdy.mesh<["data"=2, "model"=4]>, sym_name = "mesh"} : () -> ()
          func.func public @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg1: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg2: tensor<32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}]>}, %arg3: tensor<32x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}) -> (tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, tensor<f32> {sdy.sharding = #sdy.sharding<@mesh, []>}) {"#]]
    .assert_eq(&shardy);
    let gspmd = mlp_on_eight_devices(Partitioner::Gspmd);
    expect![[r#"
        module @jit_main attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
          func.func public @main(%arg0: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"}, %arg1: tensor<16x32xf32> {mhlo.sharding = "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}"}, %arg2: tensor<32xf32> {mhlo.sharding = "{devices=[4,2]<=[2,4]T(1,0) last_tile_dim_replicate}"}, %arg3: tensor<32x4xf32> {mhlo.sharding = "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}"}) -> (tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"}, tensor<f32> {mhlo.sharding = "{replicated}"}) {"#]]
    .assert_eq(&gspmd);
}

/// Lowers, compiles and runs the MLP for `partitioner`; returns the module's lines that carry
/// shardings (module attributes, meshes, the entry's signature).
fn mlp_on_eight_devices(partitioner: Partitioner) -> String {
    let client = Client::cpu(8).unwrap();
    let mesh = Mesh::auto(&[("data", 2), ("model", 4)]).unwrap();
    let ins = vec![
        sharding(&mesh, "P('data', None)"),
        sharding(&mesh, "P(None, 'model')"),
        sharding(&mesh, "P('model')"),
        sharding(&mesh, "P('model', None)"),
    ];
    let outs = vec![sharding(&mesh, "P('data', None)"), sharding(&mesh, "P()")];
    let program = mlp();
    let jit = Jit::new(program.clone(), ins.clone(), outs)
        .unwrap()
        .with_partitioner(partitioner);
    let lowered = jit.lower().unwrap();
    let signature: String = lowered
        .as_text()
        .lines()
        .filter(|l| l.contains("mhlo.") || l.contains("sdy."))
        .collect::<Vec<_>>()
        .join("\n");
    let compiled = lowered.compile(&client).unwrap();
    let host: Vec<Array> = [vec![8, 16], vec![16, 32], vec![32], vec![32, 4]]
        .iter()
        .enumerate()
        .map(|(i, s)| values(s, i as f64))
        .collect();
    let args: Vec<DeviceArray> = host
        .iter()
        .zip(&ins)
        .map(|(a, s)| DeviceArray::device_put(&client, &to_host(a).unwrap(), s).unwrap())
        .collect();
    let got = compiled.call(&args.iter().collect::<Vec<_>>()).unwrap();
    let want = eval_closed(&program, &host).unwrap();
    for (g, w) in got.iter().zip(&want) {
        let g = from_host(&g.to_host().unwrap(), DType::F32).unwrap();
        for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                "{a} vs interpreter {b}"
            );
        }
    }
    let logits_shards = got[0].addressable_shards().unwrap();
    assert_eq!(
        logits_shards[5].block,
        [(4, 8), (0, 4)],
        "device 5 holds the second half of the batch"
    );
    signature
}

#[test]
fn executables_are_cached_and_layout_mismatches_are_refused() {
    let client = Client::cpu(8).unwrap();
    let mesh = Mesh::auto(&[("data", 2), ("model", 4)]).unwrap();
    let replicated = |n: usize| vec![sharding(&mesh, "P()"); n];
    let jit = Jit::new(mlp(), replicated(4), replicated(2)).unwrap();
    let cache = JitCache::default();
    let first = cache.get_or_compile(&client, &jit).unwrap();
    let again = cache.get_or_compile(&client, &jit).unwrap();
    assert!(std::sync::Arc::ptr_eq(&first, &again));
    assert_eq!(cache.len(), 1);
    let x = DeviceArray::device_put(
        &client,
        &to_host(&values(&[8, 16], 0.0)).unwrap(),
        &sharding(&mesh, "P('data', None)"),
    )
    .unwrap();
    let rest: Vec<DeviceArray> = [vec![16, 32], vec![32], vec![32, 4]]
        .iter()
        .map(|s| {
            DeviceArray::device_put(
                &client,
                &to_host(&values(s, 1.0)).unwrap(),
                &sharding(&mesh, "P()"),
            )
            .unwrap()
        })
        .collect();
    let args: Vec<&DeviceArray> = std::iter::once(&x).chain(rest.iter()).collect();
    let err = first.call(&args).err().unwrap().to_string();
    assert!(
        err.contains("P('data', None)") && err.contains("P()") && err.contains("reshard"),
        "{err}"
    );
    assert!(Jit::new(mlp(), replicated(3), replicated(2)).is_err());
}

/// `P('x')` on meshes `x:2,y:4` and `x:4,y:2` over the same eight devices lays data out
/// differently: the cache keeps two executables, each gives the right values on arrays laid out
/// for its own mesh, and refuses an array laid out for the other one.
#[test]
fn meshes_of_other_axis_sizes_get_their_own_executables() {
    let client = Client::cpu(8).unwrap();
    let program = trace(&[ShapedArray::new(DType::F32, &[8, 4])], |a| {
        vec![(&a[0] * 2.0 + 1.0).tanh()]
    })
    .unwrap();
    let host = values(&[8, 4], 0.5);
    let want = eval_closed(&program, std::slice::from_ref(&host)).unwrap();
    let cache = JitCache::default();
    let meshes = [
        Mesh::auto(&[("x", 2), ("y", 4)]).unwrap(),
        Mesh::auto(&[("x", 4), ("y", 2)]).unwrap(),
    ];
    let mut compiled = Vec::new();
    let mut arrays = Vec::new();
    for mesh in &meshes {
        let s = sharding(mesh, "P('x')");
        let jit = Jit::new(program.clone(), vec![s.clone()], vec![s.clone()]).unwrap();
        let exe = cache.get_or_compile(&client, &jit).unwrap();
        let x = DeviceArray::device_put(&client, &to_host(&host).unwrap(), &s).unwrap();
        let out = exe.call(&[&x]).unwrap();
        assert_eq!(out[0].sharding(), &s);
        let got = from_host(&out[0].to_host().unwrap(), DType::F32).unwrap();
        for (g, w) in got.to_vec().iter().zip(want[0].to_vec()) {
            assert!((g - w).abs() < 1e-6, "{g} vs {w}");
        }
        compiled.push(exe);
        arrays.push(x);
    }
    assert_eq!(cache.len(), 2, "one executable per mesh");
    assert!(!std::sync::Arc::ptr_eq(&compiled[0], &compiled[1]));
    let err = compiled[0].call(&[&arrays[1]]).err().unwrap().to_string();
    assert!(
        err.contains("x:4") && err.contains("x:2") && err.contains("reshard"),
        "{err}"
    );
}

/// Two programs that print the same but close over different constants get two executables.
#[test]
fn programs_differing_only_in_constants_get_their_own_executables() {
    let client = Client::cpu(8).unwrap();
    let mesh = Mesh::auto(&[("x", 8)]).unwrap();
    let s = sharding(&mesh, "P('x')");
    let text = "{ lambda c:f32[8]; a:f32[8]. let b:f32[8] = add a c in (b,) }";
    let cache = JitCache::default();
    let x = DeviceArray::device_put(&client, &to_host(&values(&[8], 0.0)).unwrap(), &s).unwrap();
    for k in 1..=2 {
        let c = Array::new(DType::F32, &[8], vec![f64::from(k); 8]).unwrap();
        let program =
            tessera_ir::text::parse_closed_with_consts(text, std::slice::from_ref(&c)).unwrap();
        let jit = Jit::new(program.clone(), vec![s.clone()], vec![s.clone()]).unwrap();
        let out = cache
            .get_or_compile(&client, &jit)
            .unwrap()
            .call(&[&x])
            .unwrap();
        let got = from_host(&out[0].to_host().unwrap(), DType::F32).unwrap();
        let want = eval_closed(&program, &[values(&[8], 0.0)]).unwrap();
        assert_eq!(got.to_vec(), want[0].to_vec(), "constant {k}");
    }
    assert_eq!(cache.len(), 2);
}

/// One SGD step of the MLP: `(x, w1, b1, w2) -> (w1', b1', w2', loss)`.
fn mlp_training_step() -> tessera_ir::ClosedJaxpr {
    use tessera_ir::autodiff::value_and_grad;
    use tessera_ir::trace::{Tensor, call_closed};
    let f32 = |s: &[i64]| ShapedArray::new(DType::F32, s);
    let avals = [f32(&[8, 16]), f32(&[16, 32]), f32(&[32]), f32(&[32, 4])];
    let loss = trace(&avals, |a| {
        let hidden = (a[0].matmul(&a[1]) + &a[2]).tanh();
        vec![hidden.matmul(&a[3]).integer_pow(2).mean(&[0, 1])]
    })
    .unwrap();
    let grads = value_and_grad(&loss, &[1, 2, 3]).unwrap();
    trace(&avals, |a| {
        let refs: Vec<&Tensor> = a.iter().collect();
        let out = call_closed(&grads, &refs);
        vec![
            &a[1] - &(&out[1] * 0.1),
            &a[2] - &(&out[2] * 0.1),
            &a[3] - &(&out[3] * 0.1),
            out[0].clone(),
        ]
    })
    .unwrap()
}

#[test]
fn a_data_and_tensor_parallel_training_step_matches_the_interpreter() {
    let client = Client::cpu(8).unwrap();
    let mesh = Mesh::auto(&[("data", 2), ("model", 4)]).unwrap();
    let w = [
        sharding(&mesh, "P(None, 'model')"),
        sharding(&mesh, "P('model')"),
        sharding(&mesh, "P('model', None)"),
    ];
    let mut ins = vec![sharding(&mesh, "P('data', None)")];
    ins.extend(w.iter().cloned());
    let mut outs: Vec<NamedSharding> = w.to_vec();
    outs.push(sharding(&mesh, "P()"));
    let program = mlp_training_step();
    let jit = Jit::new(program.clone(), ins.clone(), outs).unwrap();
    let shardy = jit.clone().with_partitioner(Partitioner::Shardy).lower();
    let main = |text: &str| {
        let lines = text
            .lines()
            .filter(|l| l.contains("func.func public @main"));
        lines.collect::<Vec<_>>().join("\n")
    };
    expect![[r#"  func.func public @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg1: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg2: tensor<32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}]>}, %arg3: tensor<32x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}) -> (tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, tensor<32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}]>}, tensor<32x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}, tensor<f32> {sdy.sharding = #sdy.sharding<@mesh, []>}) {"#]]
    .assert_eq(&main(shardy.unwrap().as_text()));
    let lowered = jit.with_partitioner(Partitioner::Gspmd).lower().unwrap();
    let shardings = [main(lowered.as_text())];
    expect![[r#"  func.func public @main(%arg0: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"}, %arg1: tensor<16x32xf32> {mhlo.sharding = "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}"}, %arg2: tensor<32xf32> {mhlo.sharding = "{devices=[4,2]<=[2,4]T(1,0) last_tile_dim_replicate}"}, %arg3: tensor<32x4xf32> {mhlo.sharding = "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}"}) -> (tensor<16x32xf32> {mhlo.sharding = "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}"}, tensor<32xf32> {mhlo.sharding = "{devices=[4,2]<=[2,4]T(1,0) last_tile_dim_replicate}"}, tensor<32x4xf32> {mhlo.sharding = "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}"}, tensor<f32> {mhlo.sharding = "{replicated}"}) {"#]]
    .assert_eq(&shardings.join("\n"));
    let compiled = lowered.compile(&client).unwrap();
    let mut host: Vec<Array> = [vec![8, 16], vec![16, 32], vec![32], vec![32, 4]]
        .iter()
        .enumerate()
        .map(|(i, s)| values(s, i as f64))
        .collect();
    let mut device: Vec<DeviceArray> = host
        .iter()
        .zip(&ins)
        .map(|(a, s)| DeviceArray::device_put(&client, &to_host(a).unwrap(), s).unwrap())
        .collect();
    let mut losses = Vec::new();
    for _ in 0..3 {
        let want = eval_closed(&program, &host).unwrap();
        let got = compiled.call(&device.iter().collect::<Vec<_>>()).unwrap();
        for (g, w) in got.iter().zip(&want) {
            let g = from_host(&g.to_host().unwrap(), DType::F32).unwrap();
            for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
                assert!(
                    (a - b).abs() <= 1e-4 * b.abs().max(1e-2),
                    "{a} vs interpreter {b}"
                );
            }
        }
        losses.push(want[3].to_vec()[0]);
        host.splice(1.., want[..3].iter().cloned());
        let mut next = got;
        next.pop();
        device.truncate(1);
        device.extend(next);
    }
    assert!(losses[2] < losses[0], "the loss falls: {losses:?}");
}

/// `with_sharding` constraints inside a program whose arguments and results are replicated: the
/// lowering carries each as an `sdy.sharding_constraint` (Shardy) or a `@Sharding` custom call
/// (GSPMD), XLA partitions the work as they say (the optimized module computes `tanh` on a
/// quarter of the rows per device), the values equal the interpreter's, and the output sharding
/// read back from the executable is the one asked for.
#[test]
fn sharding_constraints_partition_the_work_xla_compiles() {
    let shardy = constrained_tanh(Partitioner::Shardy);
    expect![[r##"
        [
            "#sdy.sharding<@mesh, [{\"data\"}, {}]>",
            "#sdy.sharding<@mesh, [{\"data\"}, {}]>",
            "#sdy.sharding<@mesh, [{}, {}]>",
        ]
    "##]]
    .assert_debug_eq(&shardy);
    let gspmd = constrained_tanh(Partitioner::Gspmd);
    expect![[r#"
        [
            "{devices=[4,1,2]<=[8] last_tile_dim_replicate}",
            "{devices=[4,1,2]<=[8] last_tile_dim_replicate}",
            "{replicated}",
        ]
    "#]]
    .assert_debug_eq(&gspmd);
}

/// Lowers, compiles, checks and runs the constrained `tanh` for `partitioner`; returns the
/// constraints' shardings as the module spells them.
fn constrained_tanh(partitioner: Partitioner) -> Vec<String> {
    use tessera_ir::trace::use_mesh;
    let client = Client::cpu(8).unwrap();
    let mesh = Mesh::auto(&[("data", 4), ("model", 2)]).unwrap();
    let f32 = |s: &[i64]| ShapedArray::new(DType::F32, s);
    let rows = PartitionSpec::parse("P('data', None)").unwrap();
    let program = use_mesh(mesh.abstract_mesh(), || {
        trace(&[f32(&[8, 16])], |a| {
            let x = a[0].with_sharding(&rows);
            let y = x.tanh().with_sharding(&rows);
            vec![y.with_sharding(&PartitionSpec::replicated())]
        })
    })
    .unwrap();
    let replicated = sharding(&mesh, "P()");
    let jit = Jit::new(
        program.clone(),
        vec![replicated.clone()],
        vec![replicated.clone()],
    )
    .unwrap()
    .with_partitioner(partitioner);
    let lowered = jit.lower().unwrap();
    let calls: Vec<String> = lowered
        .as_text()
        .lines()
        .filter_map(|l| match partitioner {
            Partitioner::Shardy => l
                .contains("\"sdy.sharding_constraint\"")
                .then(|| l.split("{sharding = ").nth(1)?.split("} : ").next())
                .flatten(),
            Partitioner::Gspmd => l
                .contains("call_target_name = \"Sharding\"")
                .then(|| l.split("mhlo.sharding = \"").nth(1)?.split('"').next())
                .flatten(),
        })
        .map(str::to_string)
        .collect();
    let compiled = lowered.compile(&client).unwrap();
    let optimized = compiled.optimized_program().unwrap();
    let tanh: Vec<&[i64]> = optimized
        .instructions()
        .into_iter()
        .filter(|(op, _)| *op == "tanh")
        .map(|(_, dims)| dims)
        .collect();
    assert_eq!(
        tanh,
        [[2, 16]],
        "one tanh on a quarter of the rows per device"
    );
    assert_eq!(
        compiled.compiled_output_shardings().unwrap(),
        std::slice::from_ref(&replicated)
    );
    let x = values(&[8, 16], 0.5);
    let arg = DeviceArray::device_put(&client, &to_host(&x).unwrap(), &replicated).unwrap();
    let got = compiled.call(&[&arg]).unwrap();
    let got = from_host(&got[0].to_host().unwrap(), DType::F32).unwrap();
    let want = eval_closed(&program, &[x]).unwrap();
    for (a, b) in got.to_vec().iter().zip(want[0].to_vec()) {
        assert!((a - b).abs() <= 1e-6, "{a} vs interpreter {b}");
    }
    calls
}

/// `with_sharding_constraint(sin(x), P('data', P.UNCONSTRAINED)) * 2` as JAX prints it.
const UNCONSTRAINED: &str = "{ lambda ; a:f32[8,4]. let
    b:f32[8,4] = sin a
    c:f32[8,4] = sharding_constraint[
      context_mesh=Mesh()
      layout=None
      sharding=NamedSharding(mesh=Mesh('data': 4, 'model': 2, axis_types=(Auto, Auto)), spec=P('data', UNCONSTRAINED), memory_kind=device)
      unconstrained_dims=frozenset({1})
    ] b
    d:f32[8,4] = mul c 2.0:f32[]
  in (d,) }";

#[test]
fn an_unconstrained_dimension_lowers_open_under_both_partitioners_and_runs() {
    let client = Client::cpu(8).unwrap();
    let program = tessera_ir::text::parse_closed(UNCONSTRAINED).unwrap();
    let vjp = tessera_ir::vjp(&program).unwrap();
    let mesh = Mesh::auto(&[("data", 4), ("model", 2)]).unwrap();
    for (partitioner, open) in [
        (Partitioner::Shardy, r#"[{"data"}, {?}]"#),
        (Partitioner::Gspmd, "unspecified_dims=[1]"),
    ] {
        for (p, inputs) in [
            (&program, vec![values(&[8, 4], 0.0)]),
            (&vjp, vec![values(&[8, 4], 0.0), values(&[8, 4], 1.0)]),
        ] {
            let replicated = |n: usize| vec![sharding(&mesh, "P()"); n];
            let jit = Jit::new(
                p.clone(),
                replicated(p.jaxpr.invars.len()),
                replicated(p.jaxpr.outvars.len()),
            )
            .unwrap()
            .with_partitioner(partitioner);
            let lowered = jit.lower().unwrap();
            assert!(lowered.as_text().contains(open), "{}", lowered.as_text());
            let compiled = lowered.compile(&client).unwrap();
            let args: Vec<DeviceArray> = inputs
                .iter()
                .map(|a| {
                    let s = sharding(&mesh, "P()");
                    DeviceArray::device_put(&client, &to_host(a).unwrap(), &s).unwrap()
                })
                .collect();
            let got = compiled.call(&args.iter().collect::<Vec<_>>()).unwrap();
            let want = eval_closed(p, &inputs).unwrap();
            for (g, w) in got.iter().zip(&want) {
                let g = from_host(&g.to_host().unwrap(), DType::F32).unwrap();
                for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
                    assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
                }
            }
        }
    }
}

/// A `reshard` (explicit sharding) in a jitted program whose argument and result are
/// replicated: it lowers as a sharding constraint to its destination (under each partitioner),
/// so XLA computes the `tanh` after it on one block of `P('pp', 'tp')` per device, and the
/// values equal the interpreter's.
#[test]
fn reshard_lowers_as_a_sharding_constraint_and_runs_equal_to_the_interpreter() {
    use tessera_ir::trace::use_mesh;
    let client = Client::cpu(8).unwrap();
    let mesh = Mesh::auto(&[("pp", 2), ("tp", 4)]).unwrap();
    let program = use_mesh(mesh.abstract_mesh(), || {
        trace(&[ShapedArray::new(DType::F32, &[8, 4])], |a| {
            let x = a[0].reshard(&PartitionSpec::parse("P('pp', 'tp')").unwrap());
            vec![x.tanh()]
        })
    })
    .unwrap();
    let replicated = sharding(&mesh, "P()");
    let x = values(&[8, 4], 0.25);
    let want = eval_closed(&program, std::slice::from_ref(&x)).unwrap();
    for partitioner in [Partitioner::Shardy, Partitioner::Gspmd] {
        let jit = Jit::new(
            program.clone(),
            vec![replicated.clone()],
            vec![replicated.clone()],
        )
        .unwrap()
        .with_partitioner(partitioner);
        let lowered = jit.lower().unwrap();
        let text = lowered.as_text();
        let marker = match partitioner {
            Partitioner::Shardy => "\"sdy.sharding_constraint\"",
            Partitioner::Gspmd => "call_target_name = \"Sharding\"",
        };
        assert_eq!(text.matches(marker).count(), 1, "{partitioner:?}: {text}");
        let compiled = lowered.compile(&client).unwrap();
        let optimized = compiled.optimized_program().unwrap();
        let tanh: Vec<&[i64]> = optimized
            .instructions()
            .into_iter()
            .filter(|(op, _)| *op == "tanh")
            .map(|(_, dims)| dims)
            .collect();
        assert_eq!(
            tanh,
            [[4, 1]],
            "{partitioner:?}: one tanh on a block per device"
        );
        let arg = DeviceArray::device_put(&client, &to_host(&x).unwrap(), &replicated).unwrap();
        let got = compiled.call(&[&arg]).unwrap();
        let got = from_host(&got[0].to_host().unwrap(), DType::F32).unwrap();
        for (a, b) in got.to_vec().iter().zip(want[0].to_vec()) {
            assert!(
                (a - b).abs() <= 1e-6,
                "{partitioner:?}: {a} vs interpreter {b}"
            );
        }
    }
}

/// JAX's `vmap(f, spmd_axis_name='data')` of `f(x) = tanh(with_sharding_constraint(x,
/// P('model')))`: the batched constraint is `P('data', 'model')`, so XLA runs one `tanh` on a
/// quarter of the batch and half of each row per device, equal to the interpreter.
#[test]
fn vmap_with_an_spmd_axis_splits_the_batch_over_it_on_eight_devices() {
    use tessera_ir::trace::use_mesh;
    let client = Client::cpu(8).unwrap();
    let mesh = Mesh::auto(&[("data", 4), ("model", 2)]).unwrap();
    let element = use_mesh(mesh.abstract_mesh(), || {
        trace(&[ShapedArray::new(DType::F32, &[16])], |a| {
            let cols = PartitionSpec::parse("P('model')").unwrap();
            vec![a[0].with_sharding(&cols).tanh()]
        })
    })
    .unwrap();
    let program = tessera_ir::vmap_spmd(&element, &[Some(0)], &[0], 8, &["data"]).unwrap();
    let replicated = sharding(&mesh, "P()");
    let jit = Jit::new(
        program.clone(),
        vec![replicated.clone()],
        vec![replicated.clone()],
    )
    .unwrap();
    let lowered = jit.lower().unwrap();
    assert!(
        lowered
            .as_text()
            .contains("#sdy.sharding<@mesh, [{\"data\"}, {\"model\"}]>"),
        "{}",
        lowered.as_text()
    );
    let compiled = lowered.compile(&client).unwrap();
    let optimized = compiled.optimized_program().unwrap();
    let tanh: Vec<&[i64]> = optimized
        .instructions()
        .into_iter()
        .filter(|(op, _)| *op == "tanh")
        .map(|(_, dims)| dims)
        .collect();
    assert_eq!(tanh, [[2, 8]], "one tanh on a 2x8 block per device");
    let x = values(&[8, 16], 0.25);
    let arg = DeviceArray::device_put(&client, &to_host(&x).unwrap(), &replicated).unwrap();
    let got = compiled.call(&[&arg]).unwrap();
    let got = from_host(&got[0].to_host().unwrap(), DType::F32).unwrap();
    let want = eval_closed(&program, &[x]).unwrap();
    for (a, b) in got.to_vec().iter().zip(want[0].to_vec()) {
        assert!((a - b).abs() <= 1e-6, "{a} vs interpreter {b}");
    }
}
