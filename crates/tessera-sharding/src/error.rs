//! The one error type of the crate: every refusal is a typed variant whose message says what was
//! wrong, where, and how to fix it.

use thiserror::Error;

/// Everything this crate can refuse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ShardingError {
    /// A collective's axes, groups or permutation do not fit the mesh.
    #[error("invalid collective: {reason}")]
    InvalidCollective {
        /// What was wrong and how to fix it.
        reason: String,
    },
    /// A mesh could not be built (names, sizes, types or devices disagree).
    #[error("invalid mesh: {reason}")]
    InvalidMesh {
        /// What was wrong.
        reason: String,
    },
    /// A spec names an axis the mesh does not have.
    #[error(
        "{spec} uses axis '{axis}', which the mesh does not have (mesh axes: {mesh_axes}); \
         use one of the mesh axes or add '{axis}' to the mesh"
    )]
    UnknownAxis {
        /// The missing axis.
        axis: String,
        /// The spec, printed.
        spec: String,
        /// The mesh axes, printed.
        mesh_axes: String,
    },
    /// A mesh axis shards more than one position of a spec.
    #[error(
        "{spec} maps mesh axis {axes} to more than one array dimension; \
         each mesh axis may shard at most one dimension"
    )]
    DuplicateAxes {
        /// The spec, printed.
        spec: String,
        /// The repeated axes, printed as `a`, `b`.
        axes: String,
    },
    /// One tuple of a spec mixes axes of different types.
    #[error(
        "dimension {dim} of {spec} groups axes of different types ({types}); \
         the axes of one tuple must all be Auto, all Explicit or all Manual"
    )]
    MixedAxisTypes {
        /// The spec, printed.
        spec: String,
        /// The array dimension of the tuple.
        dim: usize,
        /// The axis types, printed.
        types: String,
    },
    /// `UNCONSTRAINED` needs at least one Auto axis in the mesh.
    #[error(
        "{spec} uses UNCONSTRAINED, but no mesh axis is Auto (axis types: {types}); \
         make an axis Auto or replace UNCONSTRAINED by None"
    )]
    UnconstrainedWithoutAuto {
        /// The spec, printed.
        spec: String,
        /// The mesh axis types, printed.
        types: String,
    },
    /// An `unreduced`/`reduced` axis is not in the mesh or is not Explicit.
    #[error("the {set} axis '{axis}' of {spec} {problem}; only Explicit mesh axes may be {set}")]
    BadUnreducedAxis {
        /// `unreduced` or `reduced`.
        set: &'static str,
        /// The axis.
        axis: String,
        /// The spec, printed.
        spec: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A spec longer than the rank of the array it is applied to.
    #[error(
        "{spec} has {needed} entries but was applied to an array of rank {rank}; \
         drop entries from the spec{hint}"
    )]
    RankTooSmall {
        /// The spec, printed.
        spec: String,
        /// The length of the spec.
        needed: usize,
        /// The rank of the array.
        rank: usize,
        /// Extra advice for scalars.
        hint: &'static str,
    },
    /// A Manual mesh axis is used to shard a dimension.
    #[error(
        "{spec} shards a dimension over the Manual mesh axis '{axis}'; \
         a Manual axis cannot shard a dimension (leave it out of the spec)"
    )]
    ManualAxisInSpec {
        /// The axis.
        axis: String,
        /// The spec, printed.
        spec: String,
    },
    /// A dimension does not divide evenly into its shards.
    #[error(
        "array dimension {dim} has size {size}, which {ways} shards do not divide \
         (shape {shape:?}); pad the dimension to a multiple of {ways}"
    )]
    NotDivisible {
        /// The dimension.
        dim: usize,
        /// Its size.
        size: i64,
        /// How many ways it is split.
        ways: i64,
        /// The full shape.
        shape: Vec<i64>,
    },
    /// An array shape or rank that cannot be sharded at all.
    #[error("invalid array shape: {reason}")]
    InvalidShape {
        /// What was wrong.
        reason: String,
    },
    /// A question about devices asked of a sharding over an abstract mesh.
    #[error("{what} needs a mesh with devices, but the sharding is over an abstract mesh")]
    AbstractMesh {
        /// The question asked.
        what: &'static str,
    },
    /// `logical_device_ids` that are not a permutation of the mesh positions.
    #[error("invalid logical device ids: {reason}")]
    InvalidLogicalDeviceIds {
        /// What was wrong.
        reason: String,
    },
    /// A device id the mesh does not hold.
    #[error("device {0} is not in the mesh")]
    UnknownDevice(i64),
    /// Malformed text given to a parser.
    #[error("cannot parse {what} at byte {pos} of {input:?}: {message}")]
    Parse {
        /// What was being parsed.
        what: &'static str,
        /// The whole input (shortened when long).
        input: String,
        /// The byte offset of the problem.
        pos: usize,
        /// What was expected.
        message: String,
    },
    /// An HloSharding that is not well formed.
    #[error("invalid HloSharding: {reason}")]
    InvalidHloSharding {
        /// What was wrong.
        reason: String,
    },
    /// An HloSharding that no NamedSharding over the given mesh expresses.
    #[error("{sharding} cannot be expressed over the mesh {mesh}: {reason}")]
    NotRepresentable {
        /// The sharding, printed.
        sharding: String,
        /// The mesh, printed.
        mesh: String,
        /// Why.
        reason: String,
    },
}

impl ShardingError {
    /// The name of the exception JAX raises for the same mistake (`ValueError`,
    /// `DuplicateSpecError`, `ManualAxisInSpec` for a Manual axis in a spec).
    pub fn jax_type(&self) -> &'static str {
        match self {
            ShardingError::DuplicateAxes { .. } => "DuplicateSpecError",
            ShardingError::ManualAxisInSpec { .. } => "ManualAxisInSpec",
            _ => "ValueError",
        }
    }
}

/// Results of this crate.
pub type Result<T, E = ShardingError> = std::result::Result<T, E>;

/// Shortens `input` for inclusion in an error message.
pub(crate) fn clip(input: &str) -> String {
    const MAX: usize = 120;
    if input.len() <= MAX {
        return input.to_string();
    }
    let mut end = MAX;
    while !input.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &input[..end])
}
