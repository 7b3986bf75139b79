//! `MpmdMesh`: a mesh with one axis designated as the MPMD axis, splitting it into groups that
//! run different programs (pipeline stages). Each group is an SPMD mesh of its own.

use std::collections::HashMap;

use tessera_sharding::{AbstractMesh, Mesh};

use crate::error::{MpmdError, Result};

/// A mesh split into MPMD groups along `mpmd_axis`.
#[derive(Debug, Clone)]
pub struct MpmdMesh {
    mesh: Mesh,
    mpmd_axis: String,
    groups: Vec<Mesh>,
    group_of_device: HashMap<i64, usize>,
    /// The group whose devices programs are lowered for (see [`MpmdMesh::lowering_mesh`]).
    lowering: usize,
}

impl MpmdMesh {
    /// Splits `mesh` along `mpmd_axis`.
    pub fn new(mesh: Mesh, mpmd_axis: &str) -> Result<MpmdMesh> {
        if mesh.axis_index(mpmd_axis).is_none() {
            return Err(MpmdError::UnknownMpmdAxis {
                axis: mpmd_axis.into(),
                mesh: mesh.to_string(),
            });
        }
        let groups = mesh.submeshes_along(mpmd_axis)?;
        let group_of_device = groups
            .iter()
            .enumerate()
            .flat_map(|(g, m)| m.device_ids().iter().map(move |&d| (d, g)))
            .collect();
        Ok(MpmdMesh {
            mesh,
            mpmd_axis: mpmd_axis.into(),
            groups,
            group_of_device,
            lowering: 0,
        })
    }

    /// The mesh as the process running group `local` of a multi-process job sees it: `shape`'s
    /// devices renumbered (rotated) so that the local group holds the process's own devices
    /// `0..group size`, in the order group 0 holds them in one process; the other groups' ids
    /// name devices of other processes and are never used here. Programs are lowered for the
    /// local group, so every process lowers exactly what one process lowers for group 0.
    pub fn for_process(shape: &Mesh, mpmd_axis: &str, local: usize) -> Result<MpmdMesh> {
        let whole = MpmdMesh::new(shape.clone(), mpmd_axis)?;
        let first = whole
            .group(local)?
            .device_ids()
            .iter()
            .copied()
            .min()
            .unwrap_or(0);
        let n = shape.device_ids().len() as i64;
        let ids = shape
            .device_ids()
            .iter()
            .map(|&d| (d - first).rem_euclid(n))
            .collect();
        let mut mesh = MpmdMesh::new(Mesh::new(shape.abstract_mesh().clone(), ids)?, mpmd_axis)?;
        mesh.lowering = local;
        Ok(mesh)
    }

    /// The whole mesh.
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    /// The name of the MPMD axis.
    pub fn mpmd_axis(&self) -> &str {
        &self.mpmd_axis
    }

    /// The number of groups (the size of the MPMD axis).
    pub fn mpmd_dim(&self) -> usize {
        self.groups.len()
    }

    /// Group `index`'s SPMD mesh (the mesh without the MPMD axis).
    pub fn group(&self, index: usize) -> Result<&Mesh> {
        self.groups.get(index).ok_or(MpmdError::UnknownGroup {
            index,
            mpmd_dim: self.groups.len(),
        })
    }

    /// Every group's mesh, in group order.
    pub fn groups(&self) -> &[Mesh] {
        &self.groups
    }

    /// The mesh programs are lowered for: a group's shape (every group has the same shape; in one
    /// process, group 0's devices stand for it, in a process of a multi-process job its own
    /// group's, see [`MpmdMesh::for_process`]).
    pub fn lowering_mesh(&self) -> &Mesh {
        &self.groups[self.lowering]
    }

    /// The group holding `device`.
    pub fn group_of_device(&self, device: i64) -> Option<usize> {
        self.group_of_device.get(&device).copied()
    }

    /// The group whose devices are exactly `devices` (in any order), if any.
    pub fn group_with_devices(&self, devices: &[i64]) -> Option<usize> {
        let mut wanted = devices.to_vec();
        wanted.sort_unstable();
        self.groups.iter().position(|g| {
            let mut ids = g.device_ids().to_vec();
            ids.sort_unstable();
            ids == wanted
        })
    }

    /// The mesh of several groups: the full mesh's axes with the MPMD axis cut down to `ids`
    /// (sorted), keeping device order.
    pub fn submesh(&self, ids: &[usize]) -> Result<Mesh> {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        if let Some(&bad) = ids.iter().find(|&&i| i >= self.mpmd_dim()) {
            return Err(MpmdError::UnknownGroup {
                index: bad,
                mpmd_dim: self.mpmd_dim(),
            });
        }
        let k = self.mesh.axis_index(&self.mpmd_axis).unwrap_or(0);
        let mut sizes = self.mesh.axis_sizes().to_vec();
        sizes[k] = ids.len() as i64;
        let shape = AbstractMesh::from_parts(
            self.mesh.axis_names().to_vec(),
            sizes,
            self.mesh.axis_types().to_vec(),
        )?;
        let devices = (0..shape.size())
            .map(|p| {
                let mut coords = shape.coords(p);
                coords[k] = ids[coords[k] as usize] as i64;
                self.mesh.device_ids()[self.mesh.position(&coords) as usize]
            })
            .collect();
        Ok(Mesh::new(shape, devices)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh() -> MpmdMesh {
        MpmdMesh::new(Mesh::auto(&[("stage", 4), ("data", 2)]).unwrap(), "stage").unwrap()
    }

    #[test]
    fn groups_are_slices_along_the_mpmd_axis() {
        let m = mesh();
        assert_eq!(m.mpmd_dim(), 4);
        assert_eq!(m.group(2).unwrap().device_ids(), [4, 5]);
        assert_eq!(m.group(2).unwrap().axis_names(), ["data"]);
        assert_eq!(m.group_of_device(7), Some(3));
        assert_eq!(m.group_with_devices(&[3, 2]), Some(1));
        assert_eq!(m.group_with_devices(&[1, 2]), None);
        assert!(matches!(
            m.group(4),
            Err(MpmdError::UnknownGroup {
                index: 4,
                mpmd_dim: 4
            })
        ));
    }

    #[test]
    fn submeshes_keep_the_axis_with_the_chosen_groups() {
        let sub = mesh().submesh(&[3, 1]).unwrap();
        assert_eq!(sub.axis_sizes(), [2, 2]);
        assert_eq!(sub.device_ids(), [2, 3, 6, 7]);
    }

    #[test]
    fn a_process_sees_its_group_on_its_own_first_devices() {
        let shape = Mesh::auto(&[("stage", 4), ("data", 2)]).unwrap();
        let m = MpmdMesh::for_process(&shape, "stage", 2).unwrap();
        assert_eq!(m.group(2).unwrap().device_ids(), [0, 1]);
        assert_eq!(m.group(3).unwrap().device_ids(), [2, 3]);
        assert_eq!(m.group(0).unwrap().device_ids(), [4, 5]);
        assert_eq!(m.lowering_mesh().device_ids(), [0, 1]);
        assert_eq!(mesh().lowering_mesh().device_ids(), [0, 1]);
    }

    #[test]
    fn an_unknown_mpmd_axis_is_an_error_naming_it() {
        let err = MpmdMesh::new(Mesh::auto(&[("x", 8)]).unwrap(), "stage").unwrap_err();
        assert!(err.to_string().contains("'stage'"), "{err}");
    }
}
