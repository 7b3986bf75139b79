//! Where `dot_product_attention` may run per shard: the optional parameters `shard_mesh`,
//! `shard_batch` and `shard_heads` say that, in a program partitioned over `shard_mesh`, the
//! operation's batch dimension may be split over the `shard_batch` axes and its heads (query and
//! key/value heads alike) over the `shard_heads` axes, the operation running on each device's
//! block. They change no value: the interpreter and the decomposition read past them. A lowering
//! whose kernel cannot be partitioned by XLA (cuDNN's fused attention, a custom call) wraps the
//! kernel in a manual region laid out that way; JAX reaches the same with `custom_partitioning`.
//! `tessera_transform::passes::shard_attention` sets them on every attention of a program.

use tessera_sharding::{AbstractMesh, DimSpec, PartitionSpec};

use super::Prim;
use crate::error::{Result, type_error};
use crate::program::params::{ParamValue, Params};

const MESH: &str = "shard_mesh";
const BATCH: &str = "shard_batch";
const HEADS: &str = "shard_heads";

/// How an attention splits over a mesh (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttentionShards {
    /// The mesh the program is partitioned over.
    pub mesh: AbstractMesh,
    /// The axes splitting the batch dimension.
    pub batch: Vec<String>,
    /// The axes splitting the heads.
    pub heads: Vec<String>,
}

impl AttentionShards {
    /// The layout of `params`, if they give one; refused: a mesh without axis lists, an axis
    /// not in the mesh, or one named twice.
    pub fn read(prim: Prim, params: &Params) -> Result<Option<AttentionShards>> {
        if params.get(MESH).is_none() {
            return Ok(None);
        }
        let mesh = super::shard_map::read_mesh_param(params, MESH)?;
        let axes = |key: &str| -> Result<Vec<String>> {
            let names = params
                .get(key)
                .and_then(ParamValue::as_seq)
                .ok_or_else(|| {
                    type_error(
                        prim.name(),
                        format!("`{MESH}` needs `{key}`, a tuple of mesh axis names"),
                    )
                })?;
            names
                .iter()
                .map(|n| match n {
                    ParamValue::Name(s) | ParamValue::Str(s) => Ok(s.clone()),
                    other => Err(type_error(
                        prim.name(),
                        format!("`{key}` holds {other}, not an axis name"),
                    )),
                })
                .collect()
        };
        let shards = AttentionShards {
            batch: axes(BATCH)?,
            heads: axes(HEADS)?,
            mesh,
        };
        shards.check_axes(prim)?;
        Ok(Some(shards))
    }

    fn check_axes(&self, prim: Prim) -> Result<()> {
        let all: Vec<&String> = self.batch.iter().chain(&self.heads).collect();
        for (i, axis) in all.iter().enumerate() {
            if self.mesh.axis_index(axis).is_none() {
                return Err(type_error(
                    prim.name(),
                    format!(
                        "shards over axis '{axis}', which the mesh ({}) lacks",
                        self.mesh.axis_names().join(", ")
                    ),
                ));
            }
            if all[..i].contains(axis) {
                return Err(type_error(
                    prim.name(),
                    format!("names axis '{axis}' twice; split each dimension over its own axes"),
                ));
            }
        }
        Ok(())
    }

    /// `params` with this layout.
    pub fn add_to(&self, params: Params) -> Params {
        let names = |axes: &[String]| {
            ParamValue::Tuple(axes.iter().map(|a| ParamValue::Name(a.clone())).collect())
        };
        params
            .with(MESH, super::constraint::mesh_value(&self.mesh))
            .with(BATCH, names(&self.batch))
            .with(HEADS, names(&self.heads))
    }

    /// `params` without a layout.
    pub fn strip(params: &Params) -> Params {
        let keep = |(k, _): &&(String, ParamValue)| ![MESH, BATCH, HEADS].contains(&k.as_str());
        Params::from_entries(params.entries().iter().filter(keep).cloned().collect())
    }

    fn size(&self, axes: &[String]) -> i64 {
        axes.iter().filter_map(|a| self.mesh.axis_size(a)).product()
    }

    /// Refuses a batch or head count the axes do not divide (`batch`, query `heads` and
    /// `kv_heads`), saying which.
    pub fn check_sizes(&self, prim: Prim, batch: i64, heads: i64, kv_heads: i64) -> Result<()> {
        let (b, h) = (self.size(&self.batch), self.size(&self.heads));
        let fail = |what: &str, n: i64, axes: &[String], size: i64| {
            type_error(
                prim.name(),
                format!(
                    "runs per shard with its {n} {what} split over {} ({size} devices), which \
                     does not divide them; drop those axes from `{}` or change the sizes",
                    axes.join(", "),
                    if what == "rows" { BATCH } else { HEADS }
                ),
            )
        };
        if batch % b != 0 {
            return Err(fail("rows", batch, &self.batch, b));
        }
        for n in [heads, kv_heads] {
            if n % h != 0 {
                return Err(fail("heads", n, &self.heads, h));
            }
        }
        Ok(())
    }

    /// The layout of an operand or result of rank 4 (`[batch, heads, seq, dim]`) or 3 (the
    /// statistics, `[batch, heads, seq]`); a rank-2 mask is whole on every device.
    pub fn spec(&self, rank: usize) -> PartitionSpec {
        let over = |axes: &[String]| {
            let refs: Vec<&str> = axes.iter().map(String::as_str).collect();
            DimSpec::from_axes(&refs)
        };
        let mut dims = vec![DimSpec::Replicated; rank];
        if rank >= 3 {
            dims[0] = over(&self.batch);
            dims[1] = over(&self.heads);
        }
        PartitionSpec::new(dims)
    }
}
