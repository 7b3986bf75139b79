//! The JAX collectives oracle: every `shard_map` case evaluates to JAX's output and gradient on
//! the SPMD interpreter, with JAX's replica groups; the CLI reports the same.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_stablehlo::Partitioner;
use tessera_tests::{assert_all_pass, shared_dir, tessera_last_line};

fn oracle() -> std::path::PathBuf {
    shared_dir().join("oracle").join("collectives_cases.json")
}

#[test]
fn every_collective_case_matches_jax_with_gradients_on_the_interpreter() {
    let interp = |program: &tessera_ir::ClosedJaxpr, inputs: &[tessera_ir::Array]| {
        tessera_ir::interp::eval_closed(program, inputs).map_err(|e| e.to_string())
    };
    let report = tessera_ir::oracle_collectives::run_file(&oracle(), &interp, true).unwrap();
    assert_all_pass(&report, 40);
}

#[test]
fn the_cli_prints_the_collectives_summary_line() {
    let path = oracle();
    let line = tessera_last_line(&[
        "oracle".as_ref(),
        "collectives".as_ref(),
        path.as_os_str(),
        "--grads".as_ref(),
    ]);
    assert_eq!(line, "40 passed, 0 failed");
}

#[test]
fn every_collective_case_matches_jax_with_gradients_on_eight_pjrt_devices() {
    let client = tessera_pjrt::Client::cpu(8).unwrap();
    let pjrt = |program: &tessera_ir::ClosedJaxpr, inputs: &[tessera_ir::Array]| {
        tessera::jit::run_spmd(&client, program, inputs).map_err(|e| e.to_string())
    };
    let report = tessera_ir::oracle_collectives::run_file(&oracle(), &pjrt, true).unwrap();
    assert_all_pass(&report, 40);
}

#[test]
fn a_shard_map_lowers_to_manual_blocks_and_jaxs_collective_ops() {
    use tessera_sharding::{AbstractMesh, Mesh, NamedSharding, PartitionSpec};
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 4)]).unwrap();
    let spec = PartitionSpec::parse("P(('x', 'y'))").unwrap();
    let aval = tessera_ir::ShapedArray::new(tessera_ir::DType::F32, &[16, 4]);
    let program = tessera_ir::trace::shard_map_program(
        &mesh,
        std::slice::from_ref(&spec),
        std::slice::from_ref(&spec),
        &[aval],
        |a| vec![a[0].psum(&["y"]).ppermute("x", &[(0, 1), (1, 0)])],
    )
    .unwrap();
    let concrete = Mesh::iota(mesh);
    let replicated = NamedSharding::new(&concrete, PartitionSpec::replicated()).unwrap();
    let jit = tessera::jit::Jit::new(program, vec![replicated.clone()], vec![replicated]).unwrap();
    let ops = |partitioner: Partitioner| {
        let lowered = jit.clone().with_partitioner(partitioner).lower().unwrap();
        let lines: Vec<String> = lowered
            .as_text()
            .lines()
            .map(str::trim)
            .filter(|l| {
                ["custom_call", "all_reduce", "collective_permute", "sdy."]
                    .iter()
                    .any(|op| l.contains(op))
            })
            .map(str::to_string)
            .collect();
        lines.join("\n")
    };
    expect_test::expect![[r#"
        "sdy.mesh"() {mesh = #sdy.mesh<["x"=2, "y"=4]>, sym_name = "mesh"} : () -> ()
        func.func public @main(%arg0: tensor<16x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) -> (tensor<16x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
        %0 = "sdy.manual_computation"(%arg0) ({
        %1 = "stablehlo.all_reduce"(%arg1) ({
        %2 = "stablehlo.collective_permute"(%1) {channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 4], [4, 0], [1, 5], [5, 1], [2, 6], [6, 2], [3, 7], [7, 3]]> : tensor<8x2xi64>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
        "sdy.return"(%2) : (tensor<2x4xf32>) -> ()
        }) {in_shardings = #sdy.sharding_per_value<[<@mesh, [{"x", "y"}, {}]>]>, manual_axes = #sdy<manual_axes{"x", "y"}>, out_shardings = #sdy.sharding_per_value<[<@mesh, [{"x", "y"}, {}]>]>} : (tensor<16x4xf32>) -> tensor<16x4xf32>"#]]
    .assert_eq(&ops(Partitioner::Shardy));
    expect_test::expect![[r#"
        %0 = "stablehlo.custom_call"(%arg0) {call_target_name = "Sharding", mhlo.sharding = "{devices=[8,1]<=[8]}"} : (tensor<16x4xf32>) -> tensor<16x4xf32>
        %1 = "stablehlo.custom_call"(%0) {call_target_name = "SPMDFullToShardShape", mhlo.sharding = "{manual}"} : (tensor<16x4xf32>) -> tensor<2x4xf32>
        %2 = "stablehlo.all_reduce"(%1) ({
        %3 = "stablehlo.collective_permute"(%2) {channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 4], [4, 0], [1, 5], [5, 1], [2, 6], [6, 2], [3, 7], [7, 3]]> : tensor<8x2xi64>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
        %4 = "stablehlo.custom_call"(%3) {call_target_name = "Sharding", mhlo.sharding = "{manual}"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
        %5 = "stablehlo.custom_call"(%4) {call_target_name = "SPMDShardToFullShape", mhlo.sharding = "{devices=[8,1]<=[8]}"} : (tensor<2x4xf32>) -> tensor<16x4xf32>"#]]
    .assert_eq(&ops(Partitioner::Gspmd));
}

#[test]
fn a_pbroadcast_within_index_groups_broadcasts_each_groups_source_on_pjrt() {
    use tessera_ir::text::{parse_closed, print_closed};
    use tessera_ir::{Array, DType, ShapedArray};
    use tessera_sharding::{AbstractMesh, PartitionSpec};
    // The tracing API has no groups for pbroadcast (JAX neither); a parsed one may carry them,
    // and each group then takes its own member `source`, on devices as on the interpreter.
    let mesh = AbstractMesh::auto(&[("x", 4)]).unwrap();
    let spec = PartitionSpec::parse("P('x')").unwrap();
    let program = tessera_ir::trace::shard_map_program(
        &mesh,
        std::slice::from_ref(&spec),
        std::slice::from_ref(&spec),
        &[ShapedArray::new(DType::F32, &[4])],
        |a| vec![a[0].pbroadcast("x", 1)],
    )
    .unwrap();
    let text = print_closed(&program, 0).replace(
        "source=1",
        "axis_index_groups=((0, 3), (2, 1))\n            source=1",
    );
    let program = parse_closed(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let x = Array::new(DType::F32, &[4], vec![10.0, 20.0, 30.0, 40.0]).unwrap();
    let want = vec![40.0, 20.0, 20.0, 40.0];
    let interp = tessera_ir::interp::eval_closed(&program, std::slice::from_ref(&x)).unwrap();
    assert_eq!(
        interp[0].to_vec(),
        want,
        "the group (0, 3) takes 3's value, (2, 1) 1's"
    );
    let client = tessera_pjrt::Client::cpu(4).unwrap();
    let got = tessera::jit::run_spmd(&client, &program, &[x]).unwrap();
    assert_eq!(got[0].to_vec(), want, "{text}");
}

#[test]
fn a_ppermute_over_axes_named_out_of_mesh_order_numbers_devices_as_jax_lowers_it() {
    use tessera_ir::{Array, DType, ShapedArray};
    use tessera_sharding::{AbstractMesh, PartitionSpec};
    // JAX's lowering numbers a ppermute's group members in device order (it sorts each replica
    // group), whatever order the axes are named in; the interpreter must agree with devices.
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 2)]).unwrap();
    let spec = PartitionSpec::parse("P(('x', 'y'))").unwrap();
    let cycle = [(0, 1), (1, 2), (2, 3), (3, 0)];
    let program = tessera_ir::trace::shard_map_program(
        &mesh,
        std::slice::from_ref(&spec),
        std::slice::from_ref(&spec),
        &[ShapedArray::new(DType::F32, &[4])],
        |a| vec![a[0].ppermute_over(&["y", "x"], &cycle)],
    )
    .unwrap();
    let x = Array::new(DType::F32, &[4], vec![10.0, 20.0, 30.0, 40.0]).unwrap();
    let want = vec![40.0, 10.0, 20.0, 30.0];
    let interp = tessera_ir::interp::eval_closed(&program, std::slice::from_ref(&x)).unwrap();
    assert_eq!(interp[0].to_vec(), want, "interpreter");
    let client = tessera_pjrt::Client::cpu(4).unwrap();
    let got = tessera::jit::run_spmd(&client, &program, &[x]).unwrap();
    assert_eq!(got[0].to_vec(), want, "devices");
}

#[test]
fn pshuffle_and_pswapaxes_run_on_pjrt_as_on_the_interpreter() {
    use tessera_ir::{Array, DType, ShapedArray};
    use tessera_sharding::{AbstractMesh, PartitionSpec};
    let mesh = AbstractMesh::auto(&[("x", 4)]).unwrap();
    let spec = PartitionSpec::parse("P('x')").unwrap();
    let program = tessera_ir::trace::shard_map_program(
        &mesh,
        std::slice::from_ref(&spec),
        &[spec.clone(), spec.clone()],
        &[ShapedArray::new(DType::F32, &[4, 4])],
        |a| vec![a[0].pshuffle("x", &[3, 2, 0, 1]), a[0].pswapaxes("x", 1)],
    )
    .unwrap();
    let x = Array::new(DType::F32, &[4, 4], (0..16).map(f64::from).collect()).unwrap();
    let client = tessera_pjrt::Client::cpu(4).unwrap();
    let got = tessera::jit::run_spmd(&client, &program, std::slice::from_ref(&x)).unwrap();
    let interp = tessera_ir::interp::eval_closed(&program, &[x]).unwrap();
    // Device i holds row i; pshuffle gives it row perm[i]; pswapaxes gives it column i.
    let rows: Vec<f64> = [3, 2, 0, 1]
        .iter()
        .flat_map(|&r| (0..4).map(move |c| f64::from(r * 4 + c)))
        .collect();
    let columns: Vec<f64> = (0..4)
        .flat_map(|c| (0..4).map(move |r| f64::from(r * 4 + c)))
        .collect();
    assert_eq!(got[0].to_vec(), rows);
    assert_eq!(got[1].to_vec(), columns);
    assert_eq!(interp[0].to_vec(), rows);
    assert_eq!(interp[1].to_vec(), columns);
}

#[test]
fn grouped_reductions_and_an_index_over_several_axes_run_on_pjrt_as_on_the_interpreter() {
    use tessera_ir::trace::Tensor;
    use tessera_ir::{Array, DType, ShapedArray};
    use tessera_sharding::{AbstractMesh, PartitionSpec};
    let groups = vec![vec![0, 3], vec![1, 2]];
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 2)]).unwrap();
    let spec = PartitionSpec::parse("P(('x', 'y'))").unwrap();
    let program = tessera_ir::trace::shard_map_program(
        &mesh,
        std::slice::from_ref(&spec),
        &vec![spec.clone(); 5],
        &[ShapedArray::new(DType::F32, &[4])],
        |a| {
            let xy = ["x", "y"];
            // Out of mesh order: y is the slow axis here.
            let yx = Tensor::axis_index_over(&a[0], &["y", "x"]).astype(DType::F32);
            vec![
                a[0].psum_in_groups(&xy, &groups),
                a[0].pmax_in_groups(&xy, &groups),
                a[0].pmean_in_groups(&xy, &groups),
                yx.broadcast_to(&[1]),
                a[0].pbroadcast_over(&xy, 2),
            ]
        },
    )
    .unwrap();
    let x = Array::new(DType::F32, &[4], vec![1.0, 5.0, 2.0, 7.0]).unwrap();
    let client = tessera_pjrt::Client::cpu(4).unwrap();
    let got = tessera::jit::run_spmd(&client, &program, std::slice::from_ref(&x)).unwrap();
    let interp = tessera_ir::interp::eval_closed(&program, &[x]).unwrap();
    let want: [Vec<f64>; 5] = [
        vec![8.0, 7.0, 7.0, 8.0],
        vec![7.0, 5.0, 5.0, 7.0],
        vec![4.0, 3.5, 3.5, 4.0],
        // Device (x, y) has index y * 2 + x.
        vec![0.0, 2.0, 1.0, 3.0],
        vec![2.0; 4],
    ];
    for (k, want) in want.iter().enumerate() {
        assert_eq!(&got[k].to_vec(), want, "result {k} on PJRT");
        assert_eq!(&interp[k].to_vec(), want, "result {k} on the interpreter");
    }
}

#[test]
fn a_pmap_over_dimension_1_with_a_whole_argument_and_its_gradient_run_on_pjrt() {
    use tessera_ir::trace::{PmapAxes, pmap_with, trace};
    use tessera_ir::{Array, DType, ShapedArray};
    let axes = PmapAxes {
        in_axes: vec![Some(1), None],
        out_axes: vec![Some(1), None],
        axis_size: None,
    };
    let avals = [
        ShapedArray::new(DType::F32, &[2, 4, 3]),
        ShapedArray::new(DType::F32, &[3]),
    ];
    let program = trace(&avals, |a| {
        pmap_with("i", &[&a[0], &a[1]], &axes, |s| {
            let y = (&s[0] * &s[1]).tanh();
            vec![y.clone(), y.sum(&[0, 1]).psum(&["i"])]
        })
    })
    .unwrap();
    let x = Array::new(
        DType::F32,
        &[2, 4, 3],
        (0..24).map(|v| f64::from(v) * 0.1).collect(),
    )
    .unwrap();
    let w = Array::new(DType::F32, &[3], vec![0.5, -0.25, 1.0]).unwrap();
    let client = tessera_pjrt::Client::cpu(4).unwrap();
    let args = [x, w];
    let got = tessera::jit::run_spmd(&client, &program, &args).unwrap();
    let interp = tessera_ir::interp::eval_closed(&program, &args).unwrap();
    let close = |a: &Array, b: &Array| {
        a.shape() == b.shape()
            && a.to_vec()
                .iter()
                .zip(b.to_vec())
                .all(|(p, q)| (p - q).abs() <= 1e-5 * (1.0 + q.abs()))
    };
    assert!(close(&got[0], &interp[0]) && close(&got[1], &interp[1]));
    // The gradient of the summed result, on PJRT and on the interpreter.
    let loss = trace(&avals, |a| {
        pmap_with(
            "i",
            &[&a[0], &a[1]],
            &PmapAxes {
                out_axes: vec![None],
                ..axes.clone()
            },
            |s| vec![(&s[0] * &s[1]).tanh().sum(&[0, 1]).psum(&["i"])],
        )
    })
    .unwrap();
    let grad = tessera_ir::autodiff::value_and_grad(&loss, &[0, 1]).unwrap();
    let got = tessera::jit::run_spmd(&client, &grad, &args).unwrap();
    let interp = tessera_ir::interp::eval_closed(&grad, &args).unwrap();
    assert_eq!(got.len(), 3);
    assert!((0..3).all(|k| close(&got[k], &interp[k])));
}

#[test]
fn a_ragged_all_to_all_on_the_pjrt_cpu_plugin_runs_or_fails_with_an_error_not_a_crash() {
    use tessera_ir::{Array, DType};
    use tessera_sharding::{AbstractMesh, PartitionSpec};
    // JAX's two-device example: device 0 sends [1] to 0 and [2, 2] to 1, device 1 sends [3] to
    // 0 and [4] to 1. The interpreter runs it. XLA reads the `ragged_all_to_all` custom call as
    // its `ragged-all-to-all` op, which its CPU backend does not implement (2026-06 plugin):
    // compiling must then fail with an error naming the op, not abort.
    let xs = [
        (DType::F32, vec![1., 2., 2., 3., 4., 0.]),
        (DType::F32, vec![0.; 8]),
        (DType::I32, vec![0., 1., 0., 1.]),
        (DType::I32, vec![1., 2., 1., 1.]),
        (DType::I32, vec![0., 0., 1., 2.]),
        (DType::I32, vec![1., 1., 2., 1.]),
    ]
    .map(|(dtype, v)| Array::new(dtype, &[v.len() as i64], v).unwrap());
    let mesh = AbstractMesh::auto(&[("x", 2)]).unwrap();
    let spec = PartitionSpec::parse("P('x')").unwrap();
    let avals: Vec<_> = xs.iter().map(Array::aval).collect();
    let program = tessera_ir::trace::shard_map_program(
        &mesh,
        &vec![spec.clone(); 6],
        std::slice::from_ref(&spec),
        &avals,
        |a| vec![a[0].ragged_all_to_all(&a[1], &a[2], &a[3], &a[4], &a[5], "x")],
    )
    .unwrap();
    let want = vec![1., 3., 0., 0., 2., 2., 4., 0.];
    let interp = tessera_ir::interp::eval_closed(&program, &xs).unwrap();
    assert_eq!(interp[0].to_vec(), want);
    let client = tessera_pjrt::Client::cpu(2).unwrap();
    match tessera::jit::run_spmd(&client, &program, &xs) {
        Ok(got) => assert_eq!(got[0].to_vec(), want),
        Err(e) => {
            let e = e.to_string();
            assert!(
                e.contains("ragged-all-to-all") && e.contains("not supported"),
                "{e}"
            );
        }
    }
}

#[test]
fn started_then_done_collectives_run_on_eight_pjrt_devices_as_on_the_interpreter() {
    use tessera_ir::trace::Tensor;
    use tessera_ir::{Array, DType, ShapedArray};
    use tessera_sharding::{AbstractMesh, PartitionSpec};
    // A psum and an all_gather started, local work traced while they are pending, then done;
    // with a psum_scatter, an all_to_all, a pbroadcast and a ppermute pair too.
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 4)]).unwrap();
    let spec = PartitionSpec::parse("P('x', 'y')").unwrap();
    let program = tessera_ir::trace::shard_map_program(
        &mesh,
        std::slice::from_ref(&spec),
        &vec![spec.clone(); 3],
        &[ShapedArray::new(DType::F32, &[4, 16])],
        |a| {
            let summed = a[0].psum_start(&["y"]);
            let gathered = a[0].all_gather_start("x", 0, true);
            let local = a[0].sin();
            let summed = summed.done();
            let gathered = Tensor::slice_axis(&gathered.done(), 0, 0, 2);
            let scattered = a[0].psum_scatter_start("y", 1, true).done();
            let swapped = a[0].all_to_all_start("y", 1, 1, true).done();
            let broadcast = a[0].pbroadcast_start("x", 1).done();
            let permuted = a[0]
                .ppermute_start("y", &[(0, 1), (1, 2), (2, 3), (3, 0)])
                .done();
            vec![
                &(&summed * &local) + &gathered,
                &(&swapped + &broadcast) + &permuted,
                scattered.broadcast_to(&[2, 4]),
            ]
        },
    )
    .unwrap();
    tessera_ir::verify(&program).unwrap();
    // The psum, all_gather, psum_scatter, all_to_all and ppermute lower to async_start/done
    // pairs (the pbroadcast, several operations, synchronously): XLA's CPU plugin compiles them.
    let options = tessera_stablehlo::LowerOptions {
        num_partitions: 8,
        ..tessera_stablehlo::LowerOptions::default()
    };
    let text = tessera_stablehlo::lower_closed(&program, &options)
        .unwrap()
        .text;
    assert_eq!(text.matches("stablehlo.async_start").count(), 5, "{text}");
    assert_eq!(text.matches("stablehlo.async_done").count(), 5, "{text}");
    let x = Array::new(
        DType::F32,
        &[4, 16],
        (0..64).map(|v| f64::from(v) / 8.0).collect(),
    )
    .unwrap();
    let client = tessera_pjrt::Client::cpu(8).unwrap();
    let got = tessera::jit::run_spmd(&client, &program, std::slice::from_ref(&x)).unwrap();
    let interp = tessera_ir::interp::eval_closed(&program, std::slice::from_ref(&x)).unwrap();
    for (k, (g, i)) in got.iter().zip(&interp).enumerate() {
        assert_eq!(g.shape(), i.shape(), "result {k}");
        for (a, b) in g.to_vec().iter().zip(i.to_vec()) {
            assert!(
                (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "result {k}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn a_psend_precv_pair_on_the_pjrt_cpu_plugin_fails_with_a_typed_error_not_a_crash() {
    use tessera_ir::trace::precv;
    use tessera_ir::{Array, DType, ShapedArray};
    use tessera_sharding::{AbstractMesh, PartitionSpec};
    // A send around a ring of 4 devices and its receive. The interpreter runs it as the
    // ppermute; JAX lowers send/recv for GPUs only, and XLA's CPU plugin does not implement
    // them: compiling for it fails with its Unimplemented error, typed, not a crash (a plugin
    // that did run them must give the interpreter's values).
    let mesh = AbstractMesh::auto(&[("x", 4)]).unwrap();
    let spec = PartitionSpec::parse("P('x')").unwrap();
    let aval = ShapedArray::new(DType::F32, &[8]);
    let perm = [(0, 1), (1, 2), (2, 3), (3, 0)];
    let program = tessera_ir::trace::shard_map_program(
        &mesh,
        std::slice::from_ref(&spec),
        std::slice::from_ref(&spec),
        std::slice::from_ref(&aval),
        |a| vec![precv(a[0].psend("x", &perm), a[0].aval(), "x", &perm)],
    )
    .unwrap();
    let xs = [Array::new(DType::F32, &[8], (0..8).map(f64::from).collect()).unwrap()];
    let want = vec![6., 7., 0., 1., 2., 3., 4., 5.];
    let interp = tessera_ir::interp::eval_closed(&program, &xs).unwrap();
    assert_eq!(interp[0].to_vec(), want);
    let client = tessera_pjrt::Client::cpu(4).unwrap();
    match tessera::jit::run_spmd(&client, &program, &xs) {
        Ok(got) => assert_eq!(got[0].to_vec(), want),
        // The 2026-06 plugin: `Pjrt(Call { function: "PJRT_Client_Compile", code:
        // Unimplemented, message: "HLO opcode `send` is not supported by XLA:CPU ..." })`.
        Err(e) => {
            let typed = format!("{e:?}");
            assert!(
                typed.starts_with("Pjrt(") && typed.contains("Unimplemented"),
                "{typed}"
            );
            let e = e.to_string();
            assert!(e.contains("`send`") && e.contains("not supported"), "{e}");
        }
    }
}

#[test]
fn a_ppermute_with_no_pairs_gives_zeros_on_pjrt_as_on_the_interpreter() {
    use tessera_ir::{Array, DType, ShapedArray};
    use tessera_sharding::{AbstractMesh, PartitionSpec};
    // JAX allows `perm=[]`: nothing is sent, every device receives zeros. The lowering must
    // give StableHLO an empty `0x2` table of pairs (it once wrote a `0x0` one MLIR refuses).
    let mesh = AbstractMesh::auto(&[("x", 2)]).unwrap();
    let spec = PartitionSpec::parse("P('x')").unwrap();
    let program = tessera_ir::trace::shard_map_program(
        &mesh,
        std::slice::from_ref(&spec),
        std::slice::from_ref(&spec),
        &[ShapedArray::new(DType::F32, &[4])],
        |a| vec![&a[0].ppermute("x", &[]) + &a[0]],
    )
    .unwrap();
    let text = tessera_stablehlo::lower_closed(
        &program,
        &tessera_stablehlo::LowerOptions {
            num_partitions: 2,
            ..tessera_stablehlo::LowerOptions::default()
        },
    )
    .unwrap()
    .text;
    assert!(text.contains("tensor<0x2xi64>"), "{text}");
    let x = Array::new(DType::F32, &[4], vec![1., 2., 3., 4.]).unwrap();
    let client = tessera_pjrt::Client::cpu(2).unwrap();
    let got = tessera::jit::run_spmd(&client, &program, std::slice::from_ref(&x)).unwrap();
    let interp = tessera_ir::interp::eval_closed(&program, std::slice::from_ref(&x)).unwrap();
    assert_eq!(interp[0].to_vec(), vec![1., 2., 3., 4.]);
    assert_eq!(got[0].to_vec(), interp[0].to_vec());
}
