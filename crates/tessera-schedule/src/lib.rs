//! Pipeline schedules as plain data: per-actor task lists, validated, simulated and rendered.
//!
//! Pure: this crate depends on no other Tessera crate, so users can write and check their own
//! schedules.
