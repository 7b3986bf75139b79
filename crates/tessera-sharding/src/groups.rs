//! Communication groups of collectives over named mesh axes: which mesh positions reduce,
//! gather or exchange together (JAX's `axis_groups`), how `axis_index_groups` split them, and the
//! source–target pairs of a permutation. The reference interpreter and the StableHLO lowering
//! both read these, so the devices that talk in a simulation are the devices that talk on
//! hardware.
//!
//! Positions are row-major mesh positions (what `use_global_device_ids` means for a program
//! partitioned over the mesh). Within a group, positions are ordered row-major over the named
//! axes *in the order they are named*: `psum(x, ('y', 'x'))` on a 2×4 mesh forms the single
//! group `[0, 4, 1, 5, 2, 6, 3, 7]`.

use crate::error::{Result, ShardingError};
use crate::mesh::AbstractMesh;

fn invalid(reason: String) -> ShardingError {
    ShardingError::InvalidCollective { reason }
}

/// The mesh dimensions of `axes`, checking that each is a distinct mesh axis.
fn axis_dims<S: AsRef<str>>(mesh: &AbstractMesh, axes: &[S]) -> Result<Vec<usize>> {
    let mut dims = Vec::with_capacity(axes.len());
    for axis in axes {
        let name = axis.as_ref();
        let dim = mesh.axis_index(name).ok_or_else(|| {
            invalid(format!(
                "axis '{name}' is not an axis of the mesh (axes: {}); name one of them",
                mesh.axis_names().join(", ")
            ))
        })?;
        if dims.contains(&dim) {
            return Err(invalid(format!("axis '{name}' is named twice")));
        }
        dims.push(dim);
    }
    Ok(dims)
}

/// The groups of mesh positions that communicate over `axes`: one group per combination of the
/// other axes' coordinates (in row-major order of those), each ordered row-major over `axes` as
/// named.
pub fn axis_groups<S: AsRef<str>>(mesh: &AbstractMesh, axes: &[S]) -> Result<Vec<Vec<i64>>> {
    let dims = axis_dims(mesh, axes)?;
    let sizes = mesh.axis_sizes();
    let rest: Vec<usize> = (0..sizes.len()).filter(|d| !dims.contains(d)).collect();
    let count = |ds: &[usize]| ds.iter().map(|&d| sizes[d]).product::<i64>();
    let (groups, members) = (count(&rest), count(&dims));
    let mut out = Vec::with_capacity(groups as usize);
    for g in 0..groups {
        let mut coords = vec![0i64; sizes.len()];
        unravel(g, &rest, sizes, &mut coords);
        let group = (0..members)
            .map(|m| {
                unravel(m, &dims, sizes, &mut coords);
                mesh.position(&coords)
            })
            .collect();
        out.push(group);
    }
    Ok(out)
}

/// Writes the row-major digits of `index` over the mesh dimensions `dims` into `coords`.
fn unravel(mut index: i64, dims: &[usize], sizes: &[i64], coords: &mut [i64]) {
    for &d in dims.iter().rev() {
        coords[d] = index % sizes[d];
        index /= sizes[d];
    }
}

/// The size of the combined axes (the group size without `axis_index_groups`).
pub fn axes_size<S: AsRef<str>>(mesh: &AbstractMesh, axes: &[S]) -> Result<i64> {
    let dims = axis_dims(mesh, axes)?;
    Ok(dims.iter().map(|&d| mesh.axis_sizes()[d]).product())
}

/// Checks `axis_index_groups` for axes of combined size `size`: every index in `0..size` exactly
/// once, all groups the same size.
pub fn check_index_groups(index_groups: &[Vec<i64>], size: i64) -> Result<()> {
    let mut seen = vec![false; size.max(0) as usize];
    for &i in index_groups.iter().flatten() {
        if !(0..size).contains(&i) || std::mem::replace(&mut seen[i as usize], true) {
            return Err(invalid(format!(
                "axis_index_groups {index_groups:?} must cover the indices 0..{size} exactly once"
            )));
        }
    }
    if seen.iter().any(|s| !s) {
        return Err(invalid(format!(
            "axis_index_groups {index_groups:?} must cover the indices 0..{size} exactly once"
        )));
    }
    if index_groups.windows(2).any(|w| w[0].len() != w[1].len()) {
        return Err(invalid(format!(
            "axis_index_groups {index_groups:?} must all have the same size"
        )));
    }
    Ok(())
}

/// Replica groups for `axes`, split by `axis_index_groups` where given: each axis group is cut
/// into one group per index group (JAX's `_replica_groups`).
pub fn replica_groups<S: AsRef<str>>(
    mesh: &AbstractMesh,
    axes: &[S],
    index_groups: Option<&[Vec<i64>]>,
) -> Result<Vec<Vec<i64>>> {
    let groups = axis_groups(mesh, axes)?;
    let Some(index_groups) = index_groups else {
        return Ok(groups);
    };
    check_index_groups(index_groups, axes_size(mesh, axes)?)?;
    Ok(groups
        .iter()
        .flat_map(|g| {
            index_groups
                .iter()
                .map(|ig| ig.iter().map(|&i| g[i as usize]).collect())
        })
        .collect())
}

/// Checks a permutation over axes of size `size`: indices in range, no source or target twice.
pub fn check_permutation(perm: &[(i64, i64)], size: i64) -> Result<()> {
    for (what, pick) in [("sources", 0), ("targets", 1)] {
        let mut seen = vec![false; size.max(0) as usize];
        for pair in perm {
            let i = if pick == 0 { pair.0 } else { pair.1 };
            if !(0..size).contains(&i) {
                return Err(invalid(format!(
                    "ppermute pair {pair:?} is out of range for an axis of size {size}"
                )));
            }
            if std::mem::replace(&mut seen[i as usize], true) {
                return Err(invalid(format!(
                    "ppermute {what} must be unique, but {i} appears twice in {perm:?}"
                )));
            }
        }
    }
    Ok(())
}

/// The source–target position pairs of `ppermute(perm)` over `axes`: for each group (sorted
/// ascending, as JAX does), `perm`'s indices mapped to positions, groups one after another.
pub fn permute_pairs<S: AsRef<str>>(
    mesh: &AbstractMesh,
    axes: &[S],
    perm: &[(i64, i64)],
) -> Result<Vec<(i64, i64)>> {
    check_permutation(perm, axes_size(mesh, axes)?)?;
    let mut pairs = Vec::new();
    for mut group in axis_groups(mesh, axes)? {
        group.sort_unstable();
        pairs.extend(
            perm.iter()
                .map(|&(s, t)| (group[s as usize], group[t as usize])),
        );
    }
    Ok(pairs)
}

/// The index of mesh position `position` along the combined `axes` (row-major over them as
/// named): what `axis_index(axes)` returns on that device.
pub fn axis_index_of<S: AsRef<str>>(mesh: &AbstractMesh, axes: &[S], position: i64) -> Result<i64> {
    let dims = axis_dims(mesh, axes)?;
    let coords = mesh.coords(position);
    Ok(dims
        .iter()
        .fold(0, |acc, &d| acc * mesh.axis_sizes()[d] + coords[d]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh(axes: &[(&str, i64)]) -> AbstractMesh {
        AbstractMesh::auto(axes).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn groups_follow_the_named_order_of_the_axes() {
        let m = mesh(&[("x", 2), ("y", 4)]);
        assert_eq!(
            axis_groups(&m, &["y"]).ok(),
            Some(vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]])
        );
        assert_eq!(
            axis_groups(&m, &["x"]).ok(),
            Some(vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]])
        );
        assert_eq!(
            axis_groups(&m, &["y", "x"]).ok(),
            Some(vec![vec![0, 4, 1, 5, 2, 6, 3, 7]])
        );
        let m3 = mesh(&[("a", 2), ("b", 2), ("c", 2)]);
        assert_eq!(
            axis_groups(&m3, &["c"]).ok(),
            Some(vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]])
        );
        assert_eq!(axis_index_of(&m, &["y", "x"], 5).ok(), Some(3));
    }

    #[test]
    fn index_groups_split_each_axis_group() {
        let m = mesh(&[("x", 2), ("y", 4)]);
        let ig = vec![vec![0, 2], vec![1, 3]];
        assert_eq!(
            replica_groups(&m, &["y"], Some(&ig)).ok(),
            Some(vec![vec![0, 2], vec![1, 3], vec![4, 6], vec![5, 7]])
        );
        assert!(replica_groups(&m, &["y"], Some(&[vec![0, 1], vec![1, 2]])).is_err());
    }

    #[test]
    fn permutations_map_to_positions_and_refuse_duplicates() {
        let m = mesh(&[("x", 2), ("y", 4)]);
        assert_eq!(
            permute_pairs(&m, &["x"], &[(0, 1), (1, 0)]).ok(),
            Some(vec![
                (0, 4),
                (4, 0),
                (1, 5),
                (5, 1),
                (2, 6),
                (6, 2),
                (3, 7),
                (7, 3)
            ])
        );
        let err = permute_pairs(&m, &["y"], &[(0, 1), (0, 2)]).unwrap_err();
        assert!(err.to_string().contains("sources must be unique"), "{err}");
        assert!(axis_groups(&m, &["z"]).is_err());
    }
}
