//! `tessera plan`: measures a decoder's parts on one MPMD group of the plugin's devices, as many
//! as a group of the planned run holds (forward and backward time, activation and parameter
//! bytes of the embedding, each block, the head with the loss), under each remat policy of
//! `--remat` (a policy changes the times and the residual bytes) and, with `--fsdp`, each way of
//! gathering the fully sharded parameters (`--fsdp-gather`: a gather mode changes the bytes a
//! device holds and the collectives of each task), and the link between two devices; caches them under `~/.cache/tessera/plan/`, and ranks the pipeline configurations of
//! `--devices` devices with `tessera_schedule::search` (stages, boundaries, MPMD groups, devices
//! per group, micro-batches, schedule), one search per variant merged by
//! `tessera_schedule::variants`, by predicted step time, dropping those over `--device-memory`;
//! then calibrates the ranking against whole steps of its leading group shapes ([`calibrate`]).
//! `--out FILE` writes the first as the `tessera train` options it stands for (`tessera train
//! --plan FILE`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tessera_schedule::search::{Candidate, Link, Space, search, shapes};

mod calibrate;
mod costs;

use super::out::outln;
use super::train::profile;
use costs::{ModelVariant, device_kind, measurements, refined_ranking};

/// Arguments of `tessera plan`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The decoder: `gpt` (`gpt2`) or `llama`. Default: the config file's `model`.
    #[arg(long)]
    pub model: Option<String>,
    /// A TOML file with the decoder's sizes, as `tessera train --config` takes it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Decoder layers (default 4).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Decoder width (default 64).
    #[arg(long)]
    pub d_model: Option<i64>,
    /// Attention heads (default 4).
    #[arg(long)]
    pub heads: Option<i64>,
    /// Tokens per sequence (default 32).
    #[arg(long)]
    pub seq_len: Option<i64>,
    /// The compute dtype: `f32` or `bf16`.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Examples per step.
    #[arg(long, default_value_t = 64)]
    pub batch: u32,
    /// Micro-batch counts to try, e.g. `4,8,16` (default: every divisor of --batch up to 32).
    #[arg(long, value_delimiter = ',')]
    pub microbatches: Option<Vec<u32>>,
    /// Devices of the run.
    #[arg(long, default_value_t = 8)]
    pub devices: u32,
    /// Schedules to try (default: every built-in).
    #[arg(long, value_delimiter = ',')]
    pub schedules: Option<Vec<String>>,
    /// Remat policies to try, e.g. `everything_saveable,nothing_saveable` (default: every
    /// policy; each is measured apart, as a policy changes a part's times and the residual bytes
    /// it keeps).
    #[arg(long, value_delimiter = ',', value_name = "POLICIES")]
    pub remat: Option<Vec<tessera_mpmd::RematPolicy>>,
    /// Plan a run whose data-parallel stages are fully sharded (`tessera train --fsdp`): each
    /// way of gathering their parameters (`--fsdp-gather`) is measured and searched apart, and
    /// the plan chooses one (gathering once per step is faster, gathering in every task holds
    /// less: a `--device-memory` limit may leave only that).
    #[arg(long)]
    pub fsdp: bool,
    /// With `--fsdp`: the gather modes to try, e.g. `per-step` (default: both).
    #[arg(long, value_delimiter = ',', value_name = "WHEN", requires = "fsdp")]
    pub fsdp_gather: Option<Vec<tessera_mpmd::FsdpGather>>,
    /// The most pipeline stages per MPMD group (2 and more need the interleaved schedules).
    #[arg(long, default_value_t = 2)]
    pub max_stages_per_group: u32,
    /// Drop configurations whose predicted peak live bytes on a device exceed this (`2GiB`,
    /// `512MiB`, `1.5GB`, `300000`).
    #[arg(long, value_name = "BYTES")]
    pub device_memory: Option<String>,
    /// Host cores the devices share (the step takes at least the devices' summed busy time over
    /// them). Default: this machine's cores for the CPU plugin, 0 (a processor per device)
    /// otherwise.
    #[arg(long)]
    pub cores: Option<u32>,
    /// Timed steps per measurement (after one of warm-up); medians.
    #[arg(long, default_value_t = 5)]
    pub repeats: u32,
    /// Measure again even where the cache has the costs.
    #[arg(long)]
    pub remeasure: bool,
    /// Where measurements are cached (default: ~/.cache/tessera/plan).
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// Rows of the table.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Measure the stages of the N fastest layouts as they run (each stage one program, not
    /// the sum of its parts measured apart) and rank again with those times, until the N
    /// fastest are all measured so; 0: predict every stage from its parts.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub refine: usize,
    /// Calibrate against whole steps: for each group shape (MPMD groups × devices per group)
    /// among the N fastest layouts, or whose fastest is predicted within 1.3× the first's, train
    /// its 3 fastest layouts as `tessera train --plan` does (twice --repeats steps each, the
    /// median after the first), rank those by their measured steps and the shape's others by
    /// their predictions times the median measured over predicted step, and rank again, until
    /// no other shape qualifies and each layout predicted within 1.15× the first's has been
    /// trained once (at most 8 such); then time the 3 leading timed layouts twice more, taking
    /// turns, and rank them by the median of their three timings; last, keeping that order,
    /// time those 3 twice more, predict each by the mean of these fresh timings and scale the
    /// others by the median fresh over ranked step; 0: rank by the time model alone.
    #[arg(long, default_value_t = 7, value_name = "N")]
    pub calibrate: usize,
    /// Write the first configuration here as `tessera train` options (for `tessera train
    /// --plan FILE`).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print the ranking as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A chosen configuration as `tessera train` options, with what the planner predicts for it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// `--model`.
    pub model: String,
    /// `--layers`, `--d-model`, `--heads`, `--seq-len`.
    pub layers: usize,
    pub d_model: i64,
    pub heads: i64,
    pub seq_len: i64,
    /// `--dtype`.
    pub dtype: String,
    /// `--batch`.
    pub batch: u32,
    /// `--devices`.
    pub devices: u32,
    /// `--stages`.
    pub stages: u32,
    /// `--stage-layers`.
    pub stage_layers: Vec<usize>,
    /// `--mpmd-dim`.
    pub mpmd_dim: u32,
    /// `--microbatches`.
    pub microbatches: u32,
    /// `--schedule`.
    pub schedule: String,
    /// `--remat` (absent in plans written before the planner searched policies: the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remat: Option<String>,
    /// `--fsdp --fsdp-gather WHEN` (absent: the stages are not fully sharded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fsdp_gather: Option<String>,
    /// `--no-fuse`: on one MPMD group, run the schedule's tasks (what the costs measure)
    /// instead of one fused program (which the planner does not model).
    #[serde(default)]
    pub no_fuse: bool,
    /// The predicted step time, in milliseconds.
    pub predicted_step_ms: f64,
    /// The predicted peak live bytes on the fullest device.
    pub predicted_peak_bytes: u64,
    /// Per group, the predicted peak live bytes of one of its devices.
    pub predicted_peak_bytes_per_group: Vec<u64>,
    /// The same options as a command line.
    pub command: String,
}

impl PlanFile {
    /// Reads and checks a plan file, naming the fix when it is missing or malformed.
    pub fn read(path: &Path) -> anyhow::Result<PlanFile> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!(
                "--plan {}: cannot read it ({e}); write one with `tessera plan --model gpt --out \
                 {}`, or pass --plan auto",
                path.display(),
                path.display()
            )
        })?;
        let plan: PlanFile = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "--plan {}: not a plan file ({e}); write it again with `tessera plan ... --out {}`",
                path.display(),
                path.display()
            )
        })?;
        if plan.stage_layers.len() != plan.stages as usize
            || plan.stage_layers.iter().sum::<usize>() != plan.layers
            || plan.mpmd_dim == 0
            || !plan.devices.is_multiple_of(plan.mpmd_dim)
        {
            bail!(
                "--plan {}: its stage_layers {:?} do not split {} layers into {} stages on {} of \
                 {} devices; write it again with `tessera plan ... --out {}`",
                path.display(),
                plan.stage_layers,
                plan.layers,
                plan.stages,
                plan.mpmd_dim,
                plan.devices,
                path.display()
            );
        }
        Ok(plan)
    }

    /// The `tessera train` options it stands for.
    pub fn train_words(&self) -> Vec<String> {
        let counts: Vec<String> = self.stage_layers.iter().map(usize::to_string).collect();
        [
            ("--model", self.model.clone()),
            ("--layers", self.layers.to_string()),
            ("--d-model", self.d_model.to_string()),
            ("--heads", self.heads.to_string()),
            ("--seq-len", self.seq_len.to_string()),
            ("--dtype", self.dtype.clone()),
            ("--batch", self.batch.to_string()),
            ("--devices", self.devices.to_string()),
            ("--stages", self.stages.to_string()),
            ("--stage-layers", counts.join(",")),
            ("--mpmd-dim", self.mpmd_dim.to_string()),
            ("--microbatches", self.microbatches.to_string()),
            ("--schedule", self.schedule.clone()),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_string(), value])
        .chain(
            self.remat
                .iter()
                .flat_map(|r| ["--remat".to_string(), r.clone()]),
        )
        .chain(
            self.fsdp_gather
                .iter()
                .flat_map(|g| ["--fsdp", "--fsdp-gather", g.as_str()].map(String::from)),
        )
        .chain(self.no_fuse.then(|| "--no-fuse".to_string()))
        .collect()
    }
}

/// Parses `2GiB`, `512MiB`, `1.5GB`, `64k`, `300000` as bytes.
pub fn parse_bytes(text: &str) -> anyhow::Result<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" => 1e12,
        "tib" => 1024.0_f64.powi(4),
        _ => bail!(
            "--device-memory {text}: give bytes with an optional unit, e.g. 2GiB, 512MiB, 1.5GB \
             or 300000"
        ),
    };
    let value: f64 = number.parse().map_err(|_| {
        anyhow::anyhow!("--device-memory {text}: give a number of bytes, e.g. 2GiB or 300000")
    })?;
    if !value.is_finite() || value <= 0.0 {
        bail!("--device-memory {text}: give more than 0 bytes, e.g. 2GiB");
    }
    Ok((value * scale).round() as u64)
}

/// Bytes as `12.3 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    match b {
        b if b >= 1024.0 * 1024.0 * 1024.0 => format!("{:.2} GiB", b / 1024f64.powi(3)),
        b if b >= 1024.0 * 1024.0 => format!("{:.2} MiB", b / 1024f64.powi(2)),
        b if b >= 1024.0 => format!("{:.1} KiB", b / 1024.0),
        b => format!("{b} B"),
    }
}

/// What the model flags of `args` are, as `tessera train` words.
fn model_words(args: &Args) -> Vec<String> {
    let mut words = Vec::new();
    let mut push = |flag: &str, value: Option<String>| {
        if let Some(v) = value {
            words.push(flag.to_string());
            words.push(v);
        }
    };
    push("--model", args.model.clone());
    push(
        "--config",
        args.config.as_ref().map(|p| p.display().to_string()),
    );
    push("--layers", args.layers.map(|v| v.to_string()));
    push("--d-model", args.d_model.map(|v| v.to_string()));
    push("--heads", args.heads.map(|v| v.to_string()));
    push("--seq-len", args.seq_len.map(|v| v.to_string()));
    push("--dtype", Some(args.dtype.clone()));
    words
}

/// The ranking of `args`' configurations, and the measurement notes.
pub fn rank(
    args: &Args,
    plugin: Option<&str>,
) -> anyhow::Result<(Vec<Candidate>, PlanContext, Vec<String>)> {
    let words = model_words(args);
    let train_args = profile::parse(&words)?;
    let (decoder, description) = profile::model_shape(&train_args)?;
    if args.devices == 0 {
        bail!("--devices 0: a run needs at least 1 device, e.g. --devices 8");
    }
    if i64::from(args.devices) > tessera_pjrt::MAX_CPU_DEVICES {
        bail!(
            "--devices {} is more than the {} devices Tessera asks a CPU client for; give fewer",
            args.devices,
            tessera_pjrt::MAX_CPU_DEVICES
        );
    }
    if args.batch == 0 {
        bail!("--batch 0: a step trains on at least one example, e.g. --batch 64");
    }
    profile::check_memory(&decoder, args.batch)?;
    if args.repeats == 0 {
        bail!("--repeats 0: each measurement times at least 1 step, e.g. --repeats 5");
    }
    if args.top == 0 {
        bail!("--top 0: the table shows at least 1 row, e.g. --top 10");
    }
    if args.max_stages_per_group == 0 {
        bail!("--max-stages-per-group 0: a group runs at least 1 stage, e.g. 2");
    }
    let device_memory = args.device_memory.as_deref().map(parse_bytes).transpose()?;
    let (_, is_cpu) = device_kind(plugin)?;
    let cores = args.cores.unwrap_or(match is_cpu {
        true => std::thread::available_parallelism().map_or(0, |n| n.get() as u32),
        false => 0,
    });
    let microbatches = args.microbatches.clone().unwrap_or_else(|| {
        (1..=args.batch.min(32))
            .filter(|m| args.batch.is_multiple_of(*m))
            .collect()
    });
    if microbatches.contains(&0) {
        bail!("--microbatches 0: micro-batch counts start at 1, e.g. --microbatches 4,8");
    }
    if let Some(m) = microbatches
        .iter()
        .find(|m| !args.batch.is_multiple_of(**m))
    {
        bail!(
            "--microbatches {m} does not divide --batch {}; try divisors of the batch",
            args.batch
        );
    }
    let registry = tessera_schedule::Registry::with_builtins();
    // A schedule named twice is tried once (not counted as a second schedule of the same
    // prediction).
    let mut schedules: Vec<String> = Vec::new();
    for name in args.schedules.iter().flatten() {
        if !schedules.contains(name) {
            schedules.push(name.clone());
        }
    }
    if let Some(unknown) = schedules.iter().find(|s| !registry.names().contains(s)) {
        bail!(
            "unknown schedule `{unknown}`; known: {}",
            registry.names().join(", ")
        );
    }
    let mut space = Space {
        devices: args.devices,
        batch: args.batch,
        tokens_per_example: decoder.seq_len.max(0) as u64,
        layers: decoder.layers,
        microbatches,
        schedules,
        max_stages_per_group: args.max_stages_per_group,
        device_memory,
        cores,
        ..Space::default()
    };
    // Nothing to measure when no shape exists: say so before measuring.
    if shapes(&space).is_empty() {
        let err = search(&|_, _| None, &space).err();
        bail!("{}", err.map_or("no layout".to_string(), |e| e.to_string()));
    }
    let model_key = format!("{description} batch={}", args.batch);
    let mut policies: Vec<tessera_mpmd::RematPolicy> = Vec::new();
    for policy in args
        .remat
        .as_deref()
        .unwrap_or(&tessera_mpmd::RematPolicy::ALL)
    {
        if !policies.contains(policy) {
            policies.push(*policy);
        }
    }
    let mut gathers: Vec<Option<tessera_mpmd::FsdpGather>> = Vec::new();
    for when in match args.fsdp {
        true => args
            .fsdp_gather
            .clone()
            .unwrap_or(tessera_mpmd::FsdpGather::ALL.to_vec()),
        false => Vec::new(),
    } {
        if !gathers.contains(&Some(when)) {
            gathers.push(Some(when));
        }
    }
    if gathers.is_empty() {
        gathers.push(None);
    }
    let variants: Vec<ModelVariant> = policies
        .into_iter()
        .flat_map(|p| gathers.iter().map(move |&g| (p, g)))
        .map(|(p, g)| ModelVariant::new(p, g, &words, &model_key))
        .collect();
    let mut measured = measurements(args, plugin, &space, &variants)?;
    space.link = measured.link;
    let ranked = refined_ranking(args, &space, &variants, &mut measured)?;
    let context = PlanContext {
        model: super::train::profile::model_name(&decoder).to_string(),
        decoder,
        dtype: args.dtype.clone(),
        batch: args.batch,
        link: measured.link,
        cores,
    };
    let ranked = calibrate::calibrate(
        args,
        plugin,
        ranked,
        &context,
        &measured.dir,
        &mut measured.notes,
    )?;
    Ok((ranked, context, measured.notes))
}

/// What a ranking was made for.
pub struct PlanContext {
    model: String,
    decoder: tessera_nn::DecoderConfig,
    dtype: String,
    batch: u32,
    link: Link,
    cores: u32,
}

/// `candidate` as a plan file.
pub fn plan_file(candidate: &Candidate, context: &PlanContext) -> PlanFile {
    let mut file = PlanFile {
        model: context.model.clone(),
        layers: context.decoder.layers,
        d_model: context.decoder.d_model,
        heads: context.decoder.heads,
        seq_len: context.decoder.seq_len,
        dtype: context.dtype.clone(),
        batch: context.batch,
        devices: candidate.devices,
        stages: candidate.stages,
        stage_layers: candidate.stage_layers.clone(),
        mpmd_dim: candidate.groups,
        microbatches: candidate.microbatches,
        schedule: candidate.schedule.clone(),
        remat: candidate.remat.clone(),
        fsdp_gather: candidate.fsdp_gather.clone(),
        no_fuse: candidate.groups == 1,
        predicted_step_ms: candidate.step_seconds * 1000.0,
        predicted_peak_bytes: candidate.peak_bytes,
        predicted_peak_bytes_per_group: candidate.peak_bytes_per_group.clone(),
        command: String::new(),
    };
    file.command = format!("tessera train {}", file.train_words().join(" "));
    file
}

pub fn run(args: Args, plugin: Option<&str>) -> anyhow::Result<ExitCode> {
    let (ranked, context, notes) = rank(&args, plugin)?;
    let top: Vec<&Candidate> = ranked.iter().take(args.top.max(1)).collect();
    if let Some(path) = &args.out {
        let first = top.first().context("no configuration")?;
        let file = plan_file(first, &context);
        std::fs::write(path, serde_json::to_string_pretty(&file)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        let first = top.first().map(|c| plan_file(c, &context));
        outln!(
            "{}",
            serde_json::json!({
                "candidates": ranked.len(),
                "top": top,
                "first": first,
                "link": context.link,
                "cores": context.cores,
                "measurements": notes,
                "out": args.out,
            })
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    for note in &notes {
        outln!("costs: {note}")?;
    }
    outln!(
        "link between devices: {:.2} GB/s, {:.1} µs latency; {} host cores shared by the devices",
        context.link.bandwidth / 1e9,
        context.link.latency * 1e6,
        match context.cores {
            0 => "no limit on".to_string(),
            n => n.to_string(),
        }
    )?;
    outln!(
        "{} configurations ranked; the best {}:",
        ranked.len(),
        top.len()
    )?;
    outln!(
        "{:>3}  {:>6}  {:<12}  {:>6}  {:>4}  {:>5}  {:<24}  {:>9}  {:>6}  {:>11}  {:>11}  {:<20}  {}",
        "#",
        "stages",
        "layers",
        "groups",
        "data",
        "micro",
        "schedule",
        "step ms",
        "bubble",
        "peak/device",
        "tokens/s",
        "remat",
        "FSDP gather"
    )?;
    for (i, c) in top.iter().enumerate() {
        let layers: Vec<String> = c.stage_layers.iter().map(usize::to_string).collect();
        let schedule = match c.same_prediction.len() {
            0 => c.schedule.clone(),
            n => format!("{} (+{n} same)", c.schedule),
        };
        outln!(
            "{:>3}  {:>6}  {:<12}  {:>6}  {:>4}  {:>5}  {:<24}  {:>8.2}{}  {:>6.3}  {:>11}  {:>11.0}  {:<20}  {}",
            i + 1,
            c.stages,
            layers.join(","),
            c.groups,
            c.data,
            c.microbatches,
            schedule,
            c.step_seconds * 1000.0,
            if c.measured_stages { "*" } else { " " },
            c.bubble,
            human_bytes(c.peak_bytes),
            c.tokens_per_second,
            c.remat.as_deref().unwrap_or("-"),
            c.fsdp_gather.as_deref().unwrap_or("-")
        )?;
    }
    if top.iter().any(|c| c.measured_stages) {
        outln!("* from its stages measured as they run (the others: sums of measured parts)")?;
    }
    let mut shapes: Vec<String> = Vec::new();
    for c in &top {
        if let Some(f) = c.calibration {
            let shape = format!("{}×{} devices {f:.2}×", c.groups, c.data);
            if !shapes.contains(&shape) {
                shapes.push(shape);
            }
        }
    }
    if !shapes.is_empty() {
        outln!(
            "step ms scaled by its group shape's whole steps measured against predicted: {}",
            shapes.join(", ")
        )?;
    }
    if let Some(first) = top.first() {
        let file = plan_file(first, &context);
        outln!("first choice: {}", file.command)?;
    }
    if let Some(path) = &args.out {
        outln!(
            "wrote {} (train with: tessera train --plan {})",
            path.display(),
            path.display()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_with_units() {
        assert_eq!(parse_bytes("2GiB").ok(), Some(2 << 30));
        assert_eq!(parse_bytes("512MiB").ok(), Some(512 << 20));
        assert_eq!(parse_bytes("1.5GB").ok(), Some(1_500_000_000));
        assert_eq!(parse_bytes("300000").ok(), Some(300_000));
        assert!(parse_bytes("2 parsecs").is_err());
        assert!(parse_bytes("0").is_err());
    }
}
