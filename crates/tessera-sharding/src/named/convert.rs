//! NamedSharding ⇄ HloSharding: JAX's iota-tile construction and its inverse for a given mesh.

use super::{NamedSharding, get_array_mapping, leftover_kind};
use crate::error::{Result, ShardingError};
use crate::hlo::iota::transpose_array;
use crate::hlo::{HloSharding, SubgroupType, TileAssignment};
use crate::mesh::{AxisType, Mesh};
use crate::spec::{DimSpec, PartitionSpec};

/// JAX's `named_sharding_to_xla_hlo_sharding`.
pub(super) fn to_hlo(s: &NamedSharding, rank: usize) -> Result<HloSharding> {
    let mesh = &s.mesh;
    let mapping = get_array_mapping(&s.spec);
    let has_manual = mesh.axis_types().contains(&AxisType::Manual);
    let leftover: Vec<usize> = (0..mesh.rank())
        .filter(|&i| !mapping.iter().any(|(a, _)| *a == mesh.axis_names()[i]))
        .collect();
    // A Manual axis (of size > 1) may shard a dimension only when every mesh axis is in the
    // spec; otherwise the leftover axes become subgroups and the Manual one belongs among them.
    if !leftover.is_empty() {
        let manual = mapping.iter().find(|(a, _)| {
            mesh.axis_type(a) == Some(AxisType::Manual) && mesh.axis_size(a) > Some(1)
        });
        if let Some((axis, _)) = manual {
            return Err(ShardingError::ManualAxisInSpec {
                axis: axis.clone(),
                spec: s.spec.to_string(),
            });
        }
    }
    if mesh.size() == 1 || (leftover.len() == mesh.rank() && !has_manual) {
        return Ok(HloSharding::Replicated);
    }
    let mut dims = vec![1i64; rank];
    let mut perm = Vec::with_capacity(mesh.rank());
    let mut by_dim = mapping.clone();
    by_dim.sort_by_key(|(_, d)| *d);
    for (axis, dim) in &by_dim {
        let k = mesh.axis_index(axis).unwrap_or(0);
        dims[*dim] *= mesh.axis_sizes()[k];
        perm.push(k);
    }
    // Leftover axes become trailing subgroups: replicated ones first, then manual ones (JAX sorts
    // the kinds by their OpSharding number); XLA then normalises the order.
    let mut types = Vec::new();
    for kind in [SubgroupType::Replicated, SubgroupType::Manual] {
        let axes: Vec<usize> = leftover
            .iter()
            .copied()
            .filter(|&i| leftover_kind(mesh.axis_types()[i]) == kind)
            .collect();
        if axes.is_empty() {
            continue;
        }
        dims.push(axes.iter().map(|&i| mesh.axis_sizes()[i]).product());
        perm.extend(&axes);
        types.push(kind);
    }
    match &s.logical_device_ids {
        None => HloSharding::iota_tile(&dims, mesh.axis_sizes(), &perm, &types),
        Some(ids) => {
            let (_, devices) = transpose_array(mesh.axis_sizes(), ids, &perm);
            HloSharding::subgroup(TileAssignment::Explicit { dims, devices }, &types)
        }
    }
}

/// JAX's `_gspmd_to_named_sharding`: recovers the spec from the order in which mesh axes appear
/// in the tile assignment, then checks that the spec gives back the same sharding.
pub(super) fn from_hlo(hlo: &HloSharding, mesh: &Mesh) -> Result<NamedSharding> {
    let fail = |reason: &str| ShardingError::NotRepresentable {
        sharding: hlo.to_string(),
        mesh: mesh.to_string(),
        reason: reason.to_string(),
    };
    let (spec, rank) = match hlo {
        HloSharding::Replicated | HloSharding::Manual => (PartitionSpec::replicated(), 0),
        HloSharding::Tiled(t) => {
            let devices = t.tile_assignment().devices();
            if devices.len() as i64 != mesh.size() {
                return Err(fail("the sharding does not use every device of the mesh"));
            }
            let order = axis_order(mesh, &devices).ok_or_else(|| {
                fail("the tile assignment is not a transpose of the mesh's device order")
            })?;
            let rank = t.data_rank();
            let tile_dims = &t.tile_assignment().dims()[..rank];
            (
                spec_from_order(mesh, &order, tile_dims)
                    .ok_or_else(|| fail("axes do not divide"))?,
                rank,
            )
        }
        _ => {
            return Err(fail(
                "only replicated, manual and tiled shardings have a spec",
            ));
        }
    };
    let named = NamedSharding::new(mesh, spec)?;
    let back = named.to_hlo_sharding(rank)?;
    if same_sharding(&back, hlo) {
        Ok(named)
    } else {
        Err(fail(&format!(
            "the closest spec, {}, gives {back}",
            named.spec
        )))
    }
}

/// The mesh axes (of size > 1), major to minor, whose transpose of the mesh lays out `devices`.
fn axis_order(mesh: &Mesh, devices: &[i64]) -> Option<Vec<usize>> {
    let sizes = mesh.axis_sizes();
    let mut strides = vec![1i64; sizes.len()];
    for i in (0..sizes.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * sizes[i + 1];
    }
    let mut current: Vec<i64> = devices.to_vec();
    let mut minor_first = Vec::new();
    while current.len() > 1 {
        if current[0] != 0 {
            return None;
        }
        let stride = current[1];
        let k = (0..sizes.len())
            .find(|&k| sizes[k] > 1 && strides[k] == stride && !minor_first.contains(&k))?;
        let size = sizes[k] as usize;
        if !current.len().is_multiple_of(size) {
            return None;
        }
        current = current.iter().step_by(size).copied().collect();
        minor_first.push(k);
    }
    minor_first.reverse();
    Some(minor_first)
}

/// Assigns the ordered axes to tile dimensions greedily, major to minor.
fn spec_from_order(mesh: &Mesh, order: &[usize], tile_dims: &[i64]) -> Option<PartitionSpec> {
    let mut axes = order.iter();
    let mut dims = Vec::with_capacity(tile_dims.len());
    for &size in tile_dims {
        let mut left = size;
        let mut names = Vec::new();
        while left > 1 {
            let &k = axes.next()?;
            let axis_size = mesh.axis_sizes()[k];
            if left % axis_size != 0 {
                return None;
            }
            left /= axis_size;
            names.push(mesh.axis_names()[k].as_str());
        }
        dims.push(DimSpec::from_axes(&names));
    }
    while dims.last() == Some(&DimSpec::Replicated) {
        dims.pop();
    }
    Some(PartitionSpec::new(dims))
}

/// Whether two shardings place the same data on the same devices (iota or explicit alike).
pub(crate) fn same_sharding(a: &HloSharding, b: &HloSharding) -> bool {
    match (a, b) {
        (HloSharding::Tiled(x), HloSharding::Tiled(y)) => {
            x.last_tile_dim_replicate() == y.last_tile_dim_replicate()
                && x.subgroup_types() == y.subgroup_types()
                && x.tile_assignment().dims() == y.tile_assignment().dims()
                && x.tile_assignment().devices() == y.tile_assignment().devices()
        }
        (HloSharding::Tuple(x), HloSharding::Tuple(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_sharding(p, q))
        }
        _ => a == b,
    }
}
