//! Hostile MpmdMesh construction: unknown axes, a mesh of the MPMD axis alone, groups out of
//! range and empty group lists are typed errors or plain answers, never panics.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_mpmd::MpmdMesh;
use tessera_sharding::Mesh;

#[test]
fn hostile_mpmd_meshes_answer_without_a_panic() {
    let mesh = Mesh::auto(&[("stage", 3), ("data", 2)]).unwrap();
    assert!(MpmdMesh::new(mesh.clone(), "").is_err());
    assert!(MpmdMesh::new(mesh.clone(), "nope").is_err());
    for local in [3, usize::MAX] {
        assert!(
            MpmdMesh::for_process(&mesh, "stage", local).is_err(),
            "{local}"
        );
    }
    let m = MpmdMesh::new(mesh.clone(), "stage").unwrap();
    assert!(m.group(3).is_err());
    assert!(m.group(usize::MAX).is_err());
    assert!(m.submesh(&[]).is_err());
    assert!(m.submesh(&[0, usize::MAX]).is_err());
    assert_eq!(m.submesh(&[2, 0, 2]).unwrap().device_ids(), [0, 1, 4, 5]);
    assert_eq!(m.group_with_devices(&[]), None);
    assert_eq!(m.group_of_device(-1), None);
    // The MPMD axis alone: each group is one device on a mesh of no axes.
    let only = MpmdMesh::new(Mesh::auto(&[("stage", 4)]).unwrap(), "stage").unwrap();
    assert_eq!(only.mpmd_dim(), 4);
    assert_eq!(only.group(3).unwrap().device_ids(), [3]);
    let local = MpmdMesh::for_process(&Mesh::auto(&[("stage", 4)]).unwrap(), "stage", 2).unwrap();
    assert_eq!(local.my_mpmd_axis_index(), Some(2));
    // Sparse device ids rotate into ids that may collide: an error, not a panic.
    let sparse = Mesh::new(
        tessera_sharding::AbstractMesh::auto(&[("stage", 2), ("data", 2)]).unwrap(),
        vec![0, 5, 100, 7],
    )
    .unwrap();
    let _ = MpmdMesh::for_process(&sparse, "stage", 1);
}
