//! What the lowering emits under each partitioner for a `shard_map` with a collective and for
//! entry shardings: Shardy's `sdy.mesh` / `sdy.sharding` / `sdy.manual_computation` (JAX's form,
//! generic operations) and GSPMD's `mhlo.sharding` custom calls, never a mix.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use expect_test::expect;
use tessera_ir::trace::shard_map_program;
use tessera_ir::{ClosedJaxpr, DType, ShapedArray};
use tessera_sharding::{AbstractMesh, Mesh, NamedSharding, PartitionSpec};
use tessera_stablehlo::{LowerOptions, Partitioner, lower_closed};

/// `shard_map(lambda a: psum(a, 'x') * 2, mesh={x: 4, y: 2}, in_specs=P('x', 'y'),
/// out_specs=P(None, 'y'))` on an `8x2` array.
fn psum_program() -> ClosedJaxpr {
    let mesh = AbstractMesh::auto(&[("x", 4), ("y", 2)]).unwrap();
    let spec = |text: &str| PartitionSpec::parse(text).unwrap();
    shard_map_program(
        &mesh,
        &[spec("P('x', 'y')")],
        &[spec("P(None, 'y')")],
        &[ShapedArray::new(DType::F32, &[8, 2])],
        |a| vec![&a[0].psum(&["x"]) * 2.0],
    )
    .unwrap()
}

fn lower(partitioner: Partitioner, entry: Option<&str>) -> String {
    let mesh = Mesh::auto(&[("x", 4), ("y", 2)]).unwrap();
    let sharding =
        entry.map(|spec| NamedSharding::new(&mesh, PartitionSpec::parse(spec).unwrap()).unwrap());
    let options = LowerOptions {
        num_partitions: 8,
        arg_shardings: vec![sharding.clone()],
        result_shardings: vec![sharding],
        partitioner,
        ..LowerOptions::default()
    };
    lower_closed(&psum_program(), &options).unwrap().text
}

#[test]
fn shard_map_is_a_manual_computation_under_shardy() {
    let text = lower(Partitioner::Shardy, Some("P('x')"));
    expect![[r#"
        module @jit_main attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
          "sdy.mesh"() {mesh = #sdy.mesh<["x"=4, "y"=2]>, sym_name = "mesh"} : () -> ()
          func.func public @main(%arg0: tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> (tensor<2x2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) {
            %0 = "sdy.manual_computation"(%arg0) ({
            ^bb0(%arg1: tensor<2x1xf32>):
              %1 = "stablehlo.all_reduce"(%arg1) ({
              ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
                %5 = "stablehlo.add"(%arg2, %arg3) : (tensor<f32>, tensor<f32>) -> tensor<f32>
                "stablehlo.return"(%5) : (tensor<f32>) -> ()
              }) {channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]> : tensor<2x4xi64>, use_global_device_ids} : (tensor<2x1xf32>) -> tensor<2x1xf32>
              %2 = "stablehlo.constant"() {value = dense<2.000000e+00> : tensor<f32>} : () -> tensor<f32>
              %3 = "stablehlo.broadcast_in_dim"(%2) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2x1xf32>
              %4 = "stablehlo.multiply"(%1, %3) : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
              "sdy.return"(%4) : (tensor<2x1xf32>) -> ()
            }) {in_shardings = #sdy.sharding_per_value<[<@mesh, [{"x"}, {"y"}]>]>, manual_axes = #sdy<manual_axes{"x", "y"}>, out_shardings = #sdy.sharding_per_value<[<@mesh, [{}, {"y"}]>]>} : (tensor<8x2xf32>) -> tensor<2x2xf32>
            return %0 : tensor<2x2xf32>
          }
        }
    "#]]
    .assert_eq(&text);
}

#[test]
fn gspmd_keeps_the_custom_calls_and_no_shardy() {
    let text = lower(Partitioner::Gspmd, Some("P('x')"));
    assert!(text.contains("\"SPMDFullToShardShape\""), "{text}");
    assert!(text.contains("mhlo.sharding"), "{text}");
    assert!(!text.contains("sdy."), "{text}");
}

#[test]
fn shardy_modules_have_no_gspmd_annotation() {
    for entry in [None, Some("P('x')"), Some("P()")] {
        let text = lower(Partitioner::Shardy, entry);
        assert!(!text.contains("mhlo.sharding"), "{text}");
        assert!(!text.contains("SPMDFullToShardShape"), "{text}");
        assert_eq!(text.matches("\"sdy.mesh\"").count(), 1, "{text}");
    }
}
