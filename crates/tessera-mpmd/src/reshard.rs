//! Moving arrays between the SPMD layout (one array over the whole mesh) and the MPMD layout
//! (copies on the groups that use them), in memory-bounded batches (JAXPP's `spmd_to_mpmd_reshard`
//! and `mpmd_to_spmd_reshard`).

use std::collections::BTreeMap;

use tessera_pjrt::{Array, Client};
use tessera_sharding::NamedSharding;

use crate::array::MpmdArray;
use crate::error::{MpmdError, Result};
use crate::mesh::MpmdMesh;
use crate::sharding::MpmdSharding;

/// Reshards SPMD arrays to MPMD arrays, consuming the inputs. Arrays whose sharding names no
/// group go to group 0. `threshold` bounds the bytes moved per batch (default: a third of the
/// smallest free device memory, or unbounded where the plugin reports none).
pub fn spmd_to_mpmd_reshard(
    client: &Client,
    mesh: &MpmdMesh,
    arrays: Vec<Array>,
    shardings: Vec<MpmdSharding>,
    threshold: Option<u64>,
) -> Result<Vec<MpmdArray>> {
    let shardings = targets(mesh, arrays.len(), shardings)?;
    let sizes = arrays
        .iter()
        .map(Array::shard_bytes)
        .collect::<Result<Vec<_>, _>>()?;
    let first_groups: Vec<usize> = shardings.iter().map(|s| s.groups()[0]).collect();
    let order = interleaved_order(&sizes, &first_groups);
    let scaled: Vec<u64> = order
        .iter()
        .map(|&i| (sizes[i] * mesh.mpmd_dim()) as u64)
        .collect();
    let threshold = threshold.unwrap_or_else(|| default_threshold(client));
    let mut slots: Vec<Option<Array>> = arrays.into_iter().map(Some).collect();
    let mut done: BTreeMap<usize, MpmdArray> = BTreeMap::new();
    for batch in group_by_size_threshold(&scaled, threshold) {
        for i in batch.into_iter().map(|k| order[k]) {
            let Some(source) = slots[i].take() else {
                continue;
            };
            // Split over the MPMD axis: no device holds a group's block whole, so one program
            // over the mesh moves the blocks (JAXPP's `jit(identity, out_shardings)`).
            let first = shardings[i].group_sharding(shardings[i].groups()[0])?;
            if !holds_every_block(&source, &first)?
                && let Some(per_group) = crate::reshard_device::replicate_over_groups(
                    client,
                    mesh,
                    &source,
                    &shardings[i],
                )?
            {
                let arrays = per_group.into_values().collect();
                done.insert(i, MpmdArray::new(arrays, shardings[i].clone())?);
                continue;
            }
            let mut per_group: Vec<Array> = Vec::new();
            for group in shardings[i].groups() {
                let target = shardings[i].group_sharding(group)?;
                // Groups hold the same blocks on meshes of one shape: a group whose blocks the
                // source does not hold whole is copied, device to device, from the first
                // group's copy, so a source the program above does not take (on another mesh,
                // in another memory) goes through the host at most once.
                let from = match per_group.first() {
                    Some(first) if !holds_every_block(&source, &target)? => first,
                    _ => &source,
                };
                per_group.push(from.reshard(client, &target)?);
            }
            done.insert(i, MpmdArray::new(per_group, shardings[i].clone())?);
        }
    }
    Ok(done.into_values().collect())
}

/// Whether some shard of `array` holds each block `target` lays out, so that resharding to it
/// copies device to device only.
fn holds_every_block(array: &Array, target: &NamedSharding) -> Result<bool> {
    let shards = array.addressable_shards()?;
    Ok(target
        .devices_indices_map(array.shape())?
        .iter()
        .all(|(_, block)| shards.iter().any(|s| &s.block == block)))
}

/// Reshards MPMD arrays back to SPMD arrays with the given shardings, consuming the inputs; each
/// value is read from its first group. The arrays move largest first, in batches of at most
/// `threshold` bytes ([`mpmd_to_spmd_batches`]; default: a third of the smallest free device
/// memory, as [`spmd_to_mpmd_reshard`]). In one process a batch only orders the work: each array
/// is resharded on its own.
pub fn mpmd_to_spmd_reshard(
    client: &Client,
    mesh: &MpmdMesh,
    arrays: Vec<MpmdArray>,
    shardings: Vec<NamedSharding>,
    threshold: Option<u64>,
) -> Result<Vec<Array>> {
    same_length(arrays.len(), shardings.len())?;
    let threshold = threshold.unwrap_or_else(|| default_threshold(client));
    let batches = mpmd_to_spmd_batches(mesh, &arrays, threshold)?;
    let mut done: BTreeMap<usize, Array> = BTreeMap::new();
    for i in batches.into_iter().flatten() {
        let moved = arrays[i]
            .first_mpmd_replica()?
            .reshard(client, &shardings[i])?;
        done.insert(i, moved);
    }
    Ok(done.into_values().collect())
}

/// The batches (indices into `arrays`) [`mpmd_to_spmd_reshard`] moves, as JAXPP's
/// `mpmd_to_spmd_reshard` cuts them: arrays sorted by the bytes of one shard within their group,
/// largest first, each counted `mpmd_dim` times, in batches of at most `threshold` bytes. Every
/// process computes the same batches (sizes come from shapes and shardings, not from data).
pub fn mpmd_to_spmd_batches(
    mesh: &MpmdMesh,
    arrays: &[MpmdArray],
    threshold: u64,
) -> Result<Vec<Vec<usize>>> {
    let mut sizes = Vec::with_capacity(arrays.len());
    for array in arrays {
        let shard: Vec<i64> = match array.mpmd_idxs().first() {
            Some(&g) => array
                .mpmd_sharding()
                .group_sharding(g)?
                .shard_shape(array.shape())?,
            None => array.shape().to_vec(),
        };
        let elements: i64 = shard.iter().product();
        sizes.push(elements.max(0) as u64 * array.dtype().size_in_bytes() as u64);
    }
    let mut order: Vec<usize> = (0..arrays.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
    let scaled: Vec<u64> = order
        .iter()
        .map(|&i| sizes[i].saturating_mul(mesh.mpmd_dim() as u64))
        .collect();
    Ok(group_by_size_threshold(&scaled, threshold)
        .into_iter()
        .map(|batch| batch.into_iter().map(|k| order[k]).collect())
        .collect())
}

/// One sharding per array, or [`MpmdError::LengthMismatch`].
pub(crate) fn same_length(arrays: usize, shardings: usize) -> Result<()> {
    match arrays == shardings {
        true => Ok(()),
        false => Err(MpmdError::LengthMismatch { arrays, shardings }),
    }
}

/// The target shardings of `count` arrays, an array whose sharding names no group going to
/// group 0 (as JAXPP places unused arrays).
pub(crate) fn targets(
    mesh: &MpmdMesh,
    count: usize,
    shardings: Vec<MpmdSharding>,
) -> Result<Vec<MpmdSharding>> {
    same_length(count, shardings.len())?;
    shardings
        .into_iter()
        .map(|s| match s.groups().is_empty() {
            true => MpmdSharding::new(mesh, [0], s.spec()),
            false => Ok(s),
        })
        .collect()
}

/// The order JAXPP moves arrays in: round-robin over the first group of each array, largest
/// first within a group, so that every group's memory fills evenly.
pub fn interleaved_order(sizes: &[usize], groups: &[usize]) -> Vec<usize> {
    let mut by_group: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, &g) in groups.iter().enumerate() {
        by_group.entry(g).or_default().push(i);
    }
    for list in by_group.values_mut() {
        list.sort_by_key(|&i| sizes[i]);
    }
    let mut order = Vec::with_capacity(sizes.len());
    while by_group.values().any(|l| !l.is_empty()) {
        for list in by_group.values_mut() {
            if let Some(i) = list.pop() {
                order.push(i);
            }
        }
    }
    order
}

/// Splits consecutive entries into batches whose total size stays within `threshold` (an entry
/// larger than the threshold gets a batch of its own).
pub fn group_by_size_threshold(sizes: &[u64], threshold: u64) -> Vec<Vec<usize>> {
    let mut batches = Vec::new();
    let (mut current, mut total) = (Vec::new(), 0u64);
    for (i, &size) in sizes.iter().enumerate() {
        if total.saturating_add(size) > threshold && !current.is_empty() {
            batches.push(std::mem::take(&mut current));
            total = 0;
        }
        current.push(i);
        total = total.saturating_add(size);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// A third of the smallest free memory over the client's devices (JAXPP's
/// `_get_working_memory_threshold`); unbounded where the plugin reports no memory limits (the
/// CPU plugin).
pub(crate) fn default_threshold(client: &Client) -> u64 {
    let free = client.addressable_devices().ok().and_then(|devices| {
        devices
            .iter()
            .map(|d| d.available_memory())
            .collect::<Option<Vec<_>>>()
    });
    threshold_of_free(free.as_deref())
}

/// A third of the smallest of `free`, each device's `bytes_limit - peak_bytes_in_use` (JAXPP's
/// `min(...) // 3`; a device over its limit gives 0); unbounded when a device reports no limit
/// (`None`) or there are no devices.
fn threshold_of_free(free: Option<&[i64]>) -> u64 {
    free.and_then(|free| free.iter().copied().min())
        .map_or(u64::MAX, |bytes| (bytes.max(0) / 3) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_interleaves_groups_largest_first() {
        let sizes = [10, 50, 20, 40, 30];
        let groups = [0, 0, 1, 1, 0];
        assert_eq!(interleaved_order(&sizes, &groups), [1, 3, 4, 2, 0]);
    }

    #[test]
    fn the_default_threshold_is_a_third_of_the_least_free_memory() {
        assert_eq!(threshold_of_free(Some(&[900, 301, 600])), 100);
        assert_eq!(threshold_of_free(Some(&[3 << 30])), 1 << 30);
        // A device past its limit leaves no room to move anything in one batch.
        assert_eq!(threshold_of_free(Some(&[900, -5])), 0);
        // No limit reported (the CPU plugin), or no devices: unbounded.
        assert_eq!(threshold_of_free(None), u64::MAX);
        assert_eq!(threshold_of_free(Some(&[])), u64::MAX);
    }

    #[test]
    fn batches_respect_the_threshold() {
        assert_eq!(
            group_by_size_threshold(&[4, 4, 4, 10, 1], 8),
            vec![vec![0, 1], vec![2], vec![3], vec![4]]
        );
        assert_eq!(group_by_size_threshold(&[], 8), Vec::<Vec<usize>>::new());
        assert_eq!(
            group_by_size_threshold(&[1, 2, 3], u64::MAX),
            vec![vec![0, 1, 2]]
        );
    }
}
