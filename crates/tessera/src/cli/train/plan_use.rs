//! `tessera train --plan FILE` (written by `tessera plan --out FILE`) and `--plan auto` (which
//! runs the search first): the plan's options replace the run's, and the run reports the plan's
//! predicted step time and peak bytes next to what it measured.

use std::path::Path;

use anyhow::bail;

use super::args::Args;
use crate::cli::out::outln;
use crate::cli::plan::{self, PlanFile};

/// What the plan predicted, kept for the report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prediction {
    /// Where the plan came from (`auto` or the file).
    pub source: String,
    /// The predicted step time, in milliseconds.
    pub step_ms: f64,
    /// The predicted peak bytes on the fullest device.
    pub peak_bytes: u64,
    /// Devices per group (to turn a group's measured bytes into a device's).
    pub data: u32,
}

/// `args` with `--plan`'s options applied (unchanged without `--plan`).
pub fn apply(mut args: Args, plugin: Option<&str>) -> anyhow::Result<Args> {
    let Some(which) = args.plan.clone() else {
        return Ok(args);
    };
    if let (Some(bytes), false) = (&args.device_memory, which == "auto") {
        bail!(
            "--device-memory {bytes} limits the search of --plan auto; the plan file {which} \
             was chosen already: drop --device-memory, or plan with it (tessera plan ... \
             --device-memory {bytes} --out FILE)"
        );
    }
    // What `--plan auto` chooses, refused before it measures (the batch, devices and dtype it
    // plans for are the run's own).
    if which == "auto" {
        let chosen = ["stages", "microbatches", "schedule"]
            .into_iter()
            .filter(|id| args.was_given(id))
            .map(|id| format!("--{id}"))
            .chain(args.mpmd_dim.map(|_| "--mpmd-dim".to_string()))
            .chain(
                args.stage_layers
                    .as_ref()
                    .map(|_| "--stage-layers".to_string()),
            )
            .next();
        if let Some(flag) = chosen {
            bail!(
                "--plan auto chooses {flag}; drop {flag}, or plan with it fixed (tessera plan \
                 ... --out FILE) and train with --plan FILE"
            );
        }
    }
    let file = match which.as_str() {
        "auto" => auto(&args, plugin)?,
        path => PlanFile::read(Path::new(path))?,
    };
    // The model the plan was made for must be the model trained.
    let given = [
        (
            "--layers",
            args.layers.map(|v| v as i64),
            file.layers as i64,
        ),
        ("--d-model", args.d_model, file.d_model),
        ("--heads", args.heads, file.heads),
        ("--seq-len", args.seq_len, file.seq_len),
    ];
    for (flag, value, planned) in given {
        if let Some(v) = value.filter(|v| *v != planned) {
            bail!(
                "--plan {which} was made for {flag} {planned}, not {v}: drop {flag}, or plan for \
                 this size (tessera plan ... {flag} {v} --out FILE)"
            );
        }
    }
    let name = |m: &str| {
        if m == "gpt" {
            "gpt2".to_string()
        } else {
            m.to_string()
        }
    };
    if let Some(model) = args
        .model
        .as_deref()
        .filter(|m| name(m) != name(&file.model))
    {
        bail!(
            "--plan {which} was made for --model {}, not {model}: drop --model, or plan for {model}",
            file.model
        );
    }
    if args.config.is_some() {
        bail!("--plan sets the model's sizes; drop --config (plan with it instead)");
    }
    // The layout flags the plan sets: one given with another value would be silently replaced.
    let counts = |c: &[usize]| c.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let layout = [
        (
            "stages",
            "--stages",
            args.stages.to_string(),
            file.stages.to_string(),
        ),
        (
            "microbatches",
            "--microbatches",
            args.microbatches.to_string(),
            file.microbatches.to_string(),
        ),
        (
            "devices",
            "--devices",
            args.devices.to_string(),
            file.devices.to_string(),
        ),
        (
            "batch",
            "--batch",
            args.batch.to_string(),
            file.batch.to_string(),
        ),
        (
            "schedule",
            "--schedule",
            args.schedule.clone(),
            file.schedule.clone(),
        ),
        ("dtype", "--dtype", args.dtype.clone(), file.dtype.clone()),
        (
            "remat",
            "--remat",
            args.remat.name().to_string(),
            file.remat
                .clone()
                .unwrap_or_else(|| tessera_mpmd::RematPolicy::default().name().to_string()),
        ),
    ];
    let optional = [
        (
            "--mpmd-dim",
            args.mpmd_dim.map(|d| d.to_string()),
            file.mpmd_dim.to_string(),
        ),
        (
            "--stage-layers",
            args.stage_layers.as_deref().map(counts),
            counts(&file.stage_layers),
        ),
    ];
    let conflict = layout
        .into_iter()
        .filter(|(id, ..)| args.was_given(id))
        .map(|(_, flag, value, planned)| (flag, Some(value), planned))
        .chain(optional)
        .find_map(|(flag, value, planned)| {
            value.filter(|v| *v != planned).map(|v| (flag, v, planned))
        });
    if let Some((flag, value, planned)) = conflict {
        bail!(
            "--plan {which} sets {flag} {planned}, not {value}: drop {flag}, or plan with it \
             (tessera plan ... --out FILE)"
        );
    }
    if args.mesh.is_some() {
        bail!("--plan sets the devices and groups; drop --mesh");
    }
    check_fsdp(&args, &file, &which)?;
    args.model = Some(file.model.clone());
    args.layers = Some(file.layers);
    args.d_model = Some(file.d_model);
    args.heads = Some(file.heads);
    args.seq_len = Some(file.seq_len);
    args.dtype = file.dtype.clone();
    args.batch = file.batch;
    args.devices = file.devices;
    args.stages = file.stages;
    args.stage_layers = Some(file.stage_layers.clone());
    args.mpmd_dim = Some(file.mpmd_dim);
    args.microbatches = file.microbatches;
    args.schedule = file.schedule.clone();
    args.no_fuse |= file.no_fuse;
    if let Some(when) = &file.fsdp_gather {
        args.fsdp = true;
        args.fsdp_gather = when
            .parse()
            .map_err(|e| anyhow::anyhow!("--plan {which}: {e}"))?;
    }
    if let Some(policy) = &file.remat {
        args.remat = policy
            .parse()
            .map_err(|e| anyhow::anyhow!("--plan {which}: {e}"))?;
    }
    if !args.json {
        // What is applied, made from the fields read: the file's `command` text is only a
        // note, which an edited file may no longer match.
        outln!(
            "plan ({which}): tessera train {}",
            file.train_words().join(" ")
        )?;
    }
    args.plan_prediction = Some(Prediction {
        source: which,
        step_ms: file.predicted_step_ms,
        peak_bytes: file.predicted_peak_bytes,
        data: file.devices / file.mpmd_dim.max(1),
    });
    Ok(args)
}

/// Refuses a run whose FSDP flags the plan `which` does not match: `--fsdp` with a plan of
/// replicated stages, or an `--fsdp-gather` other than the plan's.
fn check_fsdp(args: &Args, file: &PlanFile, which: &str) -> anyhow::Result<()> {
    match &file.fsdp_gather {
        None if args.fsdp => bail!(
            "--plan {which} was made for stages that are not fully sharded; drop --fsdp, or plan \
             with it (tessera plan ... --fsdp --out FILE)"
        ),
        Some(planned) if args.was_given("fsdp_gather") && args.fsdp_gather.name() != planned => {
            bail!(
                "--plan {which} sets --fsdp-gather {planned}, not {}: drop --fsdp-gather, or plan \
                 with it (tessera plan ... --fsdp --fsdp-gather {} --out FILE)",
                args.fsdp_gather,
                args.fsdp_gather
            )
        }
        _ => Ok(()),
    }
}

/// The planner's first choice for the run's model, batch and devices.
fn auto(args: &Args, plugin: Option<&str>) -> anyhow::Result<PlanFile> {
    let plan_args = plan::Args {
        model: args.model.clone(),
        config: args.config.clone(),
        layers: args.layers,
        d_model: args.d_model,
        heads: args.heads,
        seq_len: args.seq_len,
        dtype: args.dtype.clone(),
        batch: args.batch,
        microbatches: None,
        devices: args.devices,
        schedules: None,
        max_stages_per_group: 2,
        // A policy the run names is kept; otherwise the search picks one.
        remat: args.was_given("remat").then(|| vec![args.remat]),
        // With --fsdp the search picks the gather mode, unless the run names one.
        fsdp: args.fsdp,
        fsdp_gather: (args.fsdp && args.was_given("fsdp_gather")).then(|| vec![args.fsdp_gather]),
        device_memory: args.device_memory.clone(),
        cores: None,
        repeats: 5,
        remeasure: false,
        cache: None,
        top: 1,
        refine: 10,
        calibrate: 7,
        out: None,
        json: args.json,
    };
    let (ranked, context, notes) = plan::rank(&plan_args, plugin)?;
    if !args.json {
        let reused = notes.iter().filter(|n| n.contains("reused")).count();
        outln!(
            "plan costs: {reused} of {} measurements reused from the cache, the rest measured now",
            notes.len()
        )?;
    }
    match ranked.first() {
        Some(first) => Ok(plan::plan_file(first, &context)),
        None => bail!("--plan auto: the search found no configuration"),
    }
}

/// Adds the plan's prediction next to the measurement to the summary, and prints it.
pub fn report(
    args: &Args,
    summary: &mut serde_json::Value,
    measured_step_ms: f64,
) -> anyhow::Result<()> {
    let Some(p) = &args.plan_prediction else {
        return Ok(());
    };
    // A group's measured peak over its devices (parameters replicated, rows split).
    let measured_peak = summary["memory"]["groups"].as_array().and_then(|groups| {
        groups
            .iter()
            .filter_map(|g| g["peak_live_bytes"].as_u64())
            .max()
            .map(|b| b / u64::from(p.data.max(1)))
    });
    if let Some(fields) = summary.as_object_mut() {
        fields.insert("plan".into(), p.source.clone().into());
        fields.insert("plan_predicted_step_ms".into(), p.step_ms.into());
        fields.insert("plan_measured_step_ms".into(), measured_step_ms.into());
        fields.insert("plan_predicted_peak_bytes".into(), p.peak_bytes.into());
        fields.insert("plan_measured_peak_bytes".into(), measured_peak.into());
    }
    if !args.json {
        outln!(
            "plan: predicted step {:.2} ms, measured {measured_step_ms:.2} ms ({:.2}×); predicted \
             peak {} bytes per device, measured {}",
            p.step_ms,
            measured_step_ms / p.step_ms,
            p.peak_bytes,
            measured_peak.map_or(
                "- (one program: no per-group accounting)".into(),
                |b| format!("{b} bytes ({:.2}×)", b as f64 / p.peak_bytes.max(1) as f64)
            )
        )?;
    }
    Ok(())
}
