//! The program XLA actually compiled: `PJRT_Executable_OptimizedProgram` gives the optimized
//! (after SPMD partitioning) HLO module as a serialized `xla.HloModuleProto`, decoded here with
//! `prost` for the fields Tessera reads: every instruction's opcode and per-device shape, and the
//! shardings XLA chose for the entry's parameters and results (as JAX's pxla reads them back).
//! Field numbers follow XLA's `hlo.proto` and `xla_data.proto`.

use std::collections::BTreeMap;

use prost::Message;
use tessera_sharding::HloSharding;

use crate::error::{PjrtError, Result};

/// `xla.ShapeProto` (the fields read).
#[derive(Clone, PartialEq, Message)]
pub struct ShapeProto {
    /// `xla.PrimitiveType` number.
    #[prost(int32, tag = "2")]
    pub element_type: i32,
    /// Dimension sizes (of one device's part, after partitioning).
    #[prost(int64, repeated, tag = "3")]
    pub dimensions: Vec<i64>,
    /// Element shapes of a tuple.
    #[prost(message, repeated, tag = "4")]
    pub tuple_shapes: Vec<ShapeProto>,
}

/// `xla.OpSharding` (the fields read).
#[derive(Clone, PartialEq, Message)]
pub struct OpShardingProto {
    /// `REPLICATED` 0, `MAXIMAL` 1, `TUPLE` 2, `OTHER` 3, `MANUAL` 4, `UNKNOWN` 5.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    /// The tile assignment's shape.
    #[prost(int64, repeated, tag = "3")]
    pub tile_assignment_dimensions: Vec<i64>,
    /// The tile assignment, flattened (empty when given as an iota).
    #[prost(int64, repeated, tag = "4")]
    pub tile_assignment_devices: Vec<i64>,
    /// Element shardings of a tuple.
    #[prost(message, repeated, tag = "5")]
    pub tuple_shardings: Vec<OpShardingProto>,
    /// Whether the last tile dimension replicates.
    #[prost(bool, tag = "6")]
    pub replicate_on_last_tile_dim: bool,
    /// Subgroup types of the trailing tile dimensions.
    #[prost(int32, repeated, tag = "8")]
    pub last_tile_dims: Vec<i32>,
    /// The iota's reshape dimensions (V2 tile assignments).
    #[prost(int64, repeated, tag = "9")]
    pub iota_reshape_dims: Vec<i64>,
    /// The iota's transpose.
    #[prost(int32, repeated, tag = "10")]
    pub iota_transpose_perm: Vec<i32>,
}

/// `xla.HloInstructionProto` (the fields read).
#[derive(Clone, PartialEq, Message)]
pub struct InstructionProto {
    /// Its name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its opcode (`tanh`, `fusion`, `all-reduce`, ...).
    #[prost(string, tag = "2")]
    pub opcode: String,
    /// Its result shape.
    #[prost(message, optional, tag = "3")]
    pub shape: Option<ShapeProto>,
}

/// `xla.HloComputationProto` (the fields read).
#[derive(Clone, PartialEq, Message)]
pub struct ComputationProto {
    /// Its name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its instructions, operands first.
    #[prost(message, repeated, tag = "2")]
    pub instructions: Vec<InstructionProto>,
}

/// `xla.HloModuleProto` (the fields read).
#[derive(Clone, PartialEq, Message)]
pub struct HloModuleProto {
    /// The module's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The computations, callees first.
    #[prost(message, repeated, tag = "3")]
    pub computations: Vec<ComputationProto>,
    /// The sharding of the entry's result (a tuple sharding for several results).
    #[prost(message, optional, tag = "12")]
    pub spmd_output_sharding: Option<OpShardingProto>,
    /// The sharding of each entry parameter.
    #[prost(message, repeated, tag = "14")]
    pub spmd_parameters_shardings: Vec<OpShardingProto>,
}

/// `xla.HloModuleProtoWithConfig`: what plugins return in the `hlo_with_config` format.
#[derive(Clone, PartialEq, Message)]
pub struct HloModuleWithConfigProto {
    /// The module.
    #[prost(message, optional, tag = "1")]
    pub hlo_module: Option<HloModuleProto>,
}

/// The optimized module of a compiled executable.
#[derive(Debug, Clone)]
pub struct OptimizedProgram {
    /// The decoded module.
    pub module: HloModuleProto,
}

impl OptimizedProgram {
    /// Decodes a serialized module in PJRT program `format` (`hlo`: an `HloModuleProto`;
    /// `hlo_with_config`: one wrapped with its compile configuration).
    pub fn decode(bytes: &[u8], format: &str) -> Result<Self> {
        let bad = |e: prost::DecodeError| {
            PjrtError::Decode(format!("the optimized HLO module ({format}): {e}"))
        };
        let module = match format {
            "hlo" => HloModuleProto::decode(bytes).map_err(bad)?,
            "hlo_with_config" => HloModuleWithConfigProto::decode(bytes)
                .map_err(bad)?
                .hlo_module
                .unwrap_or_default(),
            other => {
                return Err(PjrtError::Decode(format!(
                    "an optimized program in format `{other}` (Tessera reads `hlo` and \
                     `hlo_with_config`)"
                )));
            }
        };
        Ok(OptimizedProgram { module })
    }

    /// `(opcode, per-device dimensions)` of every array-shaped instruction, in every
    /// computation.
    pub fn instructions(&self) -> Vec<(&str, &[i64])> {
        self.module
            .computations
            .iter()
            .flat_map(|c| &c.instructions)
            .filter_map(|i| Some((i.opcode.as_str(), i.shape.as_ref()?.dimensions.as_slice())))
            .collect()
    }

    /// How many collectives of each kind the module holds (`all-reduce`, `all-gather`,
    /// `reduce-scatter`, `all-to-all`, `collective-permute`, and the others XLA names), in every
    /// computation: an asynchronous pair (`all-reduce-start` and `-done`) counts once, under
    /// its kind, and a combined collective (one instruction over several arrays) once.
    pub fn collective_counts(&self) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for (opcode, _) in self.instructions() {
            if let Some(kind) = collective_kind(opcode) {
                *counts.entry(kind.to_owned()).or_insert(0) += 1;
            }
        }
        counts
    }

    /// The sharding XLA chose for each result of the entry computation (`None` when the module
    /// carries none: an unpartitioned program).
    pub fn output_shardings(&self) -> Result<Option<Vec<HloSharding>>> {
        let Some(sharding) = &self.module.spmd_output_sharding else {
            return Ok(None);
        };
        let leaves = if sharding.r#type == TUPLE {
            sharding.tuple_shardings.iter().collect()
        } else {
            vec![sharding]
        };
        leaves
            .into_iter()
            .map(to_hlo_sharding)
            .collect::<Result<_>>()
            .map(Some)
    }

    /// The sharding XLA chose for each entry parameter (empty for an unpartitioned program).
    pub fn parameter_shardings(&self) -> Result<Vec<HloSharding>> {
        self.module
            .spmd_parameters_shardings
            .iter()
            .map(to_hlo_sharding)
            .collect()
    }
}

/// The collective kind of an HLO opcode (`all-reduce-start` is an `all-reduce`; a `-done`
/// half is none, so that a pair counts once).
fn collective_kind(opcode: &str) -> Option<&str> {
    const KINDS: [&str; 6] = [
        "all-reduce",
        "all-gather",
        "reduce-scatter",
        "all-to-all",
        "collective-permute",
        "collective-broadcast",
    ];
    let base = opcode.strip_suffix("-start").unwrap_or(opcode);
    KINDS.into_iter().find(|k| *k == base)
}

const REPLICATED: i32 = 0;
const MAXIMAL: i32 = 1;
const TUPLE: i32 = 2;
const OTHER: i32 = 3;
const MANUAL: i32 = 4;

/// An `OpSharding` as an [`HloSharding`] (through XLA's text form, which `tessera-sharding`
/// parses and checks).
pub fn to_hlo_sharding(op: &OpShardingProto) -> Result<HloSharding> {
    let text = match op.r#type {
        REPLICATED => "{replicated}".to_owned(),
        MANUAL => "{manual}".to_owned(),
        MAXIMAL => format!(
            "{{maximal device={}}}",
            op.tile_assignment_devices.first().copied().unwrap_or(0)
        ),
        OTHER => tiled_text(op)?,
        other => {
            return Err(PjrtError::Decode(format!(
                "an OpSharding of type {other} has no single-array form"
            )));
        }
    };
    HloSharding::parse(&text).map_err(|e| PjrtError::Decode(format!("sharding {text}: {e}")))
}

fn tiled_text(op: &OpShardingProto) -> Result<String> {
    let join = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    let dims = join(&op.tile_assignment_dimensions);
    let devices = if op.iota_reshape_dims.is_empty() {
        join(&op.tile_assignment_devices)
    } else {
        let perm: Vec<i64> = op
            .iota_transpose_perm
            .iter()
            .map(|&p| i64::from(p))
            .collect();
        let identity = perm.iter().enumerate().all(|(i, &p)| p == i as i64);
        let mut text = format!("<=[{}]", join(&op.iota_reshape_dims));
        if !identity {
            text.push_str(&format!("T({})", join(&perm)));
        }
        text
    };
    let mut suffix = String::new();
    if op.replicate_on_last_tile_dim {
        suffix.push_str(" last_tile_dim_replicate");
    } else if !op.last_tile_dims.is_empty() {
        let names: Vec<&str> = op
            .last_tile_dims
            .iter()
            .map(|&t| match t {
                REPLICATED => Ok("replicated"),
                MANUAL => Ok("manual"),
                other => Err(PjrtError::Decode(format!(
                    "subgroup type {other} is not supported"
                ))),
            })
            .collect::<Result<_>>()?;
        suffix.push_str(&format!(" last_tile_dims={{{}}}", names.join(", ")));
    }
    Ok(format!("{{devices=[{dims}]{devices}{suffix}}}"))
}
