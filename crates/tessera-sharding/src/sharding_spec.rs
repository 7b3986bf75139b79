//! The pmap-era `ShardingSpec`: per array dimension `NoSharding`, `Chunked` or `Unstacked`, and per
//! mesh axis `ShardedAxis` or `Replicated`; its HloSharding and per-device indices.

use crate::error::{Result, ShardingError};
use crate::hlo::iota::transpose_array;
use crate::hlo::{HloSharding, SubgroupType, TileAssignment};

/// How one array dimension is split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DimSharding {
    /// Not split.
    NoSharding,
    /// Split into `product(chunks)` contiguous chunks; each entry is one sharded axis.
    Chunked(Vec<i64>),
    /// Split into its `size` elements, the dimension dropped (pmap's mapped axis).
    Unstacked(i64),
}

/// What one mesh axis does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeshAssignment {
    /// The mesh axis runs over sharded axis number `n` (in the order the dims list them).
    ShardedAxis(usize),
    /// The mesh axis holds `n` replicas.
    Replicated(i64),
}

/// One dimension of a device's index: everything, a range, or one element (Unstacked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DimIndex {
    /// The whole dimension.
    Full,
    /// `[start, stop)`.
    Range(i64, i64),
    /// One element; the dimension is dropped.
    Index(i64),
}

/// A pmap-era sharding spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardingSpec {
    /// One entry per array dimension.
    pub sharding: Vec<DimSharding>,
    /// One entry per mesh axis.
    pub mesh_mapping: Vec<MeshAssignment>,
}

fn invalid(reason: String) -> ShardingError {
    ShardingError::InvalidHloSharding {
        reason: format!("sharding spec: {reason}"),
    }
}

impl ShardingSpec {
    /// The sizes of the sharded axes, in the order the dims list them.
    fn sharded_sizes(&self) -> Vec<i64> {
        let mut out = Vec::new();
        for s in &self.sharding {
            match s {
                DimSharding::NoSharding => {}
                DimSharding::Unstacked(n) => out.push(*n),
                DimSharding::Chunked(c) => out.extend(c),
            }
        }
        out
    }

    /// The mesh shape the spec implies; checks each sharded axis is mapped exactly once.
    pub fn mesh_shape(&self) -> Result<Vec<i64>> {
        let sizes = self.sharded_sizes();
        let mut used = vec![false; sizes.len()];
        let mut shape = Vec::with_capacity(self.mesh_mapping.len());
        for m in &self.mesh_mapping {
            match *m {
                MeshAssignment::Replicated(n) if n >= 1 => shape.push(n),
                MeshAssignment::Replicated(n) => return Err(invalid(format!("{n} replicas"))),
                MeshAssignment::ShardedAxis(a) => {
                    if a >= sizes.len() || std::mem::replace(&mut used[a], true) {
                        return Err(invalid(format!(
                            "sharded axis {a} is missing or mapped twice"
                        )));
                    }
                    shape.push(sizes[a]);
                }
            }
        }
        if let Some(a) = used.iter().position(|u| !u) {
            return Err(invalid(format!(
                "sharded axis {a} is not mapped to a mesh axis"
            )));
        }
        if sizes.iter().any(|&s| s < 1) {
            return Err(invalid("chunk counts must be positive".into()));
        }
        match crate::hlo::iota::checked_product(&shape) {
            Some(n) if n <= crate::hlo::MAX_TILES => Ok(shape),
            _ => Err(invalid(format!(
                "more than {} devices",
                crate::hlo::MAX_TILES
            ))),
        }
    }

    /// The HloSharding over devices numbered by mesh position (JAX's
    /// `sharding_spec_sharding_proto`); Unstacked dims have none.
    pub fn to_hlo_sharding(&self) -> Result<HloSharding> {
        let mesh_shape = self.mesh_shape()?;
        let mut axis_to_mesh = vec![0usize; self.sharded_sizes().len()];
        let mut replicated = Vec::new();
        for (k, m) in self.mesh_mapping.iter().enumerate() {
            match *m {
                MeshAssignment::ShardedAxis(a) => axis_to_mesh[a] = k,
                MeshAssignment::Replicated(_) => replicated.push(k),
            }
        }
        if replicated.len() == self.mesh_mapping.len() {
            return Ok(HloSharding::Replicated);
        }
        let (mut perm, mut dims, mut next) = (Vec::new(), Vec::new(), 0);
        for s in &self.sharding {
            match s {
                DimSharding::NoSharding => dims.push(1),
                DimSharding::Chunked(chunks) => {
                    for _ in chunks {
                        perm.push(axis_to_mesh[next]);
                        next += 1;
                    }
                    dims.push(chunks.iter().product());
                }
                DimSharding::Unstacked(_) => {
                    return Err(invalid("an Unstacked dimension has no HloSharding".into()));
                }
            }
        }
        let mut types = Vec::new();
        if !replicated.is_empty() {
            dims.push(replicated.iter().map(|&k| mesh_shape[k]).product());
            perm.extend(&replicated);
            types.push(SubgroupType::Replicated);
        }
        let iota: Vec<i64> = (0..mesh_shape.iter().product()).collect();
        let (_, devices) = transpose_array(&mesh_shape, &iota, &perm);
        HloSharding::subgroup(TileAssignment::Explicit { dims, devices }, &types)
    }

    /// For each mesh position (row-major), the index of the array that device holds.
    pub fn indices(&self, shape: &[i64]) -> Result<Vec<Vec<DimIndex>>> {
        if shape.len() != self.sharding.len() {
            return Err(invalid(format!(
                "{} dimensions in the spec for a shape of rank {}",
                self.sharding.len(),
                shape.len()
            )));
        }
        let mesh_shape = self.mesh_shape()?;
        let n: i64 = mesh_shape.iter().product();
        let mut out = Vec::with_capacity(n as usize);
        for p in 0..n {
            let coords = unravel(p, &mesh_shape);
            let axis_coord = |a: usize| {
                let k = self
                    .mesh_mapping
                    .iter()
                    .position(|m| *m == MeshAssignment::ShardedAxis(a));
                k.map_or(0, |k| coords[k])
            };
            let (mut next, mut index) = (0, Vec::with_capacity(shape.len()));
            for (dim, s) in self.sharding.iter().enumerate() {
                index.push(match s {
                    DimSharding::NoSharding => DimIndex::Full,
                    DimSharding::Unstacked(size) => {
                        if *size != shape[dim] {
                            return Err(invalid(format!(
                                "Unstacked({size}) on a dim of {}",
                                shape[dim]
                            )));
                        }
                        next += 1;
                        DimIndex::Index(axis_coord(next - 1))
                    }
                    DimSharding::Chunked(chunks) => {
                        let total: i64 = chunks.iter().product();
                        if shape[dim] % total != 0 {
                            return Err(ShardingError::NotDivisible {
                                dim,
                                size: shape[dim],
                                ways: total,
                                shape: shape.to_vec(),
                            });
                        }
                        let chunk = chunks.iter().fold(0, |acc, &c| {
                            next += 1;
                            acc * c + axis_coord(next - 1)
                        });
                        let size = shape[dim] / total;
                        DimIndex::Range(chunk * size, (chunk + 1) * size)
                    }
                });
            }
            out.push(index);
        }
        Ok(out)
    }
}

fn unravel(mut p: i64, shape: &[i64]) -> Vec<i64> {
    let mut out = vec![0; shape.len()];
    for (slot, &s) in out.iter_mut().zip(shape).rev() {
        *slot = p % s;
        p /= s;
    }
    out
}
