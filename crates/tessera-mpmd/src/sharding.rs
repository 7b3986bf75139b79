//! `MpmdSharding`: which MPMD groups hold an array, and how it is sharded inside each group.

use std::collections::BTreeSet;
use std::sync::Arc;

use tessera_sharding::{DimSpec, NamedSharding, PartitionSpec};

use crate::error::{MpmdError, Result};
use crate::mesh::MpmdMesh;

/// The placement of an array on an [`MpmdMesh`]: the groups holding it (several when it is
/// replicated across groups, e.g. a weight used by two stages) and its spec within a group.
#[derive(Debug, Clone)]
pub struct MpmdSharding {
    /// Shared: every array of a step carries its sharding, and a clone must stay cheap.
    mesh: Arc<MpmdMesh>,
    groups: BTreeSet<usize>,
    spec: PartitionSpec,
}

impl MpmdSharding {
    /// Builds a sharding; the MPMD axis is removed from `spec` (as JAXPP canonicalises it).
    pub fn new(
        mesh: &MpmdMesh,
        groups: impl IntoIterator<Item = usize>,
        spec: &PartitionSpec,
    ) -> Result<Self> {
        let groups: BTreeSet<usize> = groups.into_iter().collect();
        if let Some(&bad) = groups.iter().find(|&&g| g >= mesh.mpmd_dim()) {
            return Err(MpmdError::UnknownGroup {
                index: bad,
                mpmd_dim: mesh.mpmd_dim(),
            });
        }
        let spec = filter_axis(spec, mesh.mpmd_axis());
        NamedSharding::new(mesh.lowering_mesh(), spec.clone())?;
        Ok(MpmdSharding {
            mesh: Arc::new(mesh.clone()),
            groups,
            spec,
        })
    }

    /// The mesh.
    pub fn mpmd_mesh(&self) -> &MpmdMesh {
        &self.mesh
    }

    /// The groups holding the array, ascending.
    pub fn groups(&self) -> Vec<usize> {
        self.groups.iter().copied().collect()
    }

    /// The spec within one group (never mentions the MPMD axis).
    pub fn spec(&self) -> &PartitionSpec {
        &self.spec
    }

    /// The sharding within group `group`.
    pub fn group_sharding(&self, group: usize) -> Result<NamedSharding> {
        Ok(NamedSharding::new(
            self.mesh.group(group)?,
            self.spec.clone(),
        )?)
    }

    /// A sharding over every device of the held groups (replicated across them).
    pub fn sharding(&self) -> Result<NamedSharding> {
        Ok(NamedSharding::new(
            &self.mesh.submesh(&self.groups())?,
            self.spec.clone(),
        )?)
    }
}

/// Removes `axis` from every dimension of `spec` (JAXPP's `filter_axes`).
pub fn filter_axis(spec: &PartitionSpec, axis: &str) -> PartitionSpec {
    let dims = spec
        .dims()
        .iter()
        .map(|d| match d {
            DimSpec::Axes(axes) => {
                let kept: Vec<&String> = axes.iter().filter(|a| *a != axis).collect();
                DimSpec::from_axes(&kept)
            }
            other => other.clone(),
        })
        .collect();
    PartitionSpec::new(dims)
}

#[cfg(test)]
mod tests {
    use tessera_sharding::Mesh;

    use super::*;

    #[test]
    fn the_mpmd_axis_is_filtered_out_of_the_spec() {
        let mesh =
            MpmdMesh::new(Mesh::auto(&[("stage", 2), ("data", 4)]).unwrap(), "stage").unwrap();
        let spec = PartitionSpec::parse("P(('stage', 'data'), 'stage')").unwrap();
        let sharding = MpmdSharding::new(&mesh, [1], &spec).unwrap();
        assert_eq!(sharding.spec().to_string(), "P('data', None)");
        assert_eq!(
            sharding
                .group_sharding(1)
                .unwrap()
                .concrete_mesh()
                .unwrap()
                .device_ids(),
            [4, 5, 6, 7]
        );
        assert_eq!(sharding.sharding().unwrap().num_devices(), 4);
        let both = MpmdSharding::new(&mesh, [0, 1], &spec).unwrap();
        assert_eq!(both.sharding().unwrap().num_devices(), 8);
        assert!(MpmdSharding::new(&mesh, [2], &spec).is_err());
    }
}
