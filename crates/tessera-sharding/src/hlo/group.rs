//! XLA's normalisation of partially replicated and subgrouped tilings (`PartialTile`,
//! `Subgroup`): the rules that decide which text a sharding prints as.

use super::iota::{IotaTileAssignment, TileAssignment, transpose_array};
use super::{HloSharding, SubgroupType, Tiled};

fn tiled(tiles: TileAssignment, replicate: bool, types: Vec<SubgroupType>) -> HloSharding {
    HloSharding::Tiled(Tiled {
        tiles,
        last_tile_dim_replicate: replicate,
        subgroup_types: types,
    })
}

/// `PartialTile`: the last tile dimension replicates. Devices inside each replication group are
/// sorted; an iota stays an iota when its minor dimensions can be grouped in order.
pub(super) fn partial_tile(tiles: TileAssignment) -> HloSharding {
    let dims = tiles.dims().to_vec();
    let n = tiles.num_elements();
    let Some(&group) = dims.last() else {
        return HloSharding::Replicated;
    };
    if dims.len() == 1 || group == n {
        return HloSharding::Replicated;
    }
    if group == 1 {
        return tiled(tiles.reshape(&dims[..dims.len() - 1]), false, Vec::new());
    }
    if let TileAssignment::Iota(iota) = &tiles {
        let (rd, perm) = (iota.reshape_dims(), iota.transpose_perm());
        if perm.last().is_some_and(|&p| rd[p] == group) {
            return tiled(tiles, true, Vec::new());
        }
        let regrouped = group_minor_dims_sorted(rd, perm, group)
            .and_then(|(new_rd, new_perm)| IotaTileAssignment::new(&dims, &new_rd, &new_perm));
        if let Some(t) = regrouped {
            return tiled(TileAssignment::Iota(t), true, Vec::new());
        }
    }
    let mut devices = tiles.devices();
    for chunk in devices.chunks_mut(group as usize) {
        chunk.sort_unstable();
    }
    tiled(TileAssignment::Explicit { dims, devices }, true, Vec::new())
}

/// Splits the minor reshape dims of an iota so that the last `group` elements of the permuted
/// order form whole dims, then sorts those dims into increasing order (XLA's
/// `GroupMinorIotaDimsSorted`). `None` when the sizes do not divide.
fn group_minor_dims_sorted(
    dims: &[i64],
    perm: &[usize],
    mut group: i64,
) -> Option<(Vec<i64>, Vec<usize>)> {
    let mut grouped = 0;
    let mut split: Option<(usize, i64)> = None;
    for &dim in perm.iter().rev() {
        let size = dims[dim];
        grouped += 1;
        if size <= group {
            if group % size != 0 {
                return None;
            }
            group /= size;
        } else {
            if size % group != 0 {
                return None;
            }
            split = Some((dim, size / group));
            break;
        }
    }
    let Some((split_i, major)) = split else {
        let mut new_perm = perm.to_vec();
        let start = new_perm.len() - grouped;
        new_perm[start..].sort();
        return Some((dims.to_vec(), new_perm));
    };
    let mut new_dims = Vec::with_capacity(dims.len() + 1);
    new_dims.extend_from_slice(&dims[..split_i]);
    new_dims.push(major);
    new_dims.push(dims[split_i] / major);
    new_dims.extend_from_slice(&dims[split_i + 1..]);
    let shift = |p: usize| if p <= split_i { p } else { p + 1 };
    let mut new_perm = Vec::with_capacity(perm.len() + 1);
    for &p in perm {
        new_perm.push(shift(p));
        if p == split_i {
            new_perm.push(split_i + 1);
        }
    }
    let start = new_perm.len() - grouped;
    new_perm[start..].sort();
    Some((new_dims, new_perm))
}

/// `Subgroup`: the trailing `types.len()` tile dims are subgroups of the given kinds.
pub(super) fn subgroup(tiles: TileAssignment, types: &[SubgroupType]) -> HloSharding {
    if types.is_empty() {
        return tiled(tiles, false, Vec::new());
    }
    let dims = tiles.dims().to_vec();
    let data_rank = dims.len() - types.len();
    let data_tiles: i64 = dims[..data_rank].iter().product();
    if data_tiles == 1 && types.iter().all(|t| *t == types[0]) {
        return match types[0] {
            SubgroupType::Manual => HloSharding::Manual,
            SubgroupType::Replicated => HloSharding::Replicated,
            SubgroupType::Unreduced => HloSharding::Unreduced,
        };
    }
    let order = [
        SubgroupType::Manual,
        SubgroupType::Unreduced,
        SubgroupType::Replicated,
    ];
    let mut by_type: [Vec<usize>; 3] = Default::default();
    let mut removed = Vec::new();
    let mut needs_merging = false;
    for (i, ty) in types.iter().enumerate() {
        let d = data_rank + i;
        if dims[d] == 1 {
            removed.push(d);
            needs_merging = true;
            continue;
        }
        let slot = &mut by_type[order.iter().position(|o| o == ty).unwrap_or(0)];
        needs_merging |= !slot.is_empty();
        slot.push(d);
    }
    needs_merging |= by_type.iter().filter(|s| !s.is_empty()).count() > 1;
    if !needs_merging {
        return finish(tiles, types.to_vec());
    }
    let mut perm: Vec<usize> = (0..data_rank).collect();
    let mut merged = dims[..data_rank].to_vec();
    let mut merged_types = Vec::new();
    for (ty, group) in order.iter().zip(&by_type) {
        if group.is_empty() {
            continue;
        }
        perm.extend(group);
        merged.push(group.iter().map(|&d| dims[d]).product());
        merged_types.push(*ty);
    }
    if merged.is_empty() {
        // Only size-one subgroups and no data dims: a single device holding everything.
        return HloSharding::Replicated;
    }
    perm.extend(&removed);
    let new_tiles = match tiles.transpose(&perm) {
        TileAssignment::Iota(t) => {
            match IotaTileAssignment::new(&merged, t.reshape_dims(), t.transpose_perm()) {
                Some(t) => TileAssignment::Iota(t),
                None => explicit(&tiles, &perm, &merged),
            }
        }
        other => TileAssignment::Explicit {
            dims: merged.clone(),
            devices: other.devices(),
        },
    };
    finish(new_tiles, merged_types)
}

fn explicit(tiles: &TileAssignment, perm: &[usize], merged: &[i64]) -> TileAssignment {
    let (_, devices) = transpose_array(tiles.dims(), &tiles.devices(), perm);
    TileAssignment::Explicit {
        dims: merged.to_vec(),
        devices,
    }
}

/// XLA's `create_sharding` step of `Subgroup`.
fn finish(tiles: TileAssignment, types: Vec<SubgroupType>) -> HloSharding {
    let last = tiles.dims().last().copied().unwrap_or(1);
    match types.as_slice() {
        [SubgroupType::Replicated] => partial_tile(tiles),
        [SubgroupType::Manual] if tiles.num_elements() == last => HloSharding::Manual,
        [SubgroupType::Unreduced] if tiles.num_elements() == last => HloSharding::Unreduced,
        [.., SubgroupType::Replicated] => match partial_tile(tiles) {
            HloSharding::Tiled(t) => tiled(t.tiles, false, types),
            other => other,
        },
        _ => tiled(tiles, false, types),
    }
}
