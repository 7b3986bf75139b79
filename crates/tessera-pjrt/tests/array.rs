//! `Array`: device_put by a NamedSharding, reassembly, deletion and resharding on 8 CPU devices.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_pjrt::{Array, Client, HostArray, PjrtError};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

fn sharding(mesh: &Mesh, spec: &str) -> NamedSharding {
    NamedSharding::new(mesh, PartitionSpec::parse(spec).unwrap()).unwrap()
}

#[test]
fn device_put_splits_by_the_sharding_and_to_host_reassembles() {
    let client = Client::cpu(8).unwrap();
    let mesh = Mesh::auto(&[("data", 2), ("model", 4)]).unwrap();
    let values: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let host = HostArray::from_slice(&[8, 8], &values).unwrap();
    let array = Array::device_put(&client, &host, &sharding(&mesh, "P('data', 'model')")).unwrap();
    let shards = array.addressable_shards().unwrap();
    assert_eq!(shards.len(), 8);
    // Device 5 sits at mesh coordinates (1, 1): rows 4..8, columns 2..4.
    let shard = shards.iter().find(|s| s.device == 5).unwrap();
    assert_eq!(shard.block, [(4, 8), (2, 4)]);
    assert_eq!(shard.buffer.dims().unwrap(), [4, 2]);
    assert_eq!(
        shard.buffer.to_host().unwrap().to_vec::<f32>().unwrap(),
        [34., 35., 42., 43., 50., 51., 58., 59.]
    );
    assert_eq!(array.to_host().unwrap(), host);
}

#[test]
fn replicated_dimensions_hold_full_copies_and_resharding_keeps_values() {
    let client = Client::cpu(8).unwrap();
    let mesh = Mesh::auto(&[("data", 2), ("model", 4)]).unwrap();
    let host = HostArray::from_slice(&[4, 2], &[1i32, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    let by_rows = Array::device_put(&client, &host, &sharding(&mesh, "P('model')")).unwrap();
    assert!(
        by_rows
            .addressable_shards()
            .unwrap()
            .iter()
            .all(|s| s.buffer.dims().unwrap() == [1, 2])
    );
    let replicated = by_rows.reshard(&client, &sharding(&mesh, "P()")).unwrap();
    assert!(
        replicated
            .addressable_shards()
            .unwrap()
            .iter()
            .all(|s| s.buffer.to_host().unwrap() == host)
    );
    assert_eq!(replicated.to_host().unwrap(), host);
}

#[test]
fn a_deleted_array_refuses_use_and_bad_shapes_are_errors() {
    let client = Client::cpu(8).unwrap();
    let mesh = Mesh::auto(&[("x", 8)]).unwrap();
    let host = HostArray::from_slice(&[8], &[0f32; 8]).unwrap();
    let mut array = Array::device_put(&client, &host, &sharding(&mesh, "P('x')")).unwrap();
    array.delete();
    assert!(array.is_deleted());
    assert!(matches!(array.to_host(), Err(PjrtError::Deleted)));
    let odd = HostArray::from_slice(&[6], &[0f32; 6]).unwrap();
    let err = Array::device_put(&client, &odd, &sharding(&mesh, "P('x')")).unwrap_err();
    assert!(matches!(err, PjrtError::Sharding(_)), "{err}");
}
