//! `logically_stacked` on the 8 CPU devices: 4 groups × 2 devices.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_mpmd::{MpmdError, MpmdMesh, logically_stacked};
use tessera_pjrt::{Array, Client, HostArray};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

fn p(text: &str) -> PartitionSpec {
    PartitionSpec::parse(text).unwrap()
}

#[test]
fn a_group_array_becomes_its_slice_of_an_array_stacked_over_the_mpmd_axis() {
    let mesh = MpmdMesh::new(Mesh::auto(&[("stage", 4), ("data", 2)]).unwrap(), "stage").unwrap();
    let client = Client::cpu(8).unwrap();
    let host =
        HostArray::from_slice(&[4, 3], &(0..12).map(|x| x as f32).collect::<Vec<_>>()).unwrap();
    let group = NamedSharding::new(mesh.group(2).unwrap(), p("P('data')")).unwrap();
    let array = Array::device_put(&client, &host, &group).unwrap();
    for (array_axis, strict) in [(0, true), (1, false), (2, true)] {
        let stacked =
            logically_stacked(&client, &array, mesh.mesh(), "stage", array_axis, strict).unwrap();
        let mut shape = vec![4i64, 3];
        shape.insert(array_axis, 4);
        assert_eq!(stacked.shape(), shape.as_slice());
        let spec = stacked.sharding().spec().to_string();
        let want = [
            "P('stage', 'data')",
            "P('data', 'stage')",
            "P('data', None, 'stage')",
        ];
        assert_eq!(spec, want[array_axis]);
        let shards = stacked.addressable_shards().unwrap();
        let devices: Vec<i32> = shards.iter().map(|s| s.device).collect();
        assert_eq!(devices, [4, 5], "group 2's devices hold their slice");
        for (shard, rows) in shards.iter().zip([(0, 2), (2, 4)]) {
            // Slice 2 of the stacking axis, the data rows of this device.
            assert_eq!(shard.block[array_axis], (2, 3), "axis {array_axis}");
            let got = shard.buffer.to_host().unwrap();
            let want = host.block(&[rows, (0, 3)]).unwrap();
            assert_eq!(got.bytes(), want.bytes());
            assert_eq!(got.dims()[array_axis], 1);
        }
    }
}

#[test]
fn stacking_refuses_an_axis_already_in_the_spec_when_strict_and_bad_positions() {
    let mesh = Mesh::auto(&[("stage", 4), ("data", 2)]).unwrap();
    let client = Client::cpu(8).unwrap();
    let host = HostArray::from_slice(&[4], &[1f32, 2., 3., 4.]).unwrap();
    let over_stage = NamedSharding::new(&mesh, p("P('stage')")).unwrap();
    let array = Array::device_put(&client, &host, &over_stage).unwrap();
    let err = logically_stacked(&client, &array, &mesh, "stage", 0, true).unwrap_err();
    assert!(matches!(err, MpmdError::AxisInSpec { .. }), "{err}");
    assert!(err.to_string().contains("'stage'"), "{err}");
    // Not strict: the axis is dropped from the spec, but these shards are not slices of a
    // stacked array (each holds a quarter of the value), which is refused too.
    let err = logically_stacked(&client, &array, &mesh, "stage", 0, false).unwrap_err();
    assert!(matches!(err, MpmdError::Stacking(_)), "{err}");
    let err = logically_stacked(&client, &array, &mesh, "stage", 2, false).unwrap_err();
    assert!(err.to_string().contains("past the 1 dimensions"), "{err}");
    let err = logically_stacked(&client, &array, &mesh, "pipe", 0, false).unwrap_err();
    assert!(err.to_string().contains("no axis \"pipe\""), "{err}");
}
