//! The NamedSharding API around the algebra: shardings over abstract meshes, equality and hashing,
//! the `update` builders, and the devices one process addresses.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use expect_test::{Expect, expect};
use tessera_sharding::{AbstractMesh, Mesh, NamedSharding, PartitionSpec, ShardingError};

fn p(text: &str) -> PartitionSpec {
    PartitionSpec::parse(text).expect("valid spec")
}

fn mesh_2x4() -> Mesh {
    Mesh::auto(&[("x", 2), ("y", 4)]).expect("mesh")
}

fn sharding(mesh: &Mesh, spec: &str) -> NamedSharding {
    NamedSharding::new(mesh, p(spec)).expect("valid sharding")
}

/// Compares a printed value or error with a snapshot.
fn check(actual: impl std::fmt::Display, expected: Expect) {
    expected.assert_eq(&actual.to_string());
}

#[test]
fn an_abstract_sharding_answers_shapes_but_not_devices() {
    let shape = AbstractMesh::auto(&[("x", 2), ("y", 4)]).expect("mesh");
    let s = NamedSharding::new_abstract(&shape, p("P('x', 'y')")).expect("valid spec");
    assert!(s.concrete_mesh().is_none());
    assert_eq!(s.num_devices(), 8);
    assert_eq!(s.shard_shape(&[4, 8]).expect("divides"), [2, 2]);
    assert!(!s.is_fully_replicated());
    // The XLA sharding needs mesh positions only: the same as over devices 0..8.
    assert_eq!(
        s.to_hlo_sharding(2).expect("rank fits"),
        sharding(&mesh_2x4(), "P('x', 'y')")
            .to_hlo_sharding(2)
            .expect("rank fits")
    );
    check(
        &s,
        expect![
            "NamedSharding(mesh=AbstractMesh('x': 2, 'y': 4, axis_types=(Auto, Auto)), spec=P('x', 'y'))"
        ],
    );
    let asked = [
        ("device_set", s.device_set().err()),
        ("devices_indices_map", s.devices_indices_map(&[4, 8]).err()),
        ("addressable_devices", s.addressable_devices(&[0]).err()),
        ("is_fully_addressable", s.is_fully_addressable(&[0]).err()),
    ];
    for (question, err) in asked {
        assert_eq!(
            err,
            Some(ShardingError::AbstractMesh { what: question }),
            "{question}"
        );
    }
    check(
        s.device_set().expect_err("abstract"),
        expect!["device_set needs a mesh with devices, but the sharding is over an abstract mesh"],
    );
    // The constructor checks the spec as over a concrete mesh.
    let err = NamedSharding::new_abstract(&shape, p("P('z')")).expect_err("no axis z");
    assert!(matches!(err, ShardingError::UnknownAxis { .. }), "{err}");
}

fn hash_of(s: &NamedSharding, hasher: &RandomState) -> u64 {
    hasher.hash_one(s)
}

#[test]
fn equal_shardings_hash_equal_and_key_a_map() {
    let mesh = mesh_2x4();
    let a = sharding(&mesh, "P('x', None)");
    let hasher = RandomState::new();
    let same = sharding(&mesh_2x4(), "P('x', None)");
    assert_eq!(a, same);
    assert_eq!(hash_of(&a, &hasher), hash_of(&same, &hasher));

    let reversed = Mesh::new(mesh.abstract_mesh().clone(), (0..8).rev().collect()).expect("mesh");
    let others = [
        sharding(&mesh, "P(None, 'x')"),
        sharding(&reversed, "P('x', None)"),
        a.clone().with_memory_kind("pinned_host"),
        a.clone()
            .with_logical_device_ids((0..8).rev().collect())
            .expect("permutation"),
        NamedSharding::new_abstract(mesh.abstract_mesh(), p("P('x', None)")).expect("valid"),
    ];
    let mut map = HashMap::new();
    map.insert(a.clone(), "a");
    for (i, other) in others.iter().enumerate() {
        assert_ne!(&a, other, "sharding {i}");
        assert!(map.insert(other.clone(), "other").is_none(), "sharding {i}");
    }
    assert_eq!(map.len(), 1 + others.len());
    // A sharding built anew finds the entry of its equal.
    assert_eq!(map.get(&same), Some(&"a"));
    let rebuilt = others[2].clone().without_memory_kind();
    assert_eq!(hash_of(&rebuilt, &hasher), hash_of(&a, &hasher));
    assert_eq!(map.get(&rebuilt), Some(&"a"));
}

#[test]
fn updates_check_the_spec_against_the_mesh_as_the_constructor_does() {
    let mesh = mesh_2x4();
    let s = sharding(&mesh, "P('x')")
        .with_memory_kind("pinned_host")
        .with_logical_device_ids(vec![7, 6, 5, 4, 3, 2, 1, 0])
        .expect("permutation");
    assert_eq!(s.memory_kind(), Some("pinned_host"));
    check(
        &s,
        expect![
            "NamedSharding(mesh=Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto)), spec=P('x',), memory_kind=pinned_host, logical_device_ids=[7, 6, 5, 4, 3, 2, 1, 0])"
        ],
    );
    assert_eq!(s.clone().without_memory_kind().memory_kind(), None);
    assert_eq!(
        s.clone().without_logical_device_ids().logical_device_ids(),
        None
    );

    // A new spec keeps the rest.
    let t = s.clone().with_spec(p("P('y', 'x')")).expect("valid spec");
    assert_eq!(t.spec(), &p("P('y', 'x')"));
    assert_eq!(
        (t.memory_kind(), t.logical_device_ids()),
        (s.memory_kind(), s.logical_device_ids())
    );
    assert_eq!(t.with_spec(p("P('x')")).expect("valid"), s);
    let dup = s.clone().with_spec(p("P('x', 'x')")).expect_err("x twice");
    assert!(matches!(dup, ShardingError::DuplicateAxes { .. }), "{dup}");
    let unknown = s.clone().with_spec(p("P('z')")).expect_err("no axis z");
    assert!(
        matches!(unknown, ShardingError::UnknownAxis { .. }),
        "{unknown}"
    );

    // A new mesh: the same shape on other devices keeps the rest; a mesh without the spec's axis
    // or of another size (with logical ids set) is refused.
    let moved_to = Mesh::new(mesh.abstract_mesh().clone(), (10..18).collect()).expect("mesh");
    let moved = s.clone().with_mesh(&moved_to).expect("same shape");
    assert_eq!(
        moved.device_set().expect("concrete"),
        (10..18).collect::<Vec<_>>()
    );
    assert_eq!(
        (
            moved.spec(),
            moved.memory_kind(),
            moved.logical_device_ids()
        ),
        (s.spec(), s.memory_kind(), s.logical_device_ids())
    );
    let no_x = Mesh::auto(&[("y", 8)]).expect("mesh");
    let err = s.clone().with_mesh(&no_x).expect_err("no axis x");
    assert!(matches!(err, ShardingError::UnknownAxis { .. }), "{err}");
    let bigger = Mesh::auto(&[("x", 2), ("y", 8)]).expect("mesh");
    check(
        s.clone()
            .with_mesh(&bigger)
            .expect_err("8 ids for 16 devices"),
        expect![
            "invalid logical device ids: [7, 6, 5, 4, 3, 2, 1, 0] is not a permutation of 0..16 (one per mesh position); give one id per position of the mesh, each once"
        ],
    );
    let plain = s.clone().without_logical_device_ids().with_mesh(&bigger);
    assert_eq!(plain.expect("no ids to check").num_devices(), 16);

    // An abstract mesh: the same sharding, without devices.
    let shape_only = s
        .clone()
        .with_abstract_mesh(mesh.abstract_mesh())
        .expect("same shape");
    assert!(shape_only.concrete_mesh().is_none());
    assert!(matches!(
        shape_only.device_set(),
        Err(ShardingError::AbstractMesh { .. })
    ));
    assert_eq!(shape_only.with_mesh(&mesh).expect("back on devices"), s);
}

#[test]
fn a_process_addresses_the_devices_of_the_mesh_that_it_holds() {
    let mesh = mesh_2x4();
    let s = sharding(&mesh, "P('x', 'y')");
    // A process holding devices 0..4 (and a device outside the mesh).
    let process = [0, 1, 2, 3, 42];
    assert_eq!(
        s.addressable_devices(&process).expect("concrete"),
        [0, 1, 2, 3]
    );
    assert!(!s.is_fully_addressable(&process).expect("concrete"));
    let all: Vec<i64> = (0..8).collect();
    assert_eq!(s.addressable_devices(&all).expect("concrete"), all);
    assert!(s.is_fully_addressable(&all).expect("concrete"));
    // A sharding over one row of the mesh is fully addressable by the process holding that row.
    let row = Mesh::new(
        AbstractMesh::auto(&[("y", 4)]).expect("mesh"),
        vec![3, 2, 1, 0],
    )
    .expect("mesh");
    let on_row = sharding(&row, "P('y')");
    assert!(on_row.is_fully_addressable(&process).expect("concrete"));
    assert_eq!(
        on_row.addressable_devices(&[4, 5]).expect("concrete"),
        Vec::<i64>::new()
    );
}
