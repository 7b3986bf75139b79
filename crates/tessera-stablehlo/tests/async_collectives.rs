//! What asynchronous collectives lower to: as JAX lowers them, a start is a
//! `stablehlo.async_start` whose region holds the synchronous collective (typed
//! `!stablehlo.future<...>`) and its done a `stablehlo.async_done`; where the synchronous
//! lowering takes more than one operation (`pbroadcast`, untiled forms), the pair lowers as the
//! synchronous collective.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::trace::{Tensor, shard_map_program};
use tessera_ir::{ClosedJaxpr, DType, ShapedArray};
use tessera_sharding::{AbstractMesh, PartitionSpec};
use tessera_stablehlo::{LowerOptions, Partitioner, lower_closed};

type Body = fn(&Tensor) -> Tensor;

fn program(f: Body) -> ClosedJaxpr {
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 2)]).unwrap();
    let both = PartitionSpec::parse("P('x', 'y')").unwrap();
    let aval = ShapedArray::new(DType::F32, &[4, 8]);
    shard_map_program(
        &mesh,
        std::slice::from_ref(&both),
        std::slice::from_ref(&both),
        &[aval],
        |a| vec![f(&a[0])],
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

#[test]
fn single_op_collectives_lower_inside_async_start_and_done() {
    let cases: [(&str, Body); 5] = [
        ("stablehlo.all_reduce", |a| a.psum_start(&["x"]).done()),
        ("stablehlo.all_gather", |a| {
            Tensor::slice_axis(&a.all_gather_start("y", 1, true).done(), 1, 0, 4)
        }),
        ("stablehlo.reduce_scatter", |a| {
            a.psum_scatter_start("y", 1, true)
                .done()
                .all_gather("y", 1, true)
        }),
        ("stablehlo.all_to_all", |a| {
            a.all_to_all_start("y", 1, 1, true).done()
        }),
        ("stablehlo.collective_permute", |a| {
            a.ppermute_start("x", &[(0, 1), (1, 0)]).done()
        }),
    ];
    for (op, f) in cases {
        for partitioner in [Partitioner::Shardy, Partitioner::Gspmd] {
            let text = lower(&program(f), partitioner);
            let start = text
                .find("stablehlo.async_start")
                .unwrap_or_else(|| panic!("{text}"));
            let inner = text[start..]
                .find(op)
                .unwrap_or_else(|| panic!("{op}: {text}"));
            let done = text
                .find("stablehlo.async_done")
                .unwrap_or_else(|| panic!("{text}"));
            assert!(
                start + inner < done,
                "{op} inside the start's region: {text}"
            );
            assert!(text.contains("!stablehlo.future<tensor<"), "{text}");
        }
    }
}

#[test]
fn multi_op_lowerings_fall_back_to_the_synchronous_collective() {
    let cases: [Body; 2] = [
        |a| a.pbroadcast_start("x", 1).done(),
        |a| {
            let gathered = a.all_gather_start("x", 0, false).done();
            gathered.sum(&[0])
        },
    ];
    for f in cases {
        let text = lower(&program(f), Partitioner::Shardy);
        assert!(
            !text.contains("async_start") && !text.contains("async_done"),
            "{text}"
        );
        assert!(text.contains("stablehlo.all_reduce") || text.contains("stablehlo.all_gather"));
    }
}

#[test]
fn starts_within_single_device_groups_lower_synchronously() {
    // Over an axis of size 1 each group is one device: XLA removes the collective, and an
    // `async_done` left without it aborted XLA's GPU compiler (H100, 2026-11-27).
    let mesh = AbstractMesh::auto(&[("x", 1), ("y", 2)]).unwrap();
    let both = PartitionSpec::parse("P('x', 'y')").unwrap();
    let lowered = |f: Body| {
        let program = shard_map_program(
            &mesh,
            std::slice::from_ref(&both),
            std::slice::from_ref(&both),
            &[ShapedArray::new(DType::F32, &[4, 8])],
            |a| vec![f(&a[0])],
        )
        .unwrap();
        let options = LowerOptions {
            num_partitions: 2,
            ..LowerOptions::default()
        };
        lower_closed(&program, &options).unwrap().text
    };
    let alone = lowered(|a| a.psum_start(&["x"]).done());
    assert!(
        !alone.contains("async_start") && !alone.contains("async_done"),
        "{alone}"
    );
    // Over `y` (2 devices) the same start stays asynchronous.
    let pair = lowered(|a| a.psum_start(&["y"]).done());
    assert!(pair.contains("stablehlo.async_start"), "{pair}");
}
