//! Snapshots of NamedSharding checks, conversions and per-device blocks.

use expect_test::{Expect, expect};

use crate::mesh::{AbstractMesh, AxisType, Mesh};
use crate::named::{NamedSharding, array_mapping_to_axis_resources, get_array_mapping};
use crate::spec::PartitionSpec;

fn mesh(axes: &[(&str, i64, AxisType)]) -> Mesh {
    let names: Vec<&str> = axes.iter().map(|a| a.0).collect();
    let sizes: Vec<i64> = axes.iter().map(|a| a.1).collect();
    let types: Vec<AxisType> = axes.iter().map(|a| a.2).collect();
    Mesh::iota(AbstractMesh::new(&names, &sizes, &types).expect("valid test mesh"))
}

/// Builds `spec` over `mesh`, converts it for `rank`, and prints the HloSharding or the error.
fn check(mesh: &Mesh, spec: &str, rank: usize, expected: Expect) {
    let spec = PartitionSpec::parse(spec).expect("valid test spec");
    let actual = NamedSharding::new(mesh, spec)
        .and_then(|s| s.to_hlo_sharding(rank))
        .map_or_else(
            |e| format!("{} error: {e}", e.jax_type()),
            |h| h.to_string(),
        );
    expected.assert_eq(&actual);
}

use AxisType::{Auto, Explicit, Manual};

#[test]
fn specs_become_iota_tiles() {
    let m = mesh(&[
        ("a", 2, Auto),
        ("b", 2, Auto),
        ("c", 2, Auto),
        ("d", 2, Auto),
    ]);
    check(
        &m,
        "P(None, ('d', 'b'), 'c')",
        4,
        expect!["{devices=[1,4,2,1,2]<=[2,4,2]T(2,1,0) last_tile_dim_replicate}"],
    );
    check(
        &m,
        "P('a', 'b', 'c', 'd')",
        4,
        expect!["{devices=[2,2,2,2]<=[16]}"],
    );
    check(&m, "P()", 2, expect!["{replicated}"]);
    check(
        &m,
        "P(UNCONSTRAINED, 'a')",
        2,
        expect!["{devices=[1,2,8]<=[16] last_tile_dim_replicate}"],
    );
}

#[test]
fn manual_axes_become_manual_subgroups() {
    let m = mesh(&[("x", 2, Auto), ("m", 3, Manual), ("y", 2, Explicit)]);
    check(
        &m,
        "P('y')",
        2,
        expect!["{devices=[2,1,3,2]<=[2,3,2]T(2,1,0) last_tile_dims={manual, replicated}}"],
    );
    check(
        &m,
        "P('x', 'y')",
        2,
        expect!["{devices=[2,2,3]<=[2,3,2]T(0,2,1) last_tile_dims={manual}}"],
    );
    check(
        &m,
        "P('m')",
        1,
        expect![
            "ManualAxisInSpec error: P('m',) shards a dimension over the Manual mesh axis 'm'; a Manual axis cannot shard a dimension (leave it out of the spec)"
        ],
    );
}

#[test]
fn bad_specs_are_refused_like_jax() {
    let m = mesh(&[("x", 2, Auto), ("y", 2, Explicit)]);
    check(
        &m,
        "P('x', 'x')",
        2,
        expect![
            "DuplicateSpecError error: P('x', 'x') maps mesh axis `x` to more than one array dimension; each mesh axis may shard at most one dimension"
        ],
    );
    check(
        &m,
        "P('nope')",
        1,
        expect![
            "ValueError error: P('nope',) uses axis 'nope', which the mesh does not have (mesh axes: ('x', 'y')); use one of the mesh axes or add 'nope' to the mesh"
        ],
    );
    check(
        &m,
        "P('x', 'y')",
        1,
        expect![
            "ValueError error: P('x', 'y') has 2 entries but was applied to an array of rank 1; drop entries from the spec"
        ],
    );
    check(
        &m,
        "P('x', unreduced={'x'})",
        1,
        expect![
            "ValueError error: the unreduced axis 'x' of P('x', unreduced={'x'}) is Auto; only Explicit mesh axes may be unreduced"
        ],
    );
    let explicit = mesh(&[("x", 2, Explicit)]);
    check(
        &explicit,
        "P(UNCONSTRAINED)",
        1,
        expect![
            "ValueError error: P(UNCONSTRAINED,) uses UNCONSTRAINED, but no mesh axis is Auto (axis types: Explicit); make an axis Auto or replace UNCONSTRAINED by None"
        ],
    );
}

#[test]
fn mixed_tuple_types_are_an_opt_in_check() {
    let m = mesh(&[("x", 2, Auto), ("y", 2, Explicit)]);
    let s = NamedSharding::new(&m, PartitionSpec::parse("P(('x', 'y'),)").expect("spec"));
    let err = s
        .and_then(|s| s.check_tuple_axis_types())
        .map_err(|e| e.to_string());
    expect!["Err(\"dimension 0 of P(('x', 'y'),) groups axes of different types ('x': Auto, 'y': Explicit); the axes of one tuple must all be Auto, all Explicit or all Manual\")"].assert_eq(&format!("{err:?}"));
}

#[test]
fn blocks_follow_the_mesh_and_logical_ids() {
    let m = Mesh::new(
        AbstractMesh::auto(&[("x", 2), ("y", 2)]).expect("mesh"),
        vec![10, 11, 12, 13],
    )
    .expect("mesh");
    let s = NamedSharding::new(&m, PartitionSpec::parse("P('y', 'x')").expect("spec")).expect("ok");
    let s = s
        .with_logical_device_ids(vec![3, 2, 1, 0])
        .expect("permutation");
    let blocks = s.devices_indices_map(&[4, 6]).expect("divides");
    expect!["[(10, [(2, 4), (3, 6)]), (11, [(0, 2), (3, 6)]), (12, [(2, 4), (0, 3)]), (13, [(0, 2), (0, 3)])]"].assert_eq(&format!("{blocks:?}"));
    expect!["{devices=[2,2]3,1,2,0}"].assert_eq(&s.to_hlo_sharding(2).expect("hlo").to_string());
    let err = s.shard_shape(&[3, 6]).map_err(|e| e.to_string());
    expect!["Err(\"array dimension 0 has size 3, which 2 shards do not divide (shape [3, 6]); pad the dimension to a multiple of 2\")"].assert_eq(&format!("{err:?}"));
}

#[test]
fn hlo_shardings_convert_back_to_specs() {
    let m = mesh(&[("x", 2, Auto), ("y", 3, Auto), ("z", 2, Auto)]);
    let show = |text: &str| {
        let h = crate::hlo::HloSharding::parse(text).expect("valid text");
        NamedSharding::from_hlo_sharding(&h, &m)
            .map_or_else(|e| e.to_string(), |s| s.spec().to_string())
    };
    expect!["P(None, ('z', 'x'))"].assert_eq(&show(
        "{devices=[1,4,3]<=[2,3,2]T(2,0,1) last_tile_dim_replicate}",
    ));
    expect!["P()"].assert_eq(&show("{replicated}"));
    expect!["P('y', 'x', 'z')"].assert_eq(&show("{devices=[3,2,2]<=[2,3,2]T(1,0,2)}"));
    expect!["{devices=[2,3]<=[6] last_tile_dim_replicate} cannot be expressed over the mesh Mesh('x': 2, 'y': 3, 'z': 2, axis_types=(Auto, Auto, Auto)): the sharding does not use every device of the mesh"].assert_eq(&show("{devices=[2,3]<=[6] last_tile_dim_replicate}"));
}

#[test]
fn array_mappings_go_both_ways() {
    let spec = PartitionSpec::parse("P(None, ('y', 'x'), 'z')").expect("spec");
    let mapping = get_array_mapping(&spec);
    expect![[r#"[("y", 1), ("x", 1), ("z", 2)]"#]].assert_eq(&format!("{mapping:?}"));
    expect!["P(None, ('y', 'x'), 'z')"]
        .assert_eq(&array_mapping_to_axis_resources(&mapping).to_string());
}
