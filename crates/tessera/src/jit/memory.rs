//! Memory kinds at a `jit`'s boundary. The lowering annotates them as JAX does
//! (`tessera_stablehlo::LowerOptions`: `mhlo.memory_kind` on arguments and results, and
//! `annotate_device_placement` on results outside the default memory); this module holds what
//! the plugin's side needs:
//!
//! - a result placed in host memory compiles only where XLA's compiler offloads to the host
//!   (the CUDA and TPU plugins); XLA's CPU compiler has no implementation of
//!   `annotate_device_placement` (JAX skips its memory tests on CPU: "Memories do not work on
//!   CPU backends yet"), so the CPU plugins' compile error becomes
//!   [`JitError::HostResultsUnsupported`], naming the results, the plugin and what to do;
//! - arguments in host memory need no support from the compiler: the CPU plugins read them
//!   (every CPU memory is host memory) and return results in the device memory;
//! - the results' buffers are checked to be in the memory kind their sharding names
//!   ([`JitError::ResultMemoryKind`]), so a plugin that compiled the annotations but ignored
//!   them cannot hand back arrays whose sharding lies about where they are.

use tessera_pjrt::{Buffer, Client, PjrtError};
use tessera_sharding::NamedSharding;
use tessera_stablehlo::DEFAULT_MEMORY_KIND;

use super::JitError;

/// The results (by position) that `shardings` (the declared output shardings, `None` where XLA
/// chooses) place outside the default memory, with their kinds.
pub(super) fn placed_results(shardings: &[Option<&NamedSharding>]) -> Vec<(usize, String)> {
    shardings
        .iter()
        .enumerate()
        .filter_map(|(k, s)| {
            let kind = (*s)?.memory_kind()?;
            (kind != DEFAULT_MEMORY_KIND).then(|| (k, kind.to_owned()))
        })
        .collect()
}

/// The compile error of a module whose `placed` results (see [`placed_results`]) are outside
/// the default memory: the plugin's refusal of `annotate_device_placement` becomes
/// [`JitError::HostResultsUnsupported`]; any other error is passed on.
pub(super) fn compile_error(
    error: PjrtError,
    client: &Client,
    placed: &[(usize, String)],
) -> JitError {
    let refused = matches!(&error, PjrtError::Call { message, .. }
        if message.contains("annotate_device_placement"));
    if placed.is_empty() || !refused {
        return error.into();
    }
    let results: Vec<String> = placed
        .iter()
        .map(|(k, kind)| format!("result {k} in '{kind}'"))
        .collect();
    JitError::HostResultsUnsupported {
        results: results.join(", "),
        plugin: plugin_name(client),
        detail: error.to_string(),
    }
}

/// Compares the output memory kinds the plugin compiled (JAX's `get_output_memory_kinds`)
/// with the `placed` results' kinds, where the plugin reports them (the CPU plugins do not:
/// their results are checked when they run, [`check_result_memory`]).
pub(super) fn check_compiled_kinds(
    executable: &tessera_pjrt::LoadedExecutable,
    placed: &[(usize, String)],
) -> Result<(), JitError> {
    if placed.is_empty() {
        return Ok(());
    }
    let Ok(kinds) = executable.output_memory_kinds() else {
        return Ok(());
    };
    for (index, want) in placed {
        if let Some(got) = kinds.get(*index).filter(|got| *got != want) {
            return Err(JitError::ResultMemoryKind {
                index: *index,
                want: want.clone(),
                got: got.clone(),
            });
        }
    }
    Ok(())
}

/// The plugin's name as `--plugin` takes it when it is a known one, else its library's path.
fn plugin_name(client: &Client) -> String {
    let path = client.plugin().path();
    let file = path
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or_default();
    let known = tessera_pjrt::known_plugins::CPU_PLUGINS
        .iter()
        .chain([&tessera_pjrt::known_plugins::JAX_CUDA12])
        .find(|p| p.library() == file);
    match known {
        Some(p) => format!("{} ({})", p.name, path.display()),
        None => path.display().to_string(),
    }
}

/// Checks that result `index`'s buffers are in the memory kind its `sharding` names (no kind:
/// the default memory).
pub(super) fn check_result_memory(
    index: usize,
    sharding: &NamedSharding,
    buffers: &[Buffer],
) -> Result<(), JitError> {
    let want = sharding.memory_kind().unwrap_or(DEFAULT_MEMORY_KIND);
    for buffer in buffers {
        let got = buffer.memory_kind()?;
        if got != want {
            return Err(JitError::ResultMemoryKind {
                index,
                want: want.to_owned(),
                got,
            });
        }
    }
    Ok(())
}
