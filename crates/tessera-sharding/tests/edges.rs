//! Hostile meshes, specs and shapes: every answer is a value or a typed error, never a panic
//! (debug builds check arithmetic overflow).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use proptest::prelude::*;
use tessera_sharding::{AbstractMesh, Mesh, NamedSharding, PartitionSpec};

#[test]
fn negative_device_ids_are_refused() {
    let shape = AbstractMesh::auto(&[("x", 2)]).unwrap();
    let err = Mesh::new(shape.clone(), vec![-1, 5])
        .expect_err("refused")
        .to_string();
    assert!(err.contains("-1") && err.contains("start at 0"), "{err}");
    let err = Mesh::new(shape, vec![0, i64::MIN])
        .expect_err("refused")
        .to_string();
    assert!(err.contains("position 1"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any mesh sizes, spec and array shape: the mesh, the sharding and every shape query
    /// answer without a panic.
    #[test]
    fn hostile_meshes_specs_and_shapes_never_panic(
        x in prop_oneof![Just(i64::MIN), -1i64..5, Just(1 << 31), Just(i64::MAX)],
        y in prop_oneof![-1i64..5, Just(1 << 33), Just(i64::MAX)],
        spec in prop::sample::select(vec![
            "P()", "P('x')", "P('x', 'y')", "P(('x', 'y'))", "P(None, 'y')", "P('y', 'x', None)",
        ]),
        shape in prop::collection::vec(
            prop_oneof![Just(i64::MIN), -1i64..9, Just(i64::MAX)], 0..4),
    ) {
        let Ok(abstract_mesh) = AbstractMesh::auto(&[("x", x), ("y", y)]) else {
            return Ok(());
        };
        let mesh = Mesh::iota(abstract_mesh);
        let Ok(sharding) = NamedSharding::new(&mesh, PartitionSpec::parse(spec).unwrap()) else {
            return Ok(());
        };
        let _ = sharding.shard_shape(&shape);
        let _ = sharding.to_hlo_sharding(shape.len());
        let _ = sharding.to_sdy_sharding(shape.len());
        let _ = sharding.tiles_per_dim(shape.len());
        if shape.iter().all(|&d| (0..9).contains(&d)) {
            let _ = sharding.devices_indices_map(&shape);
        }
    }
}
