//! `--xla-profile NAME`: named sets of XLA compiler options applied to every program of the
//! step through the compile options (as `--xla-option` passes one), so a run states which XLA
//! settings it measured. `--xla-option` given as well wins over the profile, option by option.
//!
//! - `xla`: XLA's defaults (nothing set; the default profile until a GPU measurement says
//!   otherwise).
//! - `maxtext-gpu`: the GPU settings MaxText trains with on H100s: the latency-hiding scheduler,
//!   Triton GEMMs and command buffers off, collectives combined up to 128 MiB (reduce-scatters
//!   64 MiB) and pipelined, while loops double-buffered, XLA's rematerialization pass disabled.
//!   They are `DebugOptions` fields of the GPU compiler; a CPU plugin accepts and ignores them.

use anyhow::bail;
use tessera_pjrt::OptionOverride;

/// The profiles' names, for messages and `--help`.
pub const NAMES: [&str; 2] = ["xla", "maxtext-gpu"];

/// The options of profile `name`, in the order they are applied.
pub fn options(name: &str) -> anyhow::Result<Vec<(String, OptionOverride)>> {
    let pairs: &[(&str, &str)] = match name {
        "xla" => &[],
        "maxtext-gpu" => &[
            ("xla_gpu_enable_latency_hiding_scheduler", "true"),
            ("xla_gpu_enable_triton_gemm", "false"),
            ("xla_gpu_enable_command_buffer", ""),
            ("xla_gpu_enable_highest_priority_async_stream", "true"),
            ("xla_gpu_all_reduce_combine_threshold_bytes", "134217728"),
            ("xla_gpu_all_gather_combine_threshold_bytes", "134217728"),
            ("xla_gpu_reduce_scatter_combine_threshold_bytes", "67108864"),
            ("xla_gpu_enable_pipelined_all_gather", "true"),
            ("xla_gpu_enable_pipelined_reduce_scatter", "true"),
            ("xla_gpu_enable_pipelined_all_reduce", "true"),
            ("xla_gpu_enable_while_loop_double_buffering", "true"),
            ("xla_disable_hlo_passes", "rematerialization"),
        ],
        other => bail!(
            "--xla-profile {other}: use one of {} (see docs/gpus.md)",
            NAMES.join(", ")
        ),
    };
    // Values read as `--xla-option` reads them (an empty one stays an empty string).
    Ok(pairs
        .iter()
        .map(|(n, v)| (n.to_string(), OptionOverride::parse(v)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_are_named_sets_and_unknown_names_are_refused() {
        assert!(options("xla").unwrap_or_default().is_empty());
        let maxtext = options("maxtext-gpu").unwrap_or_default();
        let get = |name: &str| {
            maxtext
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            get("xla_gpu_enable_triton_gemm"),
            Some(OptionOverride::Bool(false))
        );
        assert_eq!(
            get("xla_gpu_all_reduce_combine_threshold_bytes"),
            Some(OptionOverride::Int(134_217_728))
        );
        assert_eq!(
            get("xla_gpu_enable_command_buffer"),
            Some(OptionOverride::String(String::new()))
        );
        let err = options("fast").map(|_| ()).unwrap_err().to_string();
        assert!(err.contains("xla, maxtext-gpu"), "{err}");
    }
}
