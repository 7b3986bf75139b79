//! SPMD ↔ MPMD reshards on the 8 CPU devices: 4 groups × 2 devices.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_mpmd::{
    MpmdArray, MpmdError, MpmdMesh, MpmdSharding, mpmd_to_spmd_reshard, spmd_to_mpmd_reshard,
};
use tessera_pjrt::{Array, Client, HostArray};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

fn p(text: &str) -> PartitionSpec {
    PartitionSpec::parse(text).unwrap()
}

fn setup() -> (Client, MpmdMesh) {
    let mesh = MpmdMesh::new(Mesh::auto(&[("stage", 4), ("data", 2)]).unwrap(), "stage").unwrap();
    (Client::cpu(8).unwrap(), mesh)
}

#[test]
fn arrays_go_to_their_groups_and_come_back_unchanged() {
    let (client, mesh) = setup();
    let a = HostArray::from_slice(&[4, 2], &[1f32, 2., 3., 4., 5., 6., 7., 8.]).unwrap();
    let b = HostArray::from_slice(&[2], &[10i32, 20]).unwrap();
    let spmd = NamedSharding::new(mesh.mesh(), p("P('data')")).unwrap();
    let arrays = vec![
        Array::device_put(&client, &a, &spmd).unwrap(),
        Array::device_put(&client, &b, &spmd).unwrap(),
    ];
    let shardings = vec![
        MpmdSharding::new(&mesh, [2], &p("P('data')")).unwrap(),
        MpmdSharding::new(&mesh, [0, 3], &p("P()")).unwrap(),
    ];
    let mpmd = spmd_to_mpmd_reshard(&client, &mesh, arrays, shardings, Some(16)).unwrap();
    assert_eq!(mpmd[0].mpmd_idxs(), [2]);
    assert!(!mpmd[0].is_mpmd_replicated() && mpmd[1].is_mpmd_replicated());
    let local = mpmd[0].first_mpmd_replica().unwrap();
    let devices: Vec<i32> = local
        .addressable_shards()
        .unwrap()
        .iter()
        .map(|s| s.device)
        .collect();
    assert_eq!(devices, [4, 5]);
    for (group, array) in mpmd[1].to_mpmd_local_arrays().unwrap() {
        assert_eq!(array.to_host().unwrap(), b, "group {group}");
    }
    let back = mpmd_to_spmd_reshard(&client, mpmd, vec![spmd.clone(), spmd]).unwrap();
    assert_eq!(back[0].to_host().unwrap(), a);
    assert_eq!(back[1].to_host().unwrap(), b);
}

#[test]
fn an_array_off_the_groups_is_refused_with_its_devices() {
    let (client, mesh) = setup();
    let straddling = Mesh::new(mesh.group(0).unwrap().abstract_mesh().clone(), vec![1, 2]).unwrap();
    let sharding = NamedSharding::new(&straddling, p("P()")).unwrap();
    let array = Array::device_put(
        &client,
        &HostArray::from_slice(&[1], &[0f32]).unwrap(),
        &sharding,
    )
    .unwrap();
    let err = MpmdArray::new(
        vec![array],
        MpmdSharding::new(&mesh, [0], &p("P()")).unwrap(),
    )
    .unwrap_err();
    assert!(matches!(err, MpmdError::NotOnAGroup { .. }), "{err}");
    assert!(err.to_string().contains("[1, 2]"), "{err}");
}

#[test]
fn an_array_whose_sharding_names_no_group_goes_to_group_0() {
    let (client, mesh) = setup();
    let a = HostArray::from_slice(&[4], &[1f32, 2., 3., 4.]).unwrap();
    let spmd = NamedSharding::new(mesh.mesh(), p("P('data')")).unwrap();
    let unused = MpmdSharding::new(&mesh, [], &p("P('data')")).unwrap();
    assert!(unused.groups().is_empty());
    let array = Array::device_put(&client, &a, &spmd).unwrap();
    let mpmd = spmd_to_mpmd_reshard(&client, &mesh, vec![array], vec![unused], None).unwrap();
    assert_eq!(mpmd[0].mpmd_idxs(), [0]);
    assert_eq!(mpmd[0].spec(), &p("P('data')"));
    let local = mpmd[0].first_mpmd_replica().unwrap();
    assert_eq!(local.sharding().device_set().unwrap(), [0, 1]);
    assert_eq!(local.to_host().unwrap(), a);
}

/// What a pipeline step does with a parameter already on its group (`cross_group::onto_group`,
/// read by `mpmd_jit`'s driver): an array over the group's devices in another order, or with
/// logical device ids that move its blocks, or in another memory, is moved to the group's layout
/// (never taken as is); an equivalent spelling of the spec is taken as is.
#[test]
fn a_group_array_laid_out_otherwise_is_moved_and_an_equivalent_one_taken() {
    use tessera_mpmd::cross_group::{lies_on, onto_group};
    use tessera_sharding::AbstractMesh;
    let client = Client::cpu(4).unwrap();
    let shape = AbstractMesh::auto(&[("x", 2), ("y", 2)]).unwrap();
    let group = Mesh::new(shape.clone(), vec![0, 1, 2, 3]).unwrap();
    let host = HostArray::from_slice(&[4, 2], &[1f32, 2., 3., 4., 5., 6., 7., 8.]).unwrap();
    let spec = p("P('x', 'y')");
    let want = NamedSharding::new(&group, spec.clone()).unwrap();
    let swapped = Mesh::new(shape, vec![1, 0, 3, 2]).unwrap();
    let logical = want
        .clone()
        .with_logical_device_ids(vec![1, 0, 3, 2])
        .unwrap();
    for other in [NamedSharding::new(&swapped, spec.clone()).unwrap(), logical] {
        let a = Array::device_put(&client, &host, &other).unwrap();
        assert!(!lies_on(&a, &group, &spec), "{other}");
        let moved = onto_group(&client, &a, &group, &spec).unwrap();
        assert!(
            moved.sharding().is_equivalent_to(&want, 2).unwrap(),
            "{other}"
        );
        assert_eq!(moved.to_host().unwrap(), host);
        // Each device holds, in its own buffer, the block the group's layout gives it.
        let blocks = want.devices_indices_map(&[4, 2]).unwrap();
        for (shard, (device, block)) in moved.addressable_shards().unwrap().iter().zip(&blocks) {
            assert_eq!(i64::from(shard.device), *device);
            let held = shard.buffer.to_host().unwrap();
            assert_eq!(held, host.block(block).unwrap(), "device {device}");
        }
    }
    // An array in host memory is brought into the group's default memory.
    let pinned = want.clone().with_memory_kind("pinned_host");
    let a = Array::device_put(&client, &host, &pinned).unwrap();
    assert!(!lies_on(&a, &group, &spec));
    let moved = onto_group(&client, &a, &group, &spec).unwrap();
    for shard in moved.addressable_shards().unwrap() {
        assert_eq!(shard.buffer.memory_kind().unwrap(), "device");
    }
    assert_eq!(moved.to_host().unwrap(), host);
    let long = NamedSharding::new(&group, p("P('x', None)")).unwrap();
    let a = Array::device_put(&client, &host, &long).unwrap();
    assert!(lies_on(&a, &group, &p("P('x')")));
}
