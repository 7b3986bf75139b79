//! What the transposes of collectives over several mesh axes lower to: the same devices
//! communicate as in the primal collective (every named axis, and its `axis_index_groups`),
//! and what the lowering cannot emit over several axes is refused with an error.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::trace::{Tensor, shard_map_program};
use tessera_ir::{ClosedJaxpr, DType, ShapedArray, vjp};
use tessera_sharding::{AbstractMesh, PartitionSpec};
use tessera_stablehlo::{LowerOptions, lower_closed};

/// The VJP of `shard_map(f)` over the 2×2 mesh (`x`, `y`), `[16, 4]` operands split over both
/// axes on dimension 0.
fn vjp_of(f: impl FnOnce(&Tensor) -> Tensor) -> ClosedJaxpr {
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 2)]).unwrap();
    let both = PartitionSpec::parse("P(('x', 'y'))").unwrap();
    let program = shard_map_program(
        &mesh,
        std::slice::from_ref(&both),
        std::slice::from_ref(&both),
        &[ShapedArray::new(DType::F32, &[16, 4])],
        |a| vec![f(&a[0])],
    )
    .unwrap();
    vjp(&program).unwrap()
}

fn lower(program: &ClosedJaxpr) -> Result<String, String> {
    let options = LowerOptions {
        num_partitions: 4,
        ..LowerOptions::default()
    };
    lower_closed(program, &options)
        .map(|m| m.text)
        .map_err(|e| e.to_string())
}

/// The `replica_groups` of the first `op` in `text` (its attributes follow its region).
fn groups_of<'t>(text: &'t str, op: &str) -> &'t str {
    let rest = text
        .find(op)
        .map(|i| &text[i..])
        .unwrap_or_else(|| panic!("no {op} in {text}"));
    let key = "replica_groups = ";
    let start = rest.find(key).map(|i| i + key.len()).unwrap_or(0);
    let rest = &rest[start..];
    &rest[..rest.find(" : ").unwrap_or(rest.len())]
}

#[test]
fn transposes_communicate_over_every_axis_and_group() {
    let all = "dense<[[0, 1, 2, 3]]>";
    let text = lower(&vjp_of(|a| a.all_gather_over(&["x", "y"], None, 0, true))).unwrap();
    assert_eq!(groups_of(&text, "stablehlo.reduce_scatter"), all, "{text}");
    let text = lower(&vjp_of(|a| a.psum_scatter_over(&["x", "y"], None, 0, true))).unwrap();
    assert_eq!(groups_of(&text, "stablehlo.all_gather"), all, "{text}");
    let pairs = [vec![0, 3], vec![1, 2]];
    let text = lower(&vjp_of(|a| {
        a.all_gather_over(&["x", "y"], Some(&pairs), 0, true)
    }))
    .unwrap();
    let groups = "dense<[[0, 3], [1, 2]]>";
    assert_eq!(
        groups_of(&text, "stablehlo.reduce_scatter"),
        groups,
        "{text}"
    );
    let cycle = [(0, 1), (1, 2), (2, 3), (3, 0)];
    let text = lower(&vjp_of(|a| a.ppermute_over(&["x", "y"], &cycle))).unwrap();
    let inverse = "source_target_pairs = dense<[[1, 0], [2, 1], [3, 2], [0, 3]]>";
    assert!(text.contains(inverse), "{text}");
}

#[test]
fn axis_index_over_several_axes_lowers_row_major_over_the_axes_as_named() {
    // tests/collectives_oracle.rs runs it on PJRT against the interpreter.
    let text = lower(&vjp_of(|a| a.pbroadcast_over(&["x", "y"], 2))).unwrap();
    assert!(text.contains("stablehlo.partition_id"), "{text}");
    assert!(text.contains("stablehlo.multiply"), "{text}");
}
