//! `MpmdMesh`: a mesh with one axis designated as the MPMD axis, splitting it into groups that
//! run different programs (pipeline stages). Each group is an SPMD mesh of its own.
//!
//! A mesh made by [`MpmdMesh::new`] is one process's: it holds every group
//! ([`MpmdMesh::my_mpmd_axis_index`] is `None`). A mesh made by [`MpmdMesh::for_process`] is the
//! view of the process running one group of a multi-process job: it knows that group
//! ([`MpmdMesh::my_mpmd_axis_index`], [`MpmdMesh::my_mpmd_group_mesh`]) and spans several
//! processes when it has several groups ([`MpmdMesh::is_multi_process`]).

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
    /// The group this process runs, in a mesh made by [`MpmdMesh::for_process`]; programs are
    /// lowered for its devices (group 0's otherwise, see [`MpmdMesh::lowering_mesh`]).
    local: Option<usize>,
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
            local: None,
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
        mesh.local = Some(local);
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
        &self.groups[self.local.unwrap_or(0)]
    }

    /// The group this process runs (JAXPP's `my_mpmd_axis_index`), in a mesh made by
    /// [`MpmdMesh::for_process`]. `None` in a mesh made by [`MpmdMesh::new`]: one process holds
    /// every group, so none is its own (JAXPP raises there).
    pub fn my_mpmd_axis_index(&self) -> Option<usize> {
        self.local
    }

    /// The mesh of this process's group with the MPMD axis kept, of size 1 (JAXPP's
    /// `my_mpmd_group_mesh`); `None` where [`MpmdMesh::my_mpmd_axis_index`] is.
    pub fn my_mpmd_group_mesh(&self) -> Option<Mesh> {
        // `local` was checked to be a group by `for_process`, so the submesh exists.
        self.local.and_then(|g| self.submesh(&[g]).ok())
    }

    /// Whether the mesh's devices belong to more than one process (JAX's `is_multi_process`): a
    /// mesh made by [`MpmdMesh::for_process`] with more than one group, each group run by its own
    /// process. A mesh made by [`MpmdMesh::new`] is one process's.
    pub fn is_multi_process(&self) -> bool {
        self.local.is_some() && self.mpmd_dim() > 1
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
    fn a_process_mesh_knows_its_group_and_a_one_process_mesh_has_none() {
        let one = mesh();
        assert_eq!(one.my_mpmd_axis_index(), None);
        assert_eq!(one.my_mpmd_group_mesh(), None);
        assert!(!one.is_multi_process());

        let shape = Mesh::auto(&[("stage", 4), ("data", 2)]).unwrap();
        let m = MpmdMesh::for_process(&shape, "stage", 2).unwrap();
        assert_eq!(m.my_mpmd_axis_index(), Some(2));
        assert!(m.is_multi_process());
        let own = m.my_mpmd_group_mesh().unwrap();
        assert_eq!(own.axis_names(), ["stage", "data"]);
        assert_eq!(own.axis_sizes(), [1, 2]);
        assert_eq!(own.device_ids(), m.lowering_mesh().device_ids());
        assert!(matches!(
            MpmdMesh::for_process(&shape, "stage", 4),
            Err(MpmdError::UnknownGroup {
                index: 4,
                mpmd_dim: 4
            })
        ));

        // One group run by one process: its own, on one process.
        let single = Mesh::auto(&[("stage", 1), ("data", 2)]).unwrap();
        let m = MpmdMesh::for_process(&single, "stage", 0).unwrap();
        assert_eq!(m.my_mpmd_axis_index(), Some(0));
        assert!(!m.is_multi_process());
    }

    #[test]
    fn an_unknown_mpmd_axis_is_an_error_naming_it() {
        let err = MpmdMesh::new(Mesh::auto(&[("x", 8)]).unwrap(), "stage").unwrap_err();
        assert!(err.to_string().contains("'stage'"), "{err}");
    }
}
