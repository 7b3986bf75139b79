//! `MpmdArray`'s own API on the 8 CPU devices (4 groups × 2 devices): the constructor's refusals
//! (JAXPP's `ValueError`s and asserts, as typed errors), `ndim`/`aval`, `delete` once and only
//! once, and `block_until_ready` handing the array back.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::{DType, ShapedArray};
use tessera_mpmd::{MpmdArray, MpmdError, MpmdMesh, MpmdSharding};
use tessera_pjrt::{Array, Client, HostArray};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

fn p(text: &str) -> PartitionSpec {
    PartitionSpec::parse(text).unwrap()
}

fn setup() -> (Client, MpmdMesh) {
    let mesh = MpmdMesh::new(Mesh::auto(&[("stage", 4), ("data", 2)]).unwrap(), "stage").unwrap();
    (Client::cpu(8).unwrap(), mesh)
}

fn value() -> HostArray {
    HostArray::from_slice(&[2, 2], &[1f32, 2., 3., 4.]).unwrap()
}

/// `value` put on `group`'s devices by `spec`.
fn on_group(
    client: &Client,
    mesh: &MpmdMesh,
    group: usize,
    value: &HostArray,
    spec: &str,
) -> Array {
    let sharding = NamedSharding::new(mesh.group(group).unwrap(), p(spec)).unwrap();
    Array::device_put(client, value, &sharding).unwrap()
}

#[test]
fn an_array_on_a_group_the_sharding_does_not_name_is_refused() {
    let (client, mesh) = setup();
    let sharding = MpmdSharding::new(&mesh, [0, 1], &p("P()")).unwrap();
    let arrays = vec![
        on_group(&client, &mesh, 0, &value(), "P()"),
        on_group(&client, &mesh, 2, &value(), "P()"),
    ];
    let err = MpmdArray::new(arrays, sharding).unwrap_err();
    assert!(
        matches!(&err, MpmdError::WrongGroup { index: 1, group: 2, groups } if groups == &[0, 1]),
        "{err}"
    );
    assert!(err.to_string().contains("name group 2"), "{err}");
}

#[test]
fn two_arrays_on_one_group_are_refused() {
    let (client, mesh) = setup();
    let sharding = MpmdSharding::new(&mesh, [1, 3], &p("P()")).unwrap();
    let arrays = vec![
        on_group(&client, &mesh, 3, &value(), "P()"),
        on_group(&client, &mesh, 1, &value(), "P()"),
        on_group(&client, &mesh, 3, &value(), "P()"),
    ];
    let err = MpmdArray::new(arrays, sharding).unwrap_err();
    assert!(
        matches!(err, MpmdError::DuplicateGroup { index: 2, group: 3 }),
        "{err}"
    );
}

#[test]
fn arrays_disagreeing_in_shape_type_or_spec_are_refused() {
    let (client, mesh) = setup();
    let replicated = || MpmdSharding::new(&mesh, [0, 1], &p("P()")).unwrap();
    let mismatch =
        |arrays: Vec<Array>, sharding: MpmdSharding| match MpmdArray::new(arrays, sharding)
            .unwrap_err()
        {
            MpmdError::Mismatch { what } => what,
            other => panic!("expected a mismatch, got {other}"),
        };

    let wider = HostArray::from_slice(&[2, 3], &[0f32; 6]).unwrap();
    let shapes = vec![
        on_group(&client, &mesh, 0, &value(), "P()"),
        on_group(&client, &mesh, 1, &wider, "P()"),
    ];
    assert_eq!(
        mismatch(shapes, replicated()),
        "group 0's array is F32[2, 2], group 1's is F32[2, 3]"
    );

    let ints = HostArray::from_slice(&[2, 2], &[1i32, 2, 3, 4]).unwrap();
    let types = vec![
        on_group(&client, &mesh, 0, &value(), "P()"),
        on_group(&client, &mesh, 1, &ints, "P()"),
    ];
    assert_eq!(
        mismatch(types, replicated()),
        "group 0's array is F32[2, 2], group 1's is S32[2, 2]"
    );

    // The second array is sharded over 'data' within its group; the sharding says replicated.
    let specs = vec![
        on_group(&client, &mesh, 0, &value(), "P()"),
        on_group(&client, &mesh, 1, &value(), "P('data')"),
    ];
    assert_eq!(
        mismatch(specs, replicated()),
        "array 1 has spec P('data',), the sharding says P()"
    );
    // The MPMD axis is filtered out of the spec before comparing.
    let sharded = MpmdSharding::new(&mesh, [1], &p("P(('stage', 'data'),)")).unwrap();
    let array = on_group(&client, &mesh, 1, &value(), "P('data')");
    assert!(MpmdArray::new(vec![array], sharded).is_ok());
}

#[test]
fn a_deleted_array_cannot_be_part_of_an_mpmd_array() {
    let (client, mesh) = setup();
    let sharding = MpmdSharding::new(&mesh, [0, 1], &p("P()")).unwrap();
    let mut gone = on_group(&client, &mesh, 1, &value(), "P()");
    gone.delete();
    let arrays = vec![on_group(&client, &mesh, 0, &value(), "P()"), gone];
    let err = MpmdArray::new(arrays, sharding).unwrap_err();
    assert!(
        matches!(&err, MpmdError::DeletedArray { index: 1, shape } if shape == &[2, 2]),
        "{err}"
    );
}

#[test]
fn ndim_and_aval_describe_the_array() {
    let (client, mesh) = setup();
    let ints = HostArray::from_slice(&[2, 1, 2], &[1i32, 2, 3, 4]).unwrap();
    let sharding = MpmdSharding::new(&mesh, [2], &p("P('data')")).unwrap();
    let array = MpmdArray::new(
        vec![on_group(&client, &mesh, 2, &ints, "P('data')")],
        sharding,
    )
    .unwrap();
    assert_eq!(array.ndim(), 3);
    let aval = array.aval();
    assert_eq!(aval, ShapedArray::new(DType::I32, &[2, 1, 2]));
    assert!(!aval.weak_type && aval.sharding.is_none());
}

#[test]
fn delete_frees_every_group_once() {
    let (client, mesh) = setup();
    let sharding = MpmdSharding::new(&mesh, [0, 3], &p("P()")).unwrap();
    let arrays = vec![
        on_group(&client, &mesh, 0, &value(), "P()"),
        on_group(&client, &mesh, 3, &value(), "P()"),
    ];
    let mut array = MpmdArray::new(arrays, sharding).unwrap();
    let kept = array.clone();
    assert!(!array.is_deleted());
    array.delete().unwrap();
    assert!(array.is_deleted());
    assert!(matches!(array.delete(), Err(MpmdError::Deleted)));
    assert!(matches!(
        array.to_mpmd_local_arrays(),
        Err(MpmdError::Deleted)
    ));
    assert!(matches!(
        array.to_mpmd_local_array(),
        Err(MpmdError::Deleted)
    ));
    assert!(matches!(
        array.first_mpmd_replica(),
        Err(MpmdError::Deleted)
    ));
    assert!(matches!(array.block_until_ready(), Err(MpmdError::Deleted)));
    // Every group's array went: taken out, none is live.
    let arrays = array.into_arrays();
    assert_eq!(arrays.len(), 2);
    assert!(arrays.values().all(Array::is_deleted));
    // A clone made before holds its own handles on the buffers.
    assert!(!kept.is_deleted());
    for group_array in kept.to_mpmd_local_arrays().unwrap().values() {
        assert_eq!(group_array.to_host().unwrap(), value());
    }
}

#[test]
fn block_until_ready_hands_back_the_array() {
    let (client, mesh) = setup();
    let sharding = MpmdSharding::new(&mesh, [1, 2], &p("P('data')")).unwrap();
    let arrays = vec![
        on_group(&client, &mesh, 2, &value(), "P('data')"),
        on_group(&client, &mesh, 1, &value(), "P('data')"),
    ];
    let array = MpmdArray::new(arrays, sharding).unwrap();
    let ready = array.block_until_ready().unwrap();
    assert!(std::ptr::eq(ready, &array));
    let host = ready.first_mpmd_replica().unwrap().to_host().unwrap();
    assert_eq!(host, value());
}

#[test]
fn the_global_array_spans_the_groups_and_shares_their_buffers() {
    let (client, mesh) = setup();
    let v = value();
    let sharding = MpmdSharding::new(&mesh, [1, 3], &p("P('data')")).unwrap();
    let mut array = MpmdArray::new(
        vec![
            on_group(&client, &mesh, 1, &v, "P('data')"),
            on_group(&client, &mesh, 3, &v, "P('data')"),
        ],
        sharding.clone(),
    )
    .unwrap();
    let global = array.to_global_array().unwrap();
    assert_eq!(global.shape(), [2, 2]);
    assert_eq!(global.sharding(), &sharding.sharding().unwrap());
    assert!(global.is_fully_addressable().unwrap());
    let shards = global.addressable_shards().unwrap();
    let devices: Vec<i32> = shards.iter().map(|s| s.device).collect();
    assert_eq!(devices, [2, 3, 6, 7]);
    // The same buffers as the groups' arrays, not copies.
    for (group, local) in array.to_mpmd_local_arrays().unwrap() {
        for shard in local.addressable_shards().unwrap() {
            let same = shards.iter().find(|s| s.device == shard.device).unwrap();
            assert!(
                std::sync::Arc::ptr_eq(&same.buffer, &shard.buffer),
                "group {group}"
            );
            assert_eq!(same.block, shard.block);
        }
    }
    assert_eq!(global.to_host().unwrap(), v);
    // A remote array has a global array with no shards here; a deleted one has none.
    let remote = MpmdArray::remote(&[2, 2], global.element_type(), sharding);
    let empty = remote.to_global_array().unwrap();
    assert!(empty.addressable_shards().unwrap().is_empty());
    assert!(!empty.is_fully_addressable().unwrap());
    array.delete().unwrap();
    let err = array.to_global_array().unwrap_err();
    assert!(matches!(err, MpmdError::Deleted), "{err}");
}

#[test]
fn the_sharding_spans_every_device_of_the_groups_holding_data_or_not() {
    let (client, mesh) = setup();
    let mpmd = MpmdSharding::new(&mesh, [3, 1], &p("P('data')")).unwrap();
    let array = MpmdArray::new(
        vec![
            on_group(&client, &mesh, 1, &value(), "P('data')"),
            on_group(&client, &mesh, 3, &value(), "P('data')"),
        ],
        mpmd.clone(),
    )
    .unwrap();
    let sharding = array.sharding().unwrap();
    // Groups 1 and 3 of the 4 x 2 mesh: devices 2, 3 and 6, 7, the spec within each group.
    assert_eq!(sharding.device_set().unwrap(), [2, 3, 6, 7]);
    assert_eq!(sharding.spec(), &p("P('data')"));
    assert_eq!(sharding.num_devices(), 4);
    assert_eq!(sharding.concrete_mesh().unwrap().axis_sizes(), [2, 2]);
    // The global array is laid out by it.
    assert_eq!(array.to_global_array().unwrap().sharding(), &sharding);
    // A process holding none of the groups knows the same sharding.
    let remote = MpmdArray::remote(&[2, 2], array.dtype(), mpmd);
    assert!(!remote.is_partially_addressable());
    assert_eq!(remote.sharding().unwrap(), sharding);
}

#[test]
fn an_array_on_the_groups_devices_in_another_order_is_refused() {
    // Group 2 holds devices [4, 5]; a mesh listing them as [5, 4] shards `P('data')` the other
    // way round, so reading it by the group's layout would swap its rows.
    let (client, mesh) = setup();
    let swapped = Mesh::new(
        tessera_sharding::AbstractMesh::auto(&[("data", 2)]).unwrap(),
        vec![5, 4],
    )
    .unwrap();
    let on_swapped = |spec: &str| {
        let sharding = NamedSharding::new(&swapped, p(spec)).unwrap();
        Array::device_put(&client, &value(), &sharding).unwrap()
    };
    let sharding = MpmdSharding::new(&mesh, [2], &p("P('data')")).unwrap();
    let err = MpmdArray::new(vec![on_swapped("P('data')")], sharding).unwrap_err();
    assert!(
        matches!(
            &err,
            MpmdError::LayoutDiffers {
                index: 0,
                group: 2,
                device: 4,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("MpmdMesh::group(2)"), "{err}");
    // Replicated, every device holds the whole array whatever the order: accepted, and read
    // back unchanged.
    let replicated = MpmdSharding::new(&mesh, [2], &p("P()")).unwrap();
    let array = MpmdArray::new(vec![on_swapped("P()")], replicated).unwrap();
    assert_eq!(array.to_global_array().unwrap().to_host().unwrap(), value());
}
