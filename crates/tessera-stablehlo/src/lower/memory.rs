//! Memory kinds at the entry function's boundary, lowered as JAX lowers them
//! (`lower_jaxpr_to_module` and `wrap_with_memory_kind` in `jax/_src/interpreters/mlir.py`):
//!
//! - when every argument and result sharding is in the default memory (no kind, or `device`),
//!   nothing is annotated;
//! - otherwise each argument and result with a sharding carries `mhlo.memory_kind = "<kind>"`
//!   (a sharding without a kind is in the default memory, `device`, as JAX's canonicalized
//!   shardings are), which XLA's PJRT client reads to give each parameter and output its memory
//!   space;
//! - a result returned outside the default memory is also passed through
//!   `stablehlo.custom_call @annotate_device_placement` with
//!   `mhlo.frontend_attributes = {_xla_buffer_placement = "<kind>"}`, the annotation XLA's host
//!   offloader turns into the move to that memory.
//!
//! One difference from JAX: JAX wraps every result that has a memory kind, `device` ones
//! included, once any kind is not the default; here only the results outside the default memory
//! are wrapped. Annotating a `device` result moves it where it already is, and XLA's CPU
//! compiler has no implementation of the custom call at all, so leaving it out lets a CPU
//! plugin run programs that take arguments in host memory and return device results.

use melior::ir::Value;
use tessera_ir::ShapedArray;
use tessera_sharding::NamedSharding;

use super::mlir_type;
use crate::context::LowerError;
use crate::emit::{Body, quote};

/// The memory kind of a sharding without one: every PJRT device's default memory.
pub const DEFAULT_MEMORY_KIND: &str = "device";

/// The memory kinds the entry function's arguments and results are annotated with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct EntryMemoryKinds {
    /// Per argument, its `mhlo.memory_kind`.
    pub args: Vec<Option<String>>,
    /// Per result, its `mhlo.memory_kind`.
    pub results: Vec<Option<String>>,
}

/// JAX's rule: no annotation when all shardings are in the default memory; else the kind of
/// every argument and result that has a sharding (a left-open one, `None`, has no kind).
pub(super) fn entry_memory_kinds(
    args: &[Option<NamedSharding>],
    results: &[Option<NamedSharding>],
) -> EntryMemoryKinds {
    let all_default = args
        .iter()
        .chain(results)
        .flatten()
        .all(|s| s.memory_kind().is_none_or(|k| k == DEFAULT_MEMORY_KIND));
    if all_default {
        return EntryMemoryKinds::default();
    }
    let kind = |s: &Option<NamedSharding>| {
        s.as_ref()
            .map(|s| s.memory_kind().unwrap_or(DEFAULT_MEMORY_KIND).to_owned())
    };
    EntryMemoryKinds {
        args: args.iter().map(kind).collect(),
        results: results.iter().map(kind).collect(),
    }
}

/// Passes each result returned outside the default memory through
/// `annotate_device_placement` (JAX's `wrap_with_memory_kind`).
pub(super) fn place_results<'c, 'b>(
    body: &Body<'c, 'b>,
    outputs: Vec<Value<'c, 'b>>,
    kinds: &[Option<String>],
    avals: &[ShapedArray],
) -> Result<Vec<Value<'c, 'b>>, LowerError> {
    outputs
        .into_iter()
        .enumerate()
        .map(|(i, out)| {
            let kind = kinds.get(i).cloned().flatten();
            let Some(kind) = kind.filter(|k| k != DEFAULT_MEMORY_KIND) else {
                return Ok(out);
            };
            let aval = avals.get(i).ok_or_else(|| {
                LowerError::Build(format!("result {i} has a memory kind but no type"))
            })?;
            let attrs = [
                ("call_target_name", quote("annotate_device_placement")),
                ("has_side_effect", "true".to_owned()),
                ("api_version", "1 : i32".to_owned()),
                (
                    "mhlo.frontend_attributes",
                    format!("{{_xla_buffer_placement = {}}}", quote(&kind)),
                ),
            ];
            let placed = body.op("stablehlo.custom_call", &[out], &[&mlir_type(aval)], &attrs)?;
            placed.into_iter().next().ok_or_else(|| {
                LowerError::Build("annotate_device_placement returned no value".into())
            })
        })
        .collect()
}
