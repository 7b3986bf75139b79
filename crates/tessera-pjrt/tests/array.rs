//! `Array`: device_put by a NamedSharding, reassembly, deletion and resharding on 8 CPU devices.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_pjrt::{Array, Client, ElementType, HostArray, PjrtError};
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
        shard.buffer.to_host().unwrap().to_typed::<f32>().unwrap(),
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

#[test]
fn an_array_held_in_part_reads_its_own_shards_and_refuses_to_be_read_whole() {
    use tessera_pjrt::Buffer;
    let client = Client::cpu(8).unwrap();
    let mesh = Mesh::auto(&[("x", 2), ("y", 4)]).unwrap();
    let values: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let host = HostArray::from_slice(&[4, 4], &values).unwrap();
    let split = sharding(&mesh, "P('x', 'y')");
    // The shards of devices 0..4 (rows 0..2) only, as one process of a job would hold them.
    let shards: Vec<(i32, Buffer)> = split
        .devices_indices_map(&[4, 4])
        .unwrap()
        .into_iter()
        .filter(|(device, _)| *device < 4)
        .map(|(device, block)| {
            let piece = host.block(&block).unwrap();
            (
                device as i32,
                Buffer::from_host_to(&client, &piece, device as i32).unwrap(),
            )
        })
        .collect();
    let part = Array::from_addressable_shards(
        &[4, 4],
        ElementType::from_dtype(host.dtype()),
        &split,
        shards,
    )
    .unwrap();
    assert!(!part.is_fully_addressable().unwrap());
    assert_eq!(part.addressable_shards().unwrap().len(), 4);
    for shard in part.addressable_shards().unwrap() {
        assert!(shard.block[0].1 <= 2, "{:?}", shard.block);
        let got = shard.buffer.to_host().unwrap().to_typed::<f32>().unwrap();
        assert_eq!(
            got,
            host.block(&shard.block).unwrap().to_typed::<f32>().unwrap()
        );
    }
    let err = part.to_host().unwrap_err();
    assert!(
        matches!(err, PjrtError::NotAddressable { device: 4, .. }),
        "{err}"
    );
    // A device the sharding does not name is refused.
    let stray = Buffer::from_host_to(&client, &host, 0).unwrap();
    let other = sharding(
        &Mesh::new(mesh.abstract_mesh().clone(), (8..16).collect()).unwrap(),
        "P()",
    );
    assert!(
        Array::from_addressable_shards(
            &[4, 4],
            ElementType::from_dtype(host.dtype()),
            &other,
            vec![(0, stray)]
        )
        .is_err()
    );
    // Held whole, it reads as before.
    let whole = Array::device_put(&client, &host, &split).unwrap();
    assert!(whole.is_fully_addressable().unwrap());
}

/// `device_put` places each shard in the sharding's memory kind, for every kind the device
/// reports; `reshard` to a sharding without one brings the array back to the default memory; a
/// kind the device lacks is refused naming the kinds it has.
#[test]
fn memory_kinds_place_shards_and_unknown_kinds_name_the_available_ones() {
    let client = Client::cpu(2).unwrap();
    let memories = client.device(0).unwrap().memories().unwrap();
    let kinds: Vec<String> = memories.iter().map(|m| m.kind.clone()).collect();
    eprintln!("CPU device 0 memories: {memories:?}");
    assert!(kinds.iter().any(|k| k == "device"), "{kinds:?}");
    let mesh = Mesh::auto(&[("x", 2)]).unwrap();
    let plain = sharding(&mesh, "P('x')");
    let host = HostArray::from_slice(&[4, 2], &[1f32, 2., 3., 4., 5., 6., 7., 8.]).unwrap();
    for kind in &kinds {
        let placed = Array::device_put(&client, &host, &plain.clone().with_memory_kind(kind));
        let array = placed.unwrap();
        assert_eq!(array.sharding().memory_kind(), Some(kind.as_str()));
        for shard in array.addressable_shards().unwrap() {
            assert_eq!(&shard.buffer.memory_kind().unwrap(), kind);
        }
        assert_eq!(array.to_host().unwrap(), host);
        let back = array.reshard(&client, &plain).unwrap();
        for shard in back.addressable_shards().unwrap() {
            assert_eq!(
                shard.buffer.memory_kind().unwrap(),
                kinds[0],
                "the default memory"
            );
        }
        assert_eq!(back.to_host().unwrap(), host);
    }
    let err = Array::device_put(&client, &host, &plain.with_memory_kind("far_away")).unwrap_err();
    let PjrtError::UnknownMemoryKind {
        kind, available, ..
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!((kind.as_str(), available), ("far_away", &kinds));
    assert!(
        err.to_string().contains("'far_away'") && err.to_string().contains("\"device\""),
        "{err}"
    );
}

/// Resharding into another memory kind copies each block held whole between memories on the
/// device (`PJRT_Buffer_CopyToMemory`), never through a host copy of the array; a block no
/// device holds whole is cut from one host copy, which [`Array::host_round_trips`] counts.
#[test]
fn reshards_into_a_memory_kind_copy_between_memories_without_the_host() {
    let client = Client::cpu(2).unwrap();
    let kinds: Vec<String> = (client.device(0).unwrap().memories().unwrap())
        .into_iter()
        .map(|m| m.kind)
        .collect();
    let mesh = Mesh::auto(&[("x", 2)]).unwrap();
    let split = sharding(&mesh, "P('x')");
    let host = HostArray::from_slice(&[4, 2], &[1f32, 2., 3., 4., 5., 6., 7., 8.]).unwrap();
    let array = Array::device_put(&client, &host, &split).unwrap();
    for kind in &kinds {
        let before = Array::host_round_trips();
        let moved = array
            .reshard(&client, &split.clone().with_memory_kind(kind))
            .unwrap();
        assert_eq!(Array::host_round_trips(), before, "{kind}");
        for shard in moved.addressable_shards().unwrap() {
            assert_eq!(&shard.buffer.memory_kind().unwrap(), kind);
        }
        assert_eq!(moved.to_host().unwrap(), host);
        // Replicated blocks are held whole by no device of the split array: one host copy.
        let whole = sharding(&mesh, "P()").with_memory_kind(kind);
        let gathered = array.reshard(&client, &whole).unwrap();
        assert_eq!(Array::host_round_trips(), before + 1, "{kind}");
        for shard in gathered.addressable_shards().unwrap() {
            assert_eq!(&shard.buffer.memory_kind().unwrap(), kind);
            assert_eq!(shard.buffer.to_host().unwrap(), host);
        }
    }
}
