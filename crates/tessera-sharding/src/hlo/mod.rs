//! XLA's `HloSharding`: replicated, maximal, manual, tiled (with subgroups) and tuple shardings,
//! built and normalised the way XLA builds them, printed and parsed in XLA's text format.

mod group;
pub mod iota;
mod text;

use std::fmt;

pub use iota::{IotaTileAssignment, TileAssignment};

use crate::error::{Result, ShardingError};

/// The most tiles a sharding may have (bounds the memory an expansion can take).
pub const MAX_TILES: i64 = 1 << 24;

/// The kind of a trailing subgroup dimension of a tiled sharding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SubgroupType {
    /// Each group holds the same data on every device (`manual`).
    Manual,
    /// Each group holds partial sums still to be reduced (`unreduced`).
    Unreduced,
    /// Each group holds copies of the same data (`replicated`).
    Replicated,
}

impl SubgroupType {
    /// The word XLA prints for it.
    pub fn as_str(self) -> &'static str {
        match self {
            SubgroupType::Manual => "manual",
            SubgroupType::Unreduced => "unreduced",
            SubgroupType::Replicated => "replicated",
        }
    }
}

/// A tiled sharding: the tile assignment, whether its last dimension is a replication
/// dimension, and the kinds of its trailing subgroup dimensions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tiled {
    tiles: TileAssignment,
    last_tile_dim_replicate: bool,
    subgroup_types: Vec<SubgroupType>,
}

impl Tiled {
    /// The tile assignment.
    pub fn tile_assignment(&self) -> &TileAssignment {
        &self.tiles
    }

    /// Whether the last tile dimension replicates (`last_tile_dim_replicate`).
    pub fn last_tile_dim_replicate(&self) -> bool {
        self.last_tile_dim_replicate
    }

    /// The kinds of the trailing subgroup dimensions (`last_tile_dims={...}`).
    pub fn subgroup_types(&self) -> &[SubgroupType] {
        &self.subgroup_types
    }

    /// The number of leading tile dimensions that split the data.
    pub fn data_rank(&self) -> usize {
        let extra = self.subgroup_types.len() + usize::from(self.last_tile_dim_replicate);
        self.tiles.dims().len().saturating_sub(extra)
    }
}

/// An XLA sharding.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HloSharding {
    /// Every device holds the whole array (`{replicated}`).
    Replicated,
    /// The program handles the partitioning itself (`{manual}`).
    Manual,
    /// Every device holds a partial sum (`{unreduced}`).
    Unreduced,
    /// One device holds the whole array (`{maximal device=N}`).
    Maximal {
        /// The device.
        device: i64,
    },
    /// Tiles spread over devices (`{devices=...}`).
    Tiled(Tiled),
    /// One sharding per element of a tuple.
    Tuple(Vec<HloSharding>),
}

impl HloSharding {
    /// A tiled sharding with no subgroups (XLA's `HloSharding(tile_assignment)`).
    pub fn tile(tiles: TileAssignment) -> Result<HloSharding> {
        check_tiles(&tiles)?;
        Ok(HloSharding::Tiled(Tiled {
            tiles,
            last_tile_dim_replicate: false,
            subgroup_types: Vec::new(),
        }))
    }

    /// `[dims]<=[reshape_dims]T(perm)` with `subgroup_types` for the trailing dims, normalised as
    /// XLA's `HloSharding::IotaTile`/`Subgroup` do.
    pub fn iota_tile(
        dims: &[i64],
        reshape_dims: &[i64],
        perm: &[usize],
        subgroup_types: &[SubgroupType],
    ) -> Result<HloSharding> {
        let iota = IotaTileAssignment::new(dims, reshape_dims, perm).ok_or_else(|| {
            invalid(format!(
                "the iota [{}]<=[{}]T({}) does not fit together",
                join(dims),
                join(reshape_dims),
                join(perm)
            ))
        })?;
        HloSharding::subgroup(TileAssignment::Iota(iota), subgroup_types)
    }

    /// A tiled sharding whose last dimension replicates (XLA's `PartialTile`), normalised.
    pub fn partial_tile(tiles: TileAssignment) -> Result<HloSharding> {
        check_tiles(&tiles)?;
        Ok(group::partial_tile(tiles))
    }

    /// A tiled sharding whose trailing dims are subgroups (XLA's `Subgroup`), normalised: size-one
    /// subgroups dropped, equal kinds merged, kinds sorted (replicated last).
    pub fn subgroup(tiles: TileAssignment, types: &[SubgroupType]) -> Result<HloSharding> {
        check_tiles(&tiles)?;
        if types.len() > tiles.dims().len() {
            return Err(invalid(format!(
                "{} subgroup kinds for a tile assignment of rank {}",
                types.len(),
                tiles.dims().len()
            )));
        }
        Ok(group::subgroup(tiles, types))
    }

    /// XLA's `IsReplicated`.
    pub fn is_replicated(&self) -> bool {
        match self {
            HloSharding::Replicated => true,
            HloSharding::Tuple(t) => t.iter().all(HloSharding::is_replicated),
            _ => false,
        }
    }

    /// XLA's `IsManual`.
    pub fn is_manual(&self) -> bool {
        match self {
            HloSharding::Manual => true,
            HloSharding::Tuple(t) => t.iter().all(HloSharding::is_manual),
            _ => false,
        }
    }

    /// XLA's `IsTileMaximal` (what JAX calls `is_maximal`): replicated or on one device.
    pub fn is_maximal(&self) -> bool {
        match self {
            HloSharding::Replicated | HloSharding::Maximal { .. } => true,
            HloSharding::Tuple(t) => t.iter().all(HloSharding::is_maximal),
            _ => false,
        }
    }

    /// XLA's `IsTiled`: neither tile-maximal nor manual (nor unreduced).
    pub fn is_tiled(&self) -> bool {
        !self.is_maximal() && !self.is_manual() && !matches!(self, HloSharding::Unreduced)
    }

    /// The tiled part, when tiled.
    pub fn as_tiled(&self) -> Option<&Tiled> {
        match self {
            HloSharding::Tiled(t) => Some(t),
            _ => None,
        }
    }

    /// The number of tiles of a tiled sharding (`None` where XLA's accessor does not apply).
    pub fn num_devices(&self) -> Option<i64> {
        self.as_tiled().map(|t| t.tiles.num_elements())
    }

    /// The tile dimensions of a tiled sharding.
    pub fn tile_assignment_dimensions(&self) -> Option<Vec<i64>> {
        self.as_tiled().map(|t| t.tiles.dims().to_vec())
    }

    /// The devices of a tiled sharding, row-major over the tile dimensions.
    pub fn tile_assignment_devices(&self) -> Option<Vec<i64>> {
        self.as_tiled().map(|t| t.tiles.devices())
    }

    /// Parses XLA's text (`{devices=[2,1]<=[2]}`, `{replicated}`, tuples ...).
    pub fn parse(text: &str) -> Result<HloSharding> {
        text::parse(text)
    }
}

impl fmt::Display for HloSharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        text::print(self, f)
    }
}

fn check_tiles(tiles: &TileAssignment) -> Result<()> {
    let dims = tiles.dims();
    if dims.is_empty() {
        return Err(invalid(
            "a tile assignment needs at least one dimension".into(),
        ));
    }
    if dims.iter().any(|&d| d < 1) {
        return Err(invalid(format!(
            "tile dimensions [{}] must be positive",
            join(dims)
        )));
    }
    match iota::checked_product(dims) {
        Some(n) if n <= MAX_TILES => {}
        _ => return Err(invalid(format!("more than {MAX_TILES} tiles"))),
    }
    if let TileAssignment::Explicit { devices, .. } = tiles {
        if devices.len() as i64 != tiles.num_elements() {
            return Err(invalid(format!(
                "{} devices listed for tile dimensions [{}] ({} tiles)",
                devices.len(),
                join(dims),
                tiles.num_elements()
            )));
        }
        if devices.iter().any(|&d| d < 0) {
            return Err(invalid("device numbers must not be negative".into()));
        }
    }
    Ok(())
}

pub(crate) fn invalid(reason: String) -> ShardingError {
    ShardingError::InvalidHloSharding { reason }
}

pub(crate) fn join<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests;
