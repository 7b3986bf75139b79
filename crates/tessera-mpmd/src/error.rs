//! Typed errors of the MPMD layer.

/// Everything that can go wrong in `tessera-mpmd`.
#[derive(Debug, thiserror::Error)]
pub enum MpmdError {
    /// The MPMD axis is not an axis of the mesh.
    #[error("the mesh {mesh} has no axis '{axis}' to use as the MPMD axis; name one of its axes")]
    UnknownMpmdAxis {
        /// The axis asked for.
        axis: String,
        /// The mesh, printed.
        mesh: String,
    },
    /// A group index outside `0..mpmd_dim`.
    #[error("MPMD group {index} does not exist: the mesh has {mpmd_dim} groups (0..{mpmd_dim})")]
    UnknownGroup {
        /// The index asked for.
        index: usize,
        /// The number of groups.
        mpmd_dim: usize,
    },
    /// An array handed to an `MpmdArray` is not laid out on one of the mesh's groups.
    #[error(
        "array {index} (shape {shape:?}) is not on a mesh that is part of the MPMD mesh: its devices {devices:?} are not one group's devices"
    )]
    NotOnAGroup {
        /// Position of the array in the argument list.
        index: usize,
        /// Its shape.
        shape: Vec<i64>,
        /// Its devices.
        devices: Vec<i64>,
    },
    /// An array lies on a group its sharding does not name.
    #[error(
        "array {index} lies on MPMD group {group}, which is not among the sharding's groups {groups:?}; put it on one of those groups or name group {group} in the MpmdSharding"
    )]
    WrongGroup {
        /// Position of the array.
        index: usize,
        /// Its group.
        group: usize,
        /// The sharding's groups.
        groups: Vec<usize>,
    },
    /// An array lies on a group's devices, but a device holds another block than the group's
    /// own layout gives it (its mesh lists the devices in another order).
    #[error(
        "array {index} (shape {shape:?}) lies on MPMD group {group}'s devices, but device {device} holds block {held:?} where the group's layout with the same spec gives it {expected:?}; place the array on the group's own mesh (MpmdMesh::group({group})), or reshard it there first"
    )]
    LayoutDiffers {
        /// Position of the array.
        index: usize,
        /// Its shape.
        shape: Vec<i64>,
        /// The group.
        group: usize,
        /// The first device whose block differs.
        device: i64,
        /// The block (start, end per dimension) the array puts on that device.
        held: Vec<(i64, i64)>,
        /// The block the group's layout puts there.
        expected: Vec<(i64, i64)>,
    },
    /// Two arrays lie on the same group.
    #[error(
        "array {index} lies on MPMD group {group}, which another array already holds; give one array per group"
    )]
    DuplicateGroup {
        /// Position of the array.
        index: usize,
        /// The group.
        group: usize,
    },
    /// Arrays of one `MpmdArray` disagree in shape, type or spec.
    #[error(
        "the arrays of an MpmdArray must agree in shape, element type and spec (the MpmdSharding's, without the MPMD axis): {what}"
    )]
    Mismatch {
        /// What differed.
        what: String,
    },
    /// An `MpmdArray` with no local data was asked for its data, or to delete it.
    #[error(
        "the array is not addressable here: it holds no data in this process's MPMD groups (ask the process running one of its groups)"
    )]
    NotAddressable,
    /// An `MpmdArray` was used, or deleted again, after [`crate::MpmdArray::delete`] (or after a
    /// step it was donated to deleted it).
    #[error(
        "the MpmdArray was deleted (by delete() or by a step it was donated to); it cannot be used or deleted again (keep a copy made before deleting it)"
    )]
    Deleted,
    /// An `MpmdArray` was built from an array that was already deleted.
    #[error(
        "array {index} (shape {shape:?}) was deleted or donated; an MpmdArray is made of live arrays"
    )]
    DeletedArray {
        /// Position of the array.
        index: usize,
        /// Its shape.
        shape: Vec<i64>,
    },
    /// A list of arrays and a list of shardings differ in length.
    #[error("{arrays} arrays but {shardings} shardings; give one sharding per array")]
    LengthMismatch {
        /// Number of arrays.
        arrays: usize,
        /// Number of shardings.
        shardings: usize,
    },
    /// A sharding error from tessera-sharding.
    #[error(transparent)]
    Sharding(#[from] tessera_sharding::ShardingError),
    /// `logically_stacked` with `strict`: the array is already sharded over the stacking axis.
    #[error("axis {axis:?} already appears in the array's spec {spec}; stack it over another axis")]
    AxisInSpec {
        /// The MPMD axis.
        axis: String,
        /// The array's spec.
        spec: String,
    },
    /// `logically_stacked` could not place the array (axis missing, position past its rank, a
    /// shard that is not one slice of the stacked array).
    #[error("stacking an array: {0}")]
    Stacking(String),
    /// A reshard across the processes of a job failed to exchange its blocks.
    #[error("a reshard across processes: {0}")]
    Reshard(String),
    /// The identity program that moves an SPMD array onto its groups on the devices could not
    /// be built or run (`reshard_device.rs`).
    #[error(
        "moving an array onto its MPMD groups on the devices: {what}; \
         `Array::reshard` each group's copy instead"
    )]
    ReshardProgram {
        /// What failed.
        what: String,
    },
    /// A device error from tessera-pjrt.
    #[error(transparent)]
    Pjrt(#[from] tessera_pjrt::PjrtError),
    /// A host array was malformed or cut outside its bounds.
    #[error(transparent)]
    Host(#[from] tessera_ir::IrError),
}

/// Shorthand for results of this crate.
pub type Result<T, E = MpmdError> = std::result::Result<T, E>;
