//! What `ragged_all_to_all` lowers to: as JAX lowers it, a `stablehlo.custom_call` to
//! `ragged_all_to_all` (printed in generic form) on its six operands, typed as its `output`, with the typed-FFI API
//! version and a `backend_config` dictionary holding the replica groups and the channel id. Both
//! partitioners emit the same call; groups (`axis_index_groups`) become the replica groups.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::shard_map_program;
use tessera_ir::{ClosedJaxpr, DType, ShapedArray};
use tessera_sharding::{AbstractMesh, PartitionSpec};
use tessera_stablehlo::{LowerOptions, Partitioner, lower_closed};

/// `shard_map` over the 2×2 mesh (`x`, `y`) of a `ragged_all_to_all` over `axes`: `[8, 3]` f32
/// operand and output, four int32 vectors of 4 entries per device.
fn program(axes: &[&str]) -> ClosedJaxpr {
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 2)]).unwrap();
    let both = PartitionSpec::parse("P(('x', 'y'))").unwrap();
    let data = ShapedArray::new(DType::F32, &[32, 3]);
    let index = ShapedArray::new(DType::I32, &[16]);
    let avals = [
        data.clone(),
        data,
        index.clone(),
        index.clone(),
        index.clone(),
        index,
    ];
    let axes = axes.to_vec();
    shard_map_program(
        &mesh,
        &vec![both.clone(); 6],
        std::slice::from_ref(&both),
        &avals,
        move |a| {
            vec![a[0].ragged_all_to_all_over(&a[1], [&a[2], &a[3], &a[4], &a[5]], &axes, None)]
        },
    )
    .unwrap()
}

fn lower(program: &ClosedJaxpr, partitioner: Partitioner) -> String {
    let options = LowerOptions {
        num_partitions: 4,
        partitioner,
        ..LowerOptions::default()
    };
    lower_closed(program, &options).unwrap().text
}

/// The line of the custom call in `text`.
fn call_line(text: &str) -> &str {
    text.lines()
        .find(|l| l.contains("ragged_all_to_all"))
        .unwrap_or_else(|| panic!("no ragged_all_to_all in:\n{text}"))
}

#[test]
fn lowers_to_jaxs_custom_call_with_the_replica_groups() {
    for partitioner in [Partitioner::Shardy, Partitioner::Gspmd] {
        let text = lower(&program(&["x", "y"]), partitioner);
        let line = call_line(&text);
        for want in [
            "\"stablehlo.custom_call\"(",
            "call_target_name = \"ragged_all_to_all\"",
            "api_version = 4 : i32",
            "backend_config = {channel_id = 1 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : \
             tensor<1x4xi64>}",
            "(tensor<8x3xf32>, tensor<8x3xf32>, tensor<4xi32>, tensor<4xi32>, tensor<4xi32>, \
             tensor<4xi32>) -> tensor<8x3xf32>",
        ] {
            assert!(
                line.contains(want),
                "{partitioner:?}: want {want:?} in\n{line}"
            );
        }
    }
    // Over `y` alone: the devices that share an `x` exchange.
    let text = lower(&program(&["y"]), Partitioner::Shardy);
    assert!(
        call_line(&text).contains("replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>"),
        "{text}"
    );
}

#[test]
fn index_groups_become_the_replica_groups() {
    let text = print_closed(&program(&["x", "y"]), 0).replace(
        "axis_index_groups=None",
        "axis_index_groups=((0, 2), (1, 3))",
    );
    let grouped = parse_closed(&text).unwrap();
    let lowered = lower(&grouped, Partitioner::Shardy);
    assert!(
        call_line(&lowered).contains("replica_groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>"),
        "{lowered}"
    );
}
