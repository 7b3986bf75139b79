//! Memory kinds at the entry boundary lower as JAX lowers them: nothing when every sharding is
//! in the default memory; otherwise `mhlo.memory_kind` on every sharded argument and result
//! (`device` for a sharding without a kind), and a result outside the default memory passed
//! through `stablehlo.custom_call @annotate_device_placement` carrying
//! `_xla_buffer_placement`, under both partitioners.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use expect_test::expect;
use tessera_ir::trace::trace;
use tessera_ir::{ClosedJaxpr, DType, ShapedArray};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};
use tessera_stablehlo::{LowerOptions, Partitioner, lower_closed};

/// `lambda a, b: (a * 2 + b, a)` on `8x4` arrays.
fn program() -> ClosedJaxpr {
    let aval = ShapedArray::new(DType::F32, &[8, 4]);
    trace(&[aval.clone(), aval], |a| {
        vec![&a[0] * 2.0 + &a[1], a[0].clone()]
    })
    .unwrap()
}

fn sharding(kind: Option<&str>) -> NamedSharding {
    let mesh = Mesh::auto(&[("x", 4)]).unwrap();
    let s = NamedSharding::new(&mesh, PartitionSpec::parse("P('x')").unwrap()).unwrap();
    match kind {
        Some(kind) => s.with_memory_kind(kind),
        None => s,
    }
}

fn lower(args: [Option<&str>; 2], results: [Option<&str>; 2], partitioner: Partitioner) -> String {
    let options = LowerOptions {
        num_partitions: 4,
        arg_shardings: args.iter().map(|k| Some(sharding(*k))).collect(),
        result_shardings: results.iter().map(|k| Some(sharding(*k))).collect(),
        partitioner,
        ..LowerOptions::default()
    };
    lower_closed(&program(), &options).unwrap().text
}

#[test]
fn default_memory_everywhere_is_not_annotated() {
    for partitioner in [Partitioner::Gspmd, Partitioner::Shardy] {
        for kind in [None, Some("device")] {
            let text = lower([kind, None], [None, kind], partitioner);
            assert!(!text.contains("memory_kind"), "{text}");
            assert!(!text.contains("annotate_device_placement"), "{text}");
        }
    }
}

#[test]
fn host_arguments_and_results_carry_their_kinds_and_host_results_are_placed() {
    let text = lower(
        [Some("pinned_host"), None],
        [Some("pinned_host"), Some("device")],
        Partitioner::Gspmd,
    );
    expect![[r#"
        module @jit_main attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
          func.func public @main(%arg0: tensor<8x4xf32> {mhlo.memory_kind = "pinned_host", mhlo.sharding = "{devices=[4,1]<=[4]}"}, %arg1: tensor<8x4xf32> {mhlo.memory_kind = "device", mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> (tensor<8x4xf32> {mhlo.memory_kind = "pinned_host", mhlo.sharding = "{devices=[4,1]<=[4]}"}, tensor<8x4xf32> {mhlo.memory_kind = "device", mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
            %0 = "stablehlo.constant"() {value = dense<2.000000e+00> : tensor<f32>} : () -> tensor<f32>
            %1 = "stablehlo.broadcast_in_dim"(%0) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<8x4xf32>
            %2 = "stablehlo.multiply"(%arg0, %1) : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
            %3 = "stablehlo.add"(%2, %arg1) : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
            %4 = "stablehlo.custom_call"(%3) {api_version = 1 : i32, call_target_name = "annotate_device_placement", has_side_effect = true, mhlo.frontend_attributes = {_xla_buffer_placement = "pinned_host"}} : (tensor<8x4xf32>) -> tensor<8x4xf32>
            return %4, %arg0 : tensor<8x4xf32>, tensor<8x4xf32>
          }
        }
    "#]]
    .assert_eq(&text);
}

/// Under Shardy the kinds sit beside `sdy.sharding`; only the host result is placed, and an
/// argument whose sharding is left to the partitioner has no kind (JAX's `_get_mem_kind(None)`).
#[test]
fn shardy_modules_carry_kinds_beside_sdy_shardings() {
    let options = LowerOptions {
        num_partitions: 4,
        arg_shardings: vec![None, Some(sharding(Some("unpinned_host")))],
        result_shardings: vec![Some(sharding(None)), Some(sharding(Some("unpinned_host")))],
        partitioner: Partitioner::Shardy,
        ..LowerOptions::default()
    };
    let text = lower_closed(&program(), &options).unwrap().text;
    let head = text
        .lines()
        .find(|l| l.contains("func.func public @main"))
        .unwrap();
    assert!(head.contains("(%arg0: tensor<8x4xf32>, %arg1"), "{head}");
    assert!(
        head.contains(r#"{mhlo.memory_kind = "unpinned_host", sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}"#),
        "{head}"
    );
    assert!(
        head.contains(
            r#"{mhlo.memory_kind = "device", sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}"#
        ),
        "{head}"
    );
    assert_eq!(
        text.matches("annotate_device_placement").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains(r#"_xla_buffer_placement = "unpinned_host""#),
        "{text}"
    );
    // The placed value is the second result; the first is returned as computed.
    let ret = text
        .lines()
        .find(|l| l.trim_start().starts_with("return"))
        .unwrap();
    let placed = text
        .lines()
        .find(|l| l.contains("annotate_device_placement"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap();
    assert!(ret.contains(&format!(", {placed} :")), "{ret}\n{text}");
}
