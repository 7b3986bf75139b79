//! MPMD pipeline parallelism: `MpmdMesh`, `MpmdArray`, `treduce`, and the runtime that runs a
//! schedule's task lists on groups of devices.
