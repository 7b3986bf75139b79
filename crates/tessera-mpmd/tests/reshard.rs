//! SPMD ↔ MPMD reshards on the 8 CPU devices: 4 groups × 2 devices.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tessera_mpmd::processes::{ProcessError, Processes};
use tessera_mpmd::runtime::{OutputLayout, Transport, ValueId};
use tessera_mpmd::{
    MpmdArray, MpmdError, MpmdMesh, MpmdSharding, global_threshold, mpmd_to_spmd_batches,
    mpmd_to_spmd_reshard, spmd_to_mpmd_reshard,
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
    let back =
        mpmd_to_spmd_reshard(&client, &mesh, mpmd, vec![spmd.clone(), spmd], Some(8)).unwrap();
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

#[test]
fn mpmd_to_spmd_moves_largest_first_in_batches_under_the_threshold() {
    let (client, mesh) = setup();
    let spmd = NamedSharding::new(mesh.mesh(), p("P('data')")).unwrap();
    // 4, 16 and 8 f32 elements; sharded over 'data' (2 ways) in their group except the last.
    let hosts: Vec<HostArray> = [4usize, 16, 8]
        .iter()
        .map(|&n| HostArray::from_slice(&[n as i64], &vec![1f32; n]).unwrap())
        .collect();
    let specs = ["P('data')", "P('data')", "P()"];
    let groups = [1usize, 0, 3];
    let make = || -> Vec<MpmdArray> {
        hosts
            .iter()
            .zip(specs)
            .zip(groups)
            .map(|((h, spec), g)| {
                let sharding = MpmdSharding::new(&mesh, [g], &p(spec)).unwrap();
                let array =
                    Array::device_put(&client, h, &sharding.group_sharding(g).unwrap()).unwrap();
                MpmdArray::new(vec![array], sharding).unwrap()
            })
            .collect()
    };
    let arrays = make();
    // Shard bytes: 8, 32, 32; each counted 4 times (the MPMD axis): 32, 128, 128.
    assert_eq!(
        mpmd_to_spmd_batches(&mesh, &arrays, 256).unwrap(),
        vec![vec![1, 2], vec![0]]
    );
    assert_eq!(
        mpmd_to_spmd_batches(&mesh, &arrays, 100).unwrap(),
        vec![vec![1], vec![2], vec![0]]
    );
    assert_eq!(
        mpmd_to_spmd_batches(&mesh, &arrays, u64::MAX).unwrap(),
        vec![vec![1, 2, 0]]
    );
    // Whatever the batches, the results come back in the inputs' order with their values.
    for threshold in [Some(1), Some(160), None] {
        let back =
            mpmd_to_spmd_reshard(&client, &mesh, make(), vec![spmd.clone(); 3], threshold).unwrap();
        for (array, host) in back.iter().zip(&hosts) {
            assert_eq!(&array.to_host().unwrap(), host, "threshold {threshold:?}");
            assert_eq!(array.sharding(), &spmd);
        }
    }
    let err = mpmd_to_spmd_reshard(&client, &mesh, make(), vec![spmd], None).unwrap_err();
    assert!(matches!(err, MpmdError::LengthMismatch { .. }), "{err}");
}

/// Three processes whose exchange answers with fixed messages, recording what it was sent.
struct Fake {
    replies: Vec<Vec<u8>>,
    sent: Mutex<Vec<Vec<u8>>>,
}

impl Processes for Fake {
    fn local_groups(&self) -> Vec<usize> {
        vec![1]
    }
    fn process_index(&self) -> (usize, usize) {
        (3, 1)
    }
    fn process_of(&self, group: usize) -> usize {
        group
    }
    fn exchange(&self, outgoing: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, ProcessError> {
        *self.sent.lock().unwrap() = outgoing;
        Ok(self.replies.clone())
    }
    fn transport(
        &self,
        _: &Arc<HashMap<ValueId, OutputLayout>>,
    ) -> Result<Arc<dyn Transport<Array>>, ProcessError> {
        Err(ProcessError::Comm("no transport in this test".into()))
    }
    fn broadcast(&self, _: usize, values: Vec<f64>) -> Result<Vec<f64>, ProcessError> {
        Ok(values)
    }
    fn agree(&self, _: u64, _: &str) -> Result<(), ProcessError> {
        Ok(())
    }
}

#[test]
fn the_default_threshold_across_processes_is_the_smallest_of_theirs() {
    let word = |n: u64| n.to_le_bytes().to_vec();
    let fake = Fake {
        replies: vec![word(900), word(500), word(300)],
        sent: Mutex::new(Vec::new()),
    };
    assert_eq!(global_threshold(&fake, 500).unwrap(), 300);
    assert_eq!(*fake.sent.lock().unwrap(), vec![word(500); 3]);
    // This process's own threshold counts even when it is the smallest.
    assert_eq!(global_threshold(&fake, 100).unwrap(), 100);
    let bad = Fake {
        replies: vec![vec![1, 2, 3], word(5), word(5)],
        sent: Mutex::new(Vec::new()),
    };
    let err = global_threshold(&bad, 5).unwrap_err();
    assert!(matches!(err, MpmdError::Reshard(_)), "{err}");
}

/// An SPMD array whose blocks the groups' devices already hold reaches every group by device
/// copies alone; one sharded over the MPMD axis (no device holds a group's block whole) is moved
/// by one identity program over the mesh (JAXPP's `jit(identity, out_shardings)`), so nothing
/// goes through the host either; only an array the program does not take, laid out on another
/// mesh over the same devices, is read to the host, once, for the first group, the other groups
/// copying that group's buffers device to device ([`Array::host_round_trips`] counts the host
/// reads on this thread).
#[test]
fn groups_are_filled_on_the_devices_and_the_host_is_read_at_most_once() {
    let (client, mesh) = setup();
    let values: Vec<f32> = (0..32).map(|i| i as f32).collect();
    let host = HostArray::from_slice(&[8, 4], &values).unwrap();
    let every_group = |spec: &str| vec![MpmdSharding::new(&mesh, 0..4, &p(spec)).unwrap()];
    let rows = Mesh::auto(&[("rows", 8)]).unwrap();
    let cases = [
        // Split over 'data' only: device (g, d) already holds group g's block d.
        (mesh.mesh(), "P('data')", "P('data')", 0),
        // Split over the MPMD axis: each group needs rows of all four stages.
        (mesh.mesh(), "P('stage', 'data')", "P(None, 'data')", 0),
        (mesh.mesh(), "P(('data', 'stage'))", "P()", 0),
        // The same devices under other axis names: not the program's mesh.
        (&rows, "P('rows')", "P()", 1),
    ];
    for (on, source, target, trips) in cases {
        let spmd = NamedSharding::new(on, p(source)).unwrap();
        let array = Array::device_put(&client, &host, &spmd).unwrap();
        let before = Array::host_round_trips();
        let mpmd =
            spmd_to_mpmd_reshard(&client, &mesh, vec![array], every_group(target), None).unwrap();
        assert_eq!(
            Array::host_round_trips() - before,
            trips,
            "{source} -> {target}"
        );
        let local = mpmd[0].to_mpmd_local_arrays().unwrap();
        assert_eq!(local.len(), 4);
        for (&group, array) in local {
            assert_eq!(array.to_host().unwrap(), host, "group {group}");
            let want = MpmdSharding::new(&mesh, [group], &p(target))
                .unwrap()
                .group_sharding(group)
                .unwrap();
            for shard in array.addressable_shards().unwrap() {
                let block = want
                    .devices_indices_map(&[8, 4])
                    .unwrap()
                    .into_iter()
                    .find(|(d, _)| *d as i32 == shard.device)
                    .map(|(_, b)| b)
                    .unwrap();
                assert_eq!(shard.block, block, "group {group}");
                assert_eq!(shard.buffer.to_host().unwrap(), host.block(&block).unwrap());
            }
        }
    }
}
