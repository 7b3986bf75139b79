//! What a run prints at its end: the pipeline's measured figures against the simulator's, the
//! memory per group, throughput and MFU, and the JSON summary's parts.

use crate::cli::out::outln;
use std::process::ExitCode;
use tessera_mpmd::driver::CompiledPipeline;
use tessera_mpmd::runtime::Timings;
use tessera_schedule::Costs;

/// The pipeline's figures over the run.
pub struct PipelineFigures {
    pub bubble_measured: f64,
    pub bubble_simulated: f64,
    /// Each group's busy milliseconds in the last step (empty for one program).
    pub group_busy_ms: Vec<f64>,
    /// Each group's milliseconds waiting for inputs already produced in the last step (the
    /// transfers' exposed time; empty for one program).
    pub transfer_wait_ms: Vec<f64>,
    pub makespan_ms: f64,
    pub predicted_ms: f64,
    /// Whether every group ran the schedule's order (`None`: the step ran as one program, with
    /// no schedule to follow).
    pub orders_match: Option<bool>,
    pub memory: serde_json::Value,
}

/// The figures of a step that ran as one program (`MpmdJit::is_fused`): no pipeline tasks, so
/// no bubble, order or per-group memory; says so.
pub fn one_program_figures(makespans_ms: &[f64]) -> anyhow::Result<PipelineFigures> {
    outln!(
        "the step ran as one program on one MPMD group (the loop, its accumulation and the \
         update in one executable): no pipeline tasks to report; --no-fuse runs the schedule's \
         tasks instead"
    )?;
    Ok(PipelineFigures {
        bubble_measured: f64::NAN,
        bubble_simulated: f64::NAN,
        group_busy_ms: Vec::new(),
        transfer_wait_ms: Vec::new(),
        makespan_ms: settled_median(makespans_ms),
        predicted_ms: f64::NAN,
        orders_match: None,
        memory: serde_json::Value::Null,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The median of `values` after the first (which warms caches up), when there are more.
pub fn settled_median(values: &[f64]) -> f64 {
    median(
        if values.len() > 1 {
            &values[1..]
        } else {
            values
        }
        .to_vec(),
    )
}

/// Each task name's median milliseconds (`task_ms` of `--json`).
pub fn task_medians(
    times: &std::collections::BTreeMap<String, Vec<f64>>,
) -> serde_json::Map<String, serde_json::Value> {
    times
        .iter()
        .map(|(name, t)| (name.clone(), serde_json::json!(median(t.clone()))))
        .collect()
}

/// Each stage's remat policy, and why the asked one did not apply where it did not (`remat` of
/// `--json`).
pub fn remat(jit: &tessera_mpmd::MpmdJit) -> serde_json::Value {
    let stages: Vec<serde_json::Value> = jit
        .pipeline()
        .stage_remat()
        .into_iter()
        .map(|(policy, fallback)| {
            serde_json::json!({ "policy": policy.name(), "fallback": fallback })
        })
        .collect();
    serde_json::Value::Array(stages)
}

/// The collectives one step executes on each group, by kind (`collectives_per_step` of
/// `--json`), printed as one line: counted in XLA's optimized programs, each times its runs in
/// the step (so a count that grows with the micro-batches shows a reduction per micro-batch).
pub fn collectives(jit: &tessera_mpmd::MpmdJit) -> anyhow::Result<serde_json::Value> {
    let per_group = jit.collectives_per_step()?;
    let shown: Vec<String> = per_group
        .iter()
        .enumerate()
        .map(|(g, counts)| {
            let kinds: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
            match kinds.is_empty() {
                true => format!("group {g}: none"),
                false => format!("group {g}: {}", kinds.join(", ")),
            }
        })
        .collect();
    outln!(
        "collectives per step (XLA's optimized programs): {}",
        shown.join("; ")
    )?;
    Ok(serde_json::to_value(per_group)?)
}

/// Prints the last step's task table and the pipeline's figures, measured against simulated.
pub fn pipeline_figures(
    pipeline: &CompiledPipeline,
    timings: &Timings,
    per_step: &[(f64, f64)],
    stages: u32,
) -> anyhow::Result<PipelineFigures> {
    super::super::timing::print_task_table(timings)?;
    let plan = pipeline.schedule_plan();
    let groups = plan.actors.len();
    let bubble_simulated = tessera_schedule::simulate(plan, &Costs::uniform(stages, 1.0, 2.0, 0.0))
        .map(|s| s.bubble_ratio)
        .unwrap_or(f64::NAN);
    let bubble_measured = timings.bubble_ratio(groups);
    outln!(
        "bubble ratio: measured {bubble_measured:.3}, simulator (F=1, B=2) {bubble_simulated:.3}"
    )?;
    let group_busy_ms = timings.group_busy_ms(groups);
    let shown: Vec<String> = group_busy_ms.iter().map(|b| format!("{b:.2}")).collect();
    outln!("busy ms per group in the last step: {}", shown.join(", "))?;
    let transfer_wait_ms = pipeline.transfer_wait_ms(timings);
    let shown: Vec<String> = transfer_wait_ms.iter().map(|b| format!("{b:.2}")).collect();
    outln!(
        "ms per group waiting for inputs already produced (exposed transfers) in the last step: {}",
        shown.join(", ")
    )?;
    let makespan_ms = settled_median(&per_step.iter().map(|s| s.0).collect::<Vec<_>>());
    let predicted_ms = settled_median(&per_step.iter().map(|s| s.1).collect::<Vec<_>>());
    outln!(
        "step makespan (median over steps): measured {makespan_ms:.3} ms, simulator with the \
         measured task and transfer times {predicted_ms:.3} ms"
    )?;
    let orders_match = timings
        .group_orders(groups)
        .iter()
        .zip(&plan.actors)
        .all(|(got, want)| {
            got == &want
                .iter()
                .map(tessera_mpmd::pipeline::action_name)
                .collect::<Vec<_>>()
        });
    outln!("each group ran its actions in the schedule's order: {orders_match}")?;
    outln!(
        "transfers in the last step: {} issued in {:.3} ms",
        timings.transfers.len(),
        timings.transfers.iter().map(|t| t.duration_us).sum::<f64>() / 1000.0
    )?;
    let memory = pipeline.memory_report(timings);
    outln!(
        "peak live bytes per group: measured {:?}, predicted {:?}; peak in-flight micro-batches \
         per stage: measured {:?}, schedule {:?}",
        memory.peak_live_bytes,
        memory.predicted_peak_live_bytes,
        memory.peak_inflight_microbatches,
        memory.predicted_inflight_microbatches
    )?;
    Ok(PipelineFigures {
        bubble_measured,
        bubble_simulated,
        group_busy_ms,
        transfer_wait_ms,
        makespan_ms,
        predicted_ms,
        orders_match: Some(orders_match),
        memory: memory_json(&memory, plan),
    })
}

/// The step's memory, per group (its stages' in-flight micro-batches with it) and per stage.
fn memory_json(
    memory: &tessera_mpmd::memory::MemoryReport,
    plan: &tessera_schedule::Plan,
) -> serde_json::Value {
    let groups: Vec<_> = (0..memory.peak_live_bytes.len())
        .map(|g| {
            let stages = plan.placement.stages_of(g as u32);
            let inflight: Vec<_> = stages
                .iter()
                .map(|&s| memory.peak_inflight_microbatches.get(s as usize))
                .collect();
            serde_json::json!({
                "group": g,
                "stages": stages,
                "peak_live_bytes": memory.peak_live_bytes[g],
                "predicted_peak_live_bytes": memory.predicted_peak_live_bytes.get(g),
                "peak_inflight_microbatches": inflight,
            })
        })
        .collect();
    let stages: Vec<_> = (0..memory.peak_inflight_microbatches.len())
        .map(|s| {
            serde_json::json!({
                "stage": s,
                "peak_inflight_microbatches": memory.peak_inflight_microbatches[s],
                "predicted_inflight_microbatches": memory.predicted_inflight_microbatches.get(s),
                "activation_bytes": memory.activation_bytes.get(s),
                "weight_residual_bytes": memory.weight_residual_bytes.get(s),
            })
        })
        .collect();
    serde_json::json!({ "groups": groups, "stages": stages })
}

/// Throughput: tokens per second of the pipelined step, and for models whose FLOPs per token
/// are known, the model FLOP/s as a fraction of the matmul peak measured on device 0 (MFU).
pub struct Throughput {
    pub tokens_per_second: f64,
    pub flops_per_token: Option<f64>,
    pub peak_flops_per_second: Option<f64>,
    /// Where the peak came from (the accelerator table, or a measured matmul).
    pub peak_source: Option<String>,
    /// Model FLOP/s over the peak, FLOPs counted as the PaLM paper does (attention in full).
    pub mfu: Option<f64>,
    /// The same counted as MaxText does (causal attention at half), to compare with its
    /// published figures.
    pub mfu_maxtext: Option<f64>,
}

/// Measures the peak for the model's compute dtype (bf16 matmuls run at the device's bf16
/// peak) and prints the throughput line.
pub fn throughput(
    client: &tessera_pjrt::Client,
    tokens_per_second: f64,
    (flops_per_token, flops_maxtext): (Option<f64>, Option<f64>),
    compute: tessera_ir::DType,
) -> anyhow::Result<Throughput> {
    let (peak, warning) =
        peak_or_warning(flops_per_token.map(|_| tessera::perf::device_peak(client, 0, compute)));
    if let Some(warning) = warning {
        eprintln!("{warning}");
    }
    let mfu = flops_per_token
        .zip(peak.as_ref())
        .map(|(f, p)| tessera::perf::mfu(f, tokens_per_second, p.flops_per_second));
    let mfu_maxtext = flops_maxtext
        .zip(peak.as_ref())
        .map(|(f, p)| tessera::perf::mfu(f, tokens_per_second, p.flops_per_second));
    match (flops_per_token, &peak, mfu) {
        (Some(f), Some(p), Some(m)) => outln!(
            "throughput: {tokens_per_second:.0} tokens/s; {:.3} GFLOP/s of model FLOPs ({f:.0} per \
             token) = MFU {:.1}% of one device's {:.2} GFLOP/s peak ({}); FLOPs counted as the \
             PaLM paper does (attention in full){}",
            f * tokens_per_second / 1e9,
            m * 100.0,
            p.flops_per_second / 1e9,
            p.source,
            mfu_maxtext
                .map(|x| format!(
                    "; MFU {:.1}% as MaxText counts (causal attention at half)",
                    x * 100.0
                ))
                .unwrap_or_default()
        )?,
        _ => outln!("throughput: {tokens_per_second:.0} examples/s")?,
    }
    Ok(Throughput {
        tokens_per_second,
        flops_per_token,
        peak_flops_per_second: peak.as_ref().map(|p| p.flops_per_second),
        peak_source: peak.map(|p| p.source),
        mfu,
        mfu_maxtext,
    })
}

/// The parameters' bytes, as the JSON summary reports them: `parameter_bytes` (the whole
/// model), `parameter_bytes_per_group` (what each group's stages hold), and per device (by id)
/// what its buffers hold (`parameter_bytes_per_device`, measured) and what the parameters'
/// specs give it (`parameter_bytes_per_device_expected`: each parameter's bytes over its
/// sharding factor); `parameter_sharding_factor` is each group's bytes over its fullest
/// device's.
pub fn parameter_bytes(
    params: &[tessera_mpmd::StepArg],
    mesh: &tessera_mpmd::MpmdMesh,
) -> anyhow::Result<serde_json::Value> {
    let (devices, groups) = (mesh.mesh().device_ids().len(), mesh.mpmd_dim());
    let (mut measured, mut expected) = (vec![0u64; devices], vec![0u64; devices]);
    let mut per_group = vec![0u64; groups];
    let mut total = 0u64;
    for param in params {
        let (dims, ty) = match param {
            tessera_mpmd::StepArg::Host(h) => (
                h.dims().to_vec(),
                tessera_pjrt::ElementType::from_dtype(h.dtype()),
            ),
            tessera_mpmd::StepArg::Mpmd(m) => (m.shape().to_vec(), m.dtype()),
        };
        let bytes = dims.iter().product::<i64>() as u64 * ty.size_in_bytes() as u64;
        total += bytes;
        let tessera_mpmd::StepArg::Mpmd(m) = param else {
            continue;
        };
        for (&group, array) in m.to_mpmd_local_arrays()? {
            if let Some(g) = per_group.get_mut(group) {
                *g += bytes;
            }
            let shard = array.shard_bytes()? as u64;
            for s in array.addressable_shards()? {
                let d = usize::try_from(s.device)?;
                if d < devices {
                    measured[d] += s.buffer.on_device_size()?;
                    expected[d] += shard;
                }
            }
        }
    }
    let mut fullest = vec![0u64; groups];
    for (d, &bytes) in measured.iter().enumerate() {
        if let Some(g) = mesh.group_of_device(d as i64) {
            fullest[g] = fullest[g].max(bytes);
        }
    }
    let factor: Vec<f64> = (0..groups)
        .map(|g| per_group[g] as f64 / fullest[g].max(1) as f64)
        .collect();
    Ok(serde_json::json!({
        "parameter_bytes": total,
        "parameter_bytes_per_group": per_group,
        "parameter_bytes_per_device": measured,
        "parameter_bytes_per_device_expected": expected,
        "parameter_sharding_factor": factor,
    }))
}

/// The largest relative difference of the pipelined losses from their references' (`None`
/// without a reference, as with `--no-reference`).
pub fn max_difference(losses: &[f64], references: &[f64]) -> Option<f64> {
    (!references.is_empty()).then(|| {
        losses
            .iter()
            .zip(references)
            .map(|(&a, &b)| super::reference::relative_difference(a, b))
            .fold(0.0, f64::max)
    })
}

/// The run's exit status: success, or an error saying what failed (a loss off its reference,
/// or a group that ran its actions out of the schedule's order).
pub fn verdict(
    max_diff: Option<f64>,
    tolerance: f64,
    orders_match: Option<bool>,
) -> anyhow::Result<ExitCode> {
    if let Some(diff) = max_diff.filter(|&d| d > tolerance) {
        anyhow::bail!(
            "a pipelined loss differs from the unpipelined reference's by {diff:.2e} (relative), \
             more than {tolerance:.0e}"
        );
    }
    if orders_match == Some(false) {
        anyhow::bail!(
            "a group ran its actions in another order than the schedule's (see the task table \
             above): the runtime did not follow the plan"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints how many programs this run compiled with XLA and loaded from the persistent compile
/// cache (`tessera_pjrt::compile_counts`), and returns them for the JSON summary's `compiles`.
pub fn compiles() -> anyhow::Result<serde_json::Value> {
    let counts = tessera_pjrt::compile_counts();
    let dir = tessera_pjrt::compile_cache()?.map(|c| c.dir().to_path_buf());
    outln!(
        "programs: {} compiled by XLA, {} loaded from the compile cache ({})",
        counts.compiled,
        counts.loaded,
        dir.as_ref()
            .map_or("off".to_owned(), |d| d.display().to_string())
    )?;
    Ok(serde_json::json!({
        "compiled": counts.compiled,
        "loaded": counts.loaded,
        "cache_dir": dir,
    }))
}

/// The device peak where its lookup (made when the model's FLOPs are known) worked; where it
/// failed, no peak and the warning that says why MFU is missing (never left out in silence).
fn peak_or_warning<E: std::fmt::Display>(
    lookup: Option<Result<tessera::perf::DevicePeak, E>>,
) -> (Option<tessera::perf::DevicePeak>, Option<String>) {
    match lookup {
        Some(Ok(peak)) => (Some(peak), None),
        Some(Err(e)) => (
            None,
            Some(format!(
                "warning: no MFU: the peak FLOP/s of device 0 could not be found: {e}"
            )),
        ),
        None => (None, None),
    }
}

#[cfg(test)]
mod peak_tests {
    use super::*;

    #[test]
    fn a_failed_peak_lookup_is_said() {
        let (peak, warning) = peak_or_warning::<String>(Some(Err("no such device".into())));
        assert!(peak.is_none());
        let warning = warning.expect("a warning");
        assert!(
            warning.contains("no MFU") && warning.contains("no such device"),
            "{warning}"
        );
        assert_eq!(peak_or_warning::<String>(None), (None, None));
    }
}
