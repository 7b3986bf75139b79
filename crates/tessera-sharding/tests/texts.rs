//! Snapshots of the Shardy texts, the pmap-era ShardingSpec, the device picture and mesh lookups.

use expect_test::{Expect, expect};
use tessera_sharding::sdy::{SdyDim, mesh_op};
use tessera_sharding::sharding_spec::{DimSharding, MeshAssignment, ShardingSpec};
use tessera_sharding::visualize::picture;
use tessera_sharding::{AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec};

/// Compares any printed value with a snapshot.
fn check(actual: impl std::fmt::Display, expected: Expect) {
    expected.assert_eq(&actual.to_string());
}

fn sharding(mesh: &Mesh, spec: &str) -> NamedSharding {
    NamedSharding::new(mesh, PartitionSpec::parse(spec).expect("valid spec")).expect("valid")
}

#[test]
fn shardy_texts() {
    use AxisType::{Auto, Explicit};
    let shape =
        AbstractMesh::new(&["x", "y", "z"], &[2, 4, 2], &[Auto, Explicit, Explicit]).expect("mesh");
    let mesh = Mesh::iota(shape.clone());
    let s = sharding(&mesh, "P('x', UNCONSTRAINED, None, unreduced={'z'})");
    let sdy = s.to_sdy_sharding(3).expect("rank fits");
    check(
        &sdy,
        expect![[
            r#"#sdy.sharding<mesh<["x"=2, "y"=4, "z"=2]>, [{"x"}, {?}, {}], unreduced={"z"}>"#
        ]],
    );
    check(
        sdy.clone().for_axis_types(&shape),
        expect![[
            r#"#sdy.sharding<mesh<["x"=2, "y"=4, "z"=2]>, [{"x"}, {?}, {?}], replicated={"y", "z"}>"#
        ]],
    );
    check(
        sdy.mesh_attr(),
        expect![[r#"#sdy.mesh<["x"=2, "y"=4, "z"=2]>"#]],
    );
    check(
        sdy.referring_to("mesh"),
        expect![[r#"<@mesh, [{"x"}, {?}, {}], unreduced={"z"}>"#]],
    );
    let ldi = sharding(&mesh, "P(('y', 'x'),)").with_logical_device_ids((0..16).rev().collect());
    let ldi = ldi
        .expect("permutation")
        .to_sdy_sharding(1)
        .expect("rank fits");
    check(
        &ldi,
        expect![[
            r#"#sdy.sharding<mesh<["x"=2, "y"=4, "z"=2], device_ids=[15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]>, [{"y", "x"}]>"#
        ]],
    );
    check(
        ldi.mesh_attr(),
        expect![[
            r#"#sdy.mesh<["x"=2, "y"=4, "z"=2], device_ids=[15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]>"#
        ]],
    );
    let dim = SdyDim {
        axes: vec!["x".into()],
        is_open: true,
        priority: Some(1),
    };
    check(dim, expect![[r#"{"x", ?}p1"#]]);
    check(
        mesh_op(&shape, "mesh", None),
        expect![[r#"sdy.mesh @mesh = <["x"=2, "y"=4, "z"=2]>"#]],
    );
    check(
        mesh_op(
            &shape,
            "m",
            Some(&[1, 0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]),
        ),
        expect![[
            r#"sdy.mesh @m = <["x"=2, "y"=4, "z"=2], device_ids=[1, 0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]>"#
        ]],
    );
}

#[test]
fn pmap_sharding_specs() {
    let spec = ShardingSpec {
        sharding: vec![DimSharding::Chunked(vec![2]), DimSharding::NoSharding],
        mesh_mapping: vec![
            MeshAssignment::Replicated(2),
            MeshAssignment::ShardedAxis(0),
        ],
    };
    check(
        spec.to_hlo_sharding().expect("valid"),
        expect!["{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}"],
    );
    check(
        format!("{:?}", spec.indices(&[4, 3]).expect("divides")),
        expect![
            "[[Range(0, 2), Full], [Range(2, 4), Full], [Range(0, 2), Full], [Range(2, 4), Full]]"
        ],
    );
    let pmap = ShardingSpec {
        sharding: vec![DimSharding::Unstacked(4), DimSharding::NoSharding],
        mesh_mapping: vec![MeshAssignment::ShardedAxis(0)],
    };
    check(
        format!("{:?}", pmap.indices(&[4, 5]).expect("valid")),
        expect!["[[Index(0), Full], [Index(1), Full], [Index(2), Full], [Index(3), Full]]"],
    );
    check(
        format!("{:?}", pmap.to_hlo_sharding()),
        expect![[
            r#"Err(InvalidHloSharding { reason: "sharding spec: an Unstacked dimension has no HloSharding" })"#
        ]],
    );
    let unmapped = ShardingSpec {
        sharding: vec![DimSharding::Chunked(vec![2])],
        mesh_mapping: vec![],
    };
    check(
        format!("{:?}", unmapped.mesh_shape()),
        expect![[
            r#"Err(InvalidHloSharding { reason: "sharding spec: sharded axis 0 is not mapped to a mesh axis" })"#
        ]],
    );
}

#[test]
fn device_picture() {
    let mesh = Mesh::auto(&[("x", 2), ("y", 2)]).expect("mesh");
    check(
        picture(&sharding(&mesh, "P('x', 'y')"), &[4, 4]).expect("divides"),
        expect![[r#"
        ┌───────┬───────┐
        │ dev 0 │ dev 1 │
        ├───────┼───────┤
        │ dev 2 │ dev 3 │
        └───────┴───────┘
    "#]],
    );
    check(
        picture(&sharding(&mesh, "P(None, 'x')"), &[4, 4]).expect("divides"),
        expect![[r#"
        ┌─────────┬─────────┐
        │ dev 0,1 │ dev 2,3 │
        └─────────┴─────────┘
    "#]],
    );
}

#[test]
fn device_picture_of_a_vector_is_one_row() {
    let mesh = Mesh::auto(&[("x", 4)]).expect("mesh");
    check(
        picture(&sharding(&mesh, "P('x')"), &[8]).expect("divides"),
        expect![[r#"
        ┌───────┬───────┬───────┬───────┐
        │ dev 0 │ dev 1 │ dev 2 │ dev 3 │
        └───────┴───────┴───────┴───────┘
    "#]],
    );
}

#[test]
fn mesh_lookups_and_submeshes() {
    let shape = AbstractMesh::auto(&[("pp", 2), ("tp", 3)]).expect("mesh");
    let mesh = Mesh::new(shape, vec![5, 4, 3, 2, 1, 0]).expect("distinct");
    check(format!("{:?}", mesh.coords_of(1)), expect!["Ok([1, 1])"]);
    check(format!("{:?}", mesh.device_at(&[0, 2])), expect!["Some(3)"]);
    check(
        format!("{:?}", mesh.coords_of(9)),
        expect!["Err(UnknownDevice(9))"],
    );
    let subs = mesh.submeshes_along("pp").expect("axis exists");
    let ids: Vec<_> = subs
        .iter()
        .map(|m| (m.to_string(), m.device_ids().to_vec()))
        .collect();
    check(
        format!("{ids:?}"),
        expect![[
            r#"[("Mesh('tp': 3, axis_types=(Auto,))", [5, 4, 3]), ("Mesh('tp': 3, axis_types=(Auto,))", [2, 1, 0])]"#
        ]],
    );
    let across = mesh.submeshes_along("tp").expect("axis exists");
    check(
        format!(
            "{:?}",
            across
                .iter()
                .map(|m| m.device_ids().to_vec())
                .collect::<Vec<_>>()
        ),
        expect!["[[5, 2], [4, 1], [3, 0]]"],
    );
}
