//! `MpmdArray`s in a process of a multi-process job are partially addressable, with JAXPP's
//! semantics: the process of group 3 holds group 3's copy of an array replicated on groups 1 and
//! 3 (its local array) but not the first replica (group 1's); an array on another process's
//! group has a shape and type here and no data.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::{DType, ShapedArray};
use tessera_mpmd::{MpmdArray, MpmdError, MpmdMesh, MpmdSharding};
use tessera_pjrt::{Array, Client, ElementType, HostArray};
use tessera_sharding::{Mesh, NamedSharding, PartitionSpec};

fn shape() -> Mesh {
    Mesh::auto(&[("stage", 4), ("data", 2)]).unwrap()
}

fn value() -> HostArray {
    HostArray::from_slice(&[2, 2], &[1f32, 2., 3., 4.]).unwrap()
}

fn on_group(client: &Client, mesh: &MpmdMesh, group: usize) -> Array {
    let sharding = NamedSharding::new(mesh.group(group).unwrap(), PartitionSpec::replicated());
    Array::device_put(client, &value(), &sharding.unwrap()).unwrap()
}

#[test]
fn one_process_holds_every_copy_and_reads_the_first() {
    let client = Client::cpu(8).unwrap();
    let mesh = MpmdMesh::new(shape(), "stage").unwrap();
    let sharding = MpmdSharding::new(&mesh, [1, 3], &PartitionSpec::replicated()).unwrap();
    let copies = vec![on_group(&client, &mesh, 3), on_group(&client, &mesh, 1)];
    let array = MpmdArray::new(copies, sharding).unwrap();
    assert!(array.is_partially_addressable() && array.is_mpmd_replicated());
    assert_eq!(array.to_mpmd_local_arrays().unwrap().len(), 2);
    let first = array.first_mpmd_replica().unwrap();
    assert_eq!(first.sharding().device_set().unwrap(), [2, 3]);
    assert_eq!(first.to_host().unwrap(), value());
}

#[test]
fn the_process_of_group_3_holds_its_copy_but_not_the_first_replica() {
    // The process of group 3 sees its group on its own devices 0 and 1.
    let client = Client::cpu(2).unwrap();
    let mesh = MpmdMesh::for_process(&shape(), "stage", 3).unwrap();
    let sharding = MpmdSharding::new(&mesh, [1, 3], &PartitionSpec::replicated()).unwrap();
    let array = MpmdArray::new(vec![on_group(&client, &mesh, 3)], sharding).unwrap();
    assert!(array.is_partially_addressable());
    assert_eq!(array.mpmd_idxs(), [1, 3]);
    let local = array.to_mpmd_local_array().unwrap().unwrap();
    assert_eq!(local.to_host().unwrap(), value());
    assert!(matches!(
        array.first_mpmd_replica(),
        Err(MpmdError::NotAddressable)
    ));
}

#[test]
fn an_array_on_another_process_has_a_type_and_no_data() {
    let mesh = MpmdMesh::for_process(&shape(), "stage", 0).unwrap();
    let sharding = MpmdSharding::new(&mesh, [2], &PartitionSpec::replicated()).unwrap();
    let mut remote = MpmdArray::remote(&[2, 2], ElementType::F32, sharding);
    assert!(!remote.is_partially_addressable());
    assert_eq!(
        (remote.shape(), remote.dtype()),
        (&[2, 2][..], ElementType::F32)
    );
    assert!(remote.to_mpmd_local_array().unwrap().is_none());
    assert!(matches!(
        remote.first_mpmd_replica(),
        Err(MpmdError::NotAddressable)
    ));
    assert_eq!(remote.ndim(), 2);
    assert_eq!(remote.aval(), ShapedArray::new(DType::F32, &[2, 2]));
    // Its data lives in the process of group 2, which deletes it there.
    assert!(matches!(remote.delete(), Err(MpmdError::NotAddressable)));
    assert!(!remote.is_deleted());
    assert!(remote.block_until_ready().is_ok());
}
