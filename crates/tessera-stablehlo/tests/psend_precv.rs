//! What `psend`/`precv` lower to: as JAX's GPU lowering emits them, a token made by
//! `stablehlo.after_all`, a `stablehlo.send` of the operand on it and a `stablehlo.recv` on the
//! send's token, both with the `source_target_pairs` a `ppermute` with the same pairs gets
//! (mesh positions), the collective channel handle, `is_host_transfer = false` and a manual
//! sharding; the received array (not the recv's token) is the `precv`'s result. Both
//! partitioners emit the same ops.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::trace::{precv_over, shard_map_program};
use tessera_ir::{ClosedJaxpr, DType, ShapedArray};
use tessera_sharding::{AbstractMesh, PartitionSpec};
use tessera_stablehlo::{LowerOptions, Partitioner, lower_closed};

/// `shard_map` over the 2×2 mesh (`x`, `y`) of a send and its receive over `axes` with `perm`
/// on blocks (`[2, 3]`) of an f32 `[4, 6]` array.
fn program(axes: &[&str], perm: &[(i64, i64)]) -> ClosedJaxpr {
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 2)]).unwrap();
    let both = PartitionSpec::parse("P('x', 'y')").unwrap();
    let aval = ShapedArray::new(DType::F32, &[4, 6]);
    shard_map_program(
        &mesh,
        std::slice::from_ref(&both),
        std::slice::from_ref(&both),
        &[aval],
        |a| {
            let token = a[0].psend_over(axes, perm);
            let local = a[0].sin();
            vec![&precv_over(token, a[0].aval(), axes, perm) + &local]
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

fn line<'t>(text: &'t str, op: &str) -> &'t str {
    text.lines()
        .find(|l| l.contains(op))
        .unwrap_or_else(|| panic!("no {op} in:\n{text}"))
}

#[test]
fn lowers_to_jaxs_send_and_recv_with_the_pairs_of_a_ppermute() {
    for partitioner in [Partitioner::Shardy, Partitioner::Gspmd] {
        let text = lower(&program(&["x"], &[(0, 1), (1, 0)]), partitioner);
        // Over 'x': positions 0 and 2 (y = 0), then 1 and 3 (y = 1) exchange, group by group
        // as JAX lays the pairs out.
        let pairs = "source_target_pairs = dense<[[0, 2], [2, 0], [1, 3], [3, 1]]> : \
                     tensor<4x2xi64>";
        let common = [
            "channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>",
            "is_host_transfer = false",
            "mhlo.sharding = \"{manual}\"",
            pairs,
        ];
        let send = line(&text, "stablehlo.send");
        let recv = line(&text, "stablehlo.recv");
        for want in common {
            assert!(send.contains(want), "{partitioner:?}: {want:?} in\n{send}");
            assert!(recv.contains(want), "{partitioner:?}: {want:?} in\n{recv}");
        }
        assert!(
            send.contains("(tensor<2x3xf32>, !stablehlo.token) -> !stablehlo.token"),
            "{send}"
        );
        assert!(
            recv.contains("(!stablehlo.token) -> (tensor<2x3xf32>, !stablehlo.token)"),
            "{recv}"
        );
        assert!(text.contains("stablehlo.after_all"), "{text}");
        // The send comes before the receive, and the local work is not moved across them.
        let at = |op: &str| text.find(op).unwrap();
        assert!(at("stablehlo.send") < at("stablehlo.recv"), "{text}");
        // The collective_permute a ppermute would emit is not there.
        assert!(!text.contains("collective_permute"), "{text}");
    }
    // Over both axes: indices number the 4 devices of the one group.
    let text = lower(
        &program(&["x", "y"], &[(0, 3), (2, 1)]),
        Partitioner::Shardy,
    );
    assert!(
        line(&text, "stablehlo.send")
            .contains("source_target_pairs = dense<[[0, 3], [2, 1]]> : tensor<2x2xi64>"),
        "{text}"
    );
}
