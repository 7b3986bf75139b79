//! What `tessera plan` measures of a model: each part's forward, backward and split-backward
//! time and its bytes, by running the training step as the runtime runs it, with every part a
//! stage of its own (the embedding alone, each decoder layer alone, the head and the loss alone:
//! `0,1,…,1,0` stage layers) on one MPMD group under [`MeasureOrder`] (whole and split
//! backwards), and reading the runtime's task times and memory accounting. The group has as
//! many devices as a group of the planned run (on the CPU plugin a task over 2 devices took
//! 2–3× the time of the same rows per device on one, so one device's times would not stand for
//! a group's), in a client of the run's device count. [`measure_stages`] measures a planned
//! layout's stages the same way, each stage as the program it runs as (a composition of parts).

use clap::Parser;

use anyhow::{Context, bail};
use tessera::jit::to_host;
use tessera_mpmd::{StepArg, StepResult};
use tessera_schedule::plan::{Part, Profile};
use tessera_schedule::search::RowCosts;
use tessera_schedule::stage_costs::{LayoutFactors, StageCosts};

use tessera_schedule::{Action, Placement, Schedule, ScheduleError, Task};

use super::args::Args;

/// Micro-batches of every measuring step (the orders below time whole and split backwards on
/// alternate ones, fused actions across the two).
const MICROBATCHES: u32 = 2;

/// The measuring order: every part a stage on one group; each micro-batch's forwards, then its
/// backwards from the last stage, whole (`Bwd`) on even micro-batches and split (`BwdI`, then
/// `BwdW`) on odd ones, so one run times both kinds of backward and the weight residuals.
struct MeasureOrder {
    stages: u32,
}

impl Schedule for MeasureOrder {
    fn name(&self) -> String {
        "plan-measure".into()
    }

    fn placement(&self) -> Placement {
        Placement::from_table(vec![0; self.stages as usize]).unwrap_or_else(|_| Placement::plain(1))
    }

    fn actions(&self, microbatches: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        let mut list = Vec::new();
        for mb in 0..microbatches {
            list.extend((0..self.stages).map(|s| Action::Single(Task::fwd(s, mb))));
            for s in (0..self.stages).rev() {
                match mb % 2 {
                    0 => list.push(Action::Single(Task::bwd(s, mb))),
                    _ => {
                        list.push(Action::Single(Task::bwd_i(s, mb)));
                        list.push(Action::Single(Task::bwd_w(s, mb)));
                    }
                }
            }
        }
        Ok(vec![list])
    }
}
/// The order measuring fused actions, on 2 micro-batches: micro-batch 0's forwards, its last
/// part's forward and backward as one action (a chain), then each later forward of micro-batch 1
/// fused with a backward of micro-batch 0 on another part (independent work, as DualPipeV
/// pairs them), then micro-batch 1's last forward and its backwards.
struct MeasureFused {
    stages: u32,
}

impl Schedule for MeasureFused {
    fn name(&self) -> String {
        "plan-measure-fused".into()
    }

    fn placement(&self) -> Placement {
        Placement::from_table(vec![0; self.stages as usize]).unwrap_or_else(|_| Placement::plain(1))
    }

    fn actions(&self, _microbatches: u32) -> Result<Vec<Vec<Action>>, ScheduleError> {
        let last = self.stages - 1;
        let mut list: Vec<Action> = (0..last).map(|s| Action::Single(Task::fwd(s, 0))).collect();
        list.push(Action::Fused(vec![Task::fwd(last, 0), Task::bwd(last, 0)]));
        for k in 0..last {
            list.push(Action::Fused(vec![
                Task::fwd(k, 1),
                Task::bwd(last - 1 - k, 0),
            ]));
        }
        list.push(Action::Single(Task::fwd(last, 1)));
        list.extend(
            (0..self.stages)
                .rev()
                .map(|s| Action::Single(Task::bwd(s, 1))),
        );
        Ok(vec![list])
    }
}

use super::{config, layout, model::Model, optimizer, step};

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    args: Args,
}

/// `tessera train`'s arguments from the words after `tessera train`.
pub fn parse(words: &[String]) -> anyhow::Result<Args> {
    let argv = std::iter::once("tessera-train".to_string()).chain(words.iter().cloned());
    Ok(Wrap::try_parse_from(argv)?.args)
}

/// The model `args` names (its sizes checked), its decoder layers and its tokens per example.
pub fn model_shape(args: &Args) -> anyhow::Result<(tessera_nn::DecoderConfig, String)> {
    match config::choose_model(args)? {
        config::ModelChoice::Decoder(c) => {
            let name = config::describe(&config::ModelChoice::Decoder(c), "sgd");
            Ok((c, name))
        }
        config::ModelChoice::Mlp => {
            bail!("tessera plan plans the decoders: pass --model gpt or --model llama")
        }
    }
}

/// Refuses a decoder or a `--batch` whose parameters or step data cannot fit in this machine's
/// memory (as `tessera train` does), before any measurement allocates them.
pub fn check_memory(decoder: &tessera_nn::DecoderConfig, batch: u32) -> anyhow::Result<()> {
    config::check_memory(&config::ModelChoice::Decoder(*decoder), "sgd", batch)
}

/// Measures the parts of `model_words`' model (`--model` and the size flags) with micro-batches
/// of `rows` rows per device on one MPMD group of `data` devices (each micro-batch's rows split
/// over them, as a group of a pipelined run splits them) of a client of `client_devices` devices:
/// `steps` steps after one of warm-up,
/// medians per part. Times are the group's; bytes one device's.
pub fn measure(
    model_words: &[String],
    plugin: Option<&str>,
    rows: u32,
    data: u32,
    client_devices: u32,
    steps: u32,
    cores: u32,
) -> anyhow::Result<RowCosts> {
    let probe = parse(model_words)?;
    let (decoder, _) = model_shape(&probe)?;
    let layers = decoder.layers;
    let stages = layers + 2;
    let counts: Vec<usize> = (0..stages)
        .map(|s| usize::from(s != 0 && s + 1 != stages))
        .collect();
    let measuring = Measuring::new(model_words, plugin, rows, data, client_devices, &counts)?;
    let (alone, factors) = measuring.time_with_factors(steps, cores)?;
    let dispatch = median(alone.gaps.clone());
    let Timed {
        times,
        mut overheads,
        last,
        ..
    } = alone;
    let timings = last.context("no steps were run")?;
    let memory = measuring.jit.pipeline().memory_report(&timings);
    let median = |kind: char, stage: usize| -> anyhow::Result<f64> {
        let mut v = times.get(&(kind, stage)).cloned().unwrap_or_default();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2)
            .copied()
            .with_context(|| format!("no {kind} task of stage {stage} was timed"))
    };
    // The runtime counts a group's bytes over its devices.
    let at = |list: &[u64], s: usize| list.get(s).copied().unwrap_or(0) / u64::from(data.max(1));
    let mut parts = Vec::with_capacity(stages);
    for s in 0..stages {
        parts.push(Part {
            forward: median('F', s)?,
            backward: median('B', s)?,
            activation_bytes: at(&memory.activation_bytes, s),
            parameter_bytes: at(&memory.stage_parameter_bytes, s),
        });
    }
    overheads.sort_by(f64::total_cmp);
    let step_overhead = overheads.get(overheads.len() / 2).copied().unwrap_or(0.0);
    // The split backward's parts: its weight part (`W`) and its whole (`I + W`).
    let mut weight_seconds = Vec::with_capacity(stages);
    let mut split_seconds = Vec::with_capacity(stages);
    for s in 0..stages {
        let (i, w) = (median('I', s)?, median('W', s)?);
        weight_seconds.push(w);
        split_seconds.push(i + w);
    }
    let head = parts.pop().context("no head stage")?;
    let embedding = parts.first().copied().context("no embedding stage")?;
    let layers: Vec<Part> = parts.into_iter().skip(1).collect();
    let width = match decoder.compute_dtype {
        tessera_ir::DType::BF16 => 2,
        _ => 4,
    };
    let boundary = i64::from(rows) * decoder.seq_len * decoder.d_model * width;
    let hidden = i64::from(rows) * decoder.seq_len * decoder.ffn * width;
    Ok(RowCosts {
        rows,
        data,
        profile: Profile {
            embedding,
            layers,
            head,
        },
        accumulator_bytes: (0..stages)
            .map(|s| at(&memory.stage_accumulator_bytes, s))
            .collect(),
        data_bytes: (0..stages)
            .map(|s| at(&memory.stage_data_bytes, s) / u64::from(MICROBATCHES))
            .collect(),
        boundary_bytes: u64::try_from(boundary).unwrap_or(0),
        step_overhead,
        weight_seconds,
        split_seconds,
        weight_residual_bytes: (0..stages)
            .map(|s| at(&memory.weight_residual_bytes, s))
            .collect(),
        layer_hidden_bytes: u64::try_from(hidden).unwrap_or(0),
        contention: factors.contention,
        contention_two: factors.contention_two,
        fused_chain: factors.fused_chain,
        fused_apart: factors.fused_apart,
        dispatch,
        stages: Vec::new(),
        layout_factors: Vec::new(),
    })
}

/// A measuring run's pieces: the model split at `counts`, its training step, and the step
/// compiled under [`MeasureOrder`] on one MPMD group of `data` devices.
struct Measuring {
    model: Model,
    training: step::TrainingStep,
    layout: layout::Layout,
    options: tessera_mpmd::MpmdJitOptions,
    client: tessera_pjrt::Client,
    mesh: tessera_mpmd::MpmdMesh,
    jit: tessera_mpmd::MpmdJit,
    /// Its stages, all on the one group.
    stages: u32,
    /// Decoder layers per stage.
    counts: Vec<usize>,
}

impl Measuring {
    /// The measuring step of `model_words`' model with stage layers `counts` (the embedding in
    /// the first stage, the head in the last), 2 micro-batches of `rows` rows per device.
    fn new(
        model_words: &[String],
        plugin: Option<&str>,
        rows: u32,
        data: u32,
        client_devices: u32,
        counts: &[usize],
    ) -> anyhow::Result<Measuring> {
        let stages = counts.len();
        let microbatches = MICROBATCHES;
        let layers: Vec<String> = counts.iter().map(usize::to_string).collect();
        let mut words = model_words.to_vec();
        words.extend(
            [
                "--stages",
                &stages.to_string(),
                "--stage-layers",
                &layers.join(","),
                "--mpmd-dim",
                "1",
                "--devices",
                &data.to_string(),
                "--schedule",
                "interleaved-gpipe",
                "--microbatches",
                &microbatches.to_string(),
                "--batch",
                &(rows * data * microbatches).to_string(),
                "--no-fuse",
                "--no-reference",
            ]
            .map(String::from),
        );
        let args = parse(&words)?;
        let layout = layout::Layout::choose(&args)?;
        let choice = config::choose_model(&args)?;
        let stage_layers = config::stage_layers(&args, &choice)?;
        let opt = optimizer(&args.optimizer)?;
        let model = Model::new(
            &choice,
            &stage_layers,
            i64::from(rows * data),
            microbatches as usize,
            &super::model::DataSource {
                file: None,
                tokenizer: None,
                width: None,
            },
            Some(args.seed),
            None,
        )?;
        let training = step::training_step(
            &model,
            &args.schedule,
            opt.as_ref(),
            None,
            &step::stack(&model, &model.batches(0)?)?,
        )?;
        let program = &training.program;
        let n_carried = model.n_params() + training.state_avals.len();
        let data_args = program.jaxpr.invars.len() - n_carried - 1;
        let in_specs = layout.step_specs(&choice, &model.param_avals, opt.as_ref(), data_args)?;
        // The client has as many devices as the planned run's (the CPU plugin's threads depend
        // on it); the group uses the first `data`.
        let client = tessera_pjrt::Client::open(plugin, i64::from(client_devices.max(data)))?;
        let mesh = tessera_mpmd::MpmdMesh::new(layout.shape.clone(), &layout.mpmd_axis)?;
        let options = tessera_mpmd::MpmdJitOptions {
            donate_argnums: (0..model.n_params()).collect(),
            donate_where_possible: (model.n_params()..n_carried).collect(),
            in_specs,
            fusion: tessera_mpmd::Fusion::Never,
            remat: tessera_mpmd::Remat::all(args.remat),
            grad_reduce: args.grad_reduce,
            fsdp_gather: args.fsdp_gather,
            schedule: Some(std::sync::Arc::new(MeasureOrder {
                stages: stages as u32,
            })),
            ..tessera_mpmd::MpmdJitOptions::default()
        };
        let jit = tessera_mpmd::mpmd_jit_with(&client, &mesh, program, &options)?;
        Ok(Measuring {
            model,
            training,
            layout,
            options,
            client,
            mesh,
            jit,
            stages: stages as u32,
            counts: counts.to_vec(),
        })
    }

    /// The step timed alone under [`MeasureOrder`] (`steps` after one of warm-up), and the
    /// layout's factors measured around it: the contention of the step on every group of the
    /// planned run at once, and the fused actions' factors under [`MeasureFused`].
    fn time_with_factors(&self, steps: u32, cores: u32) -> anyhow::Result<(Timed, LayoutFactors)> {
        let run = Runs {
            model: &self.model,
            training: &self.training,
            steps,
        };
        let alone = run.time(&self.jit, None)?;
        let (contention, contention_two) = self.contention(&run, &alone, cores)?;
        let fused = self.time_fused(&run)?;
        let (fused_chain, fused_apart) = fused_factors(&fused, &alone.times, self.stages as usize);
        let factors = LayoutFactors {
            stage_layers: self.counts.clone(),
            contention,
            contention_two,
            fused_chain,
            fused_apart,
        };
        Ok((alone, factors))
    }

    /// `run`'s step under [`MeasureFused`] (this layout's fused actions).
    fn time_fused(&self, run: &Runs) -> anyhow::Result<Timed> {
        let options = tessera_mpmd::MpmdJitOptions {
            schedule: Some(std::sync::Arc::new(MeasureFused {
                stages: self.stages,
            })),
            ..self.options.clone()
        };
        let jit = tessera_mpmd::mpmd_jit_with(
            &self.client,
            &self.mesh,
            &self.training.program,
            &options,
        )?;
        run.time(&jit, None)
    }

    /// The contention of `run`'s step on every group of the planned run against `alone`, and
    /// on two of them where the run has more than two.
    fn contention(
        &self,
        run: &Runs,
        alone: &Timed,
        cores: u32,
    ) -> anyhow::Result<(f64, Option<f64>)> {
        let groups = self
            .client
            .addressable_devices()?
            .len()
            .checked_div(self.layout.shape.device_ids().len())
            .unwrap_or(0);
        let on = |running: usize| {
            measure_contention(
                run,
                (&self.client, &self.layout, &self.options),
                alone,
                cores,
                running,
            )
        };
        let two = match groups > 2 && cores > 0 {
            true => Some(on(2)?),
            false => None,
        };
        Ok((on(groups)?, two))
    }
}

/// Measures the stages of the layout `counts` (decoder layers per stage) as compositions: the
/// training step split there, every stage on one MPMD group of `data` devices under
/// [`MeasureOrder`], `steps` steps after one of warm-up, each stage's median forward, whole
/// backward and split backward (`I + W`, and `W`); and the layout's factors (as [`measure`]'s,
/// with these stages): the contention of this step run on every group of the planned run at
/// once, and the fused actions' factors under [`MeasureFused`].
#[allow(clippy::too_many_arguments)]
pub fn measure_stages(
    model_words: &[String],
    plugin: Option<&str>,
    rows: u32,
    data: u32,
    client_devices: u32,
    steps: u32,
    cores: u32,
    counts: &[usize],
) -> anyhow::Result<(Vec<StageCosts>, LayoutFactors)> {
    let measuring = Measuring::new(model_words, plugin, rows, data, client_devices, counts)?;
    let (alone, factors) = measuring.time_with_factors(steps, cores)?;
    let times = alone.times;
    let median = |kind: char, stage: usize| -> anyhow::Result<f64> {
        let v = times.get(&(kind, stage)).cloned().unwrap_or_default();
        match v.is_empty() {
            true => bail!("no {kind} task of stage {stage} was timed"),
            false => Ok(median(v)),
        }
    };
    let stages = tessera_schedule::stage_costs::part_ranges(counts)
        .into_iter()
        .enumerate()
        .map(|(s, parts)| {
            let (i, w) = (median('I', s)?, median('W', s)?);
            Ok(StageCosts {
                first_part: parts.start,
                end_part: parts.end,
                forward: median('F', s)?,
                backward: median('B', s)?,
                split: i + w,
                weight: w,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((stages, factors))
}

/// The fused actions' factors from their durations in `fused` and their tasks' medians alone
/// (`singles`), each the median over steps: the chain (the last part's forward and backward of
/// one micro-batch) as the share of the forward it still pays over the backward alone, in
/// 0–1; the independent pairs (a forward of one micro-batch with another part's backward of the
/// other) as their time over the sum of their tasks', in 0.2–2. 1 when unmeasured.
fn fused_factors(
    fused: &Timed,
    singles: &std::collections::HashMap<(char, usize), Vec<f64>>,
    stages: usize,
) -> (f64, f64) {
    let single = |kind: char, s: usize| singles.get(&(kind, s)).cloned().map(median);
    let (mut chain, mut apart) = (Vec::new(), Vec::new());
    for step in &fused.fused {
        let (mut a, mut a_parts) = (0.0, 0.0);
        for (tasks, seconds) in step {
            if tasks.iter().all(|&(_, s)| s == stages - 1) {
                if let (Some(f), Some(b)) = (single('F', stages - 1), single('B', stages - 1))
                    && f > 0.0
                {
                    chain.push((seconds - b) / f);
                }
                continue;
            }
            if let Some(parts) = tasks
                .iter()
                .map(|&(kind, s)| single(kind, s))
                .sum::<Option<f64>>()
            {
                a += seconds;
                a_parts += parts;
            }
        }
        if a_parts > 0.0 {
            apart.push(a / a_parts);
        }
    }
    let factor = |v: Vec<f64>, low: f64, high: f64| match v.is_empty() {
        true => 1.0,
        false => median(v).clamp(low, high),
    };
    (factor(chain, 0.0, 1.0), factor(apart, 0.2, 2.0))
}

/// What one measuring run needs: the model, its training step and how many steps to time.
struct Runs<'a> {
    model: &'a Model,
    training: &'a step::TrainingStep,
    steps: u32,
}

/// The durations one run measured.
struct Timed {
    /// Per (kind, stage), every task duration after the warm-up step, in seconds.
    times: std::collections::HashMap<(char, usize), Vec<f64>>,
    /// Per timed step, its time outside the span of its tasks.
    overheads: Vec<f64>,
    /// Per timed step, the mean time between one task's end and the next one's start.
    gaps: Vec<f64>,
    /// Per timed step, its wall time.
    walls: Vec<f64>,
    /// Per timed step, each fused action's tasks (kind, stage) and its seconds.
    fused: Vec<FusedTimes>,
    /// The last step's task timings.
    last: Option<tessera_mpmd::runtime::Timings>,
}

/// One step's fused actions: each one's tasks as (kind, stage), and its seconds.
type FusedTimes = Vec<(Vec<(char, usize)>, f64)>;

impl Runs<'_> {
    /// Runs `jit` for one warm-up step and `steps` timed ones back to back. With `start`, the
    /// timed steps begin when every runner sharing its barrier has warmed up, plus its offset
    /// (runners of the same order offset from each other overlap different phases of their
    /// steps, as a pipeline's groups do, rather than all running the same task at once).
    fn time(
        &self,
        jit: &tessera_mpmd::MpmdJit,
        start: Option<(&std::sync::Barrier, std::time::Duration)>,
    ) -> anyhow::Result<Timed> {
        let (model, training) = (self.model, self.training);
        let mut weights: Vec<StepArg> = model
            .init
            .iter()
            .chain(&training.init_state)
            .map(|a| Ok(StepArg::Host(to_host(a)?)))
            .collect::<anyhow::Result<_>>()?;
        let mut timed = Timed {
            times: Default::default(),
            overheads: Vec::new(),
            gaps: Vec::new(),
            walls: Vec::new(),
            fused: Vec::new(),
            last: None,
        };
        for step_index in 0..=u64::from(self.steps) {
            let data = step::stack(model, &model.batches(step_index)?)?;
            let host = step::step_args(&[], 0.0, &data)?;
            let mut call: Vec<StepArg> = weights
                .drain(..)
                .chain(host.iter().cloned().map(StepArg::Host))
                .collect();
            if let (Some((barrier, offset)), 1) = (start, step_index) {
                barrier.wait();
                std::thread::sleep(offset);
            }
            let began = std::time::Instant::now();
            let run = jit.call_mpmd_donated(&mut call)?;
            let wall = began.elapsed().as_secs_f64();
            let mut outputs = run.outputs;
            outputs.pop().context("the step returned nothing")?;
            weights = outputs.into_iter().map(StepResult::into_arg).collect();
            if step_index > 0 {
                timed.record(&run.timings, run.phases.tasks_ms / 1e3, wall);
            }
            timed.last = Some(run.timings);
        }
        Ok(timed)
    }
}

impl Timed {
    /// Records one step: its tasks' durations, the time between them (the span of the tasks
    /// less their sum, per task: on one group they run one after another), and the rest.
    fn record(&mut self, timings: &tessera_mpmd::runtime::Timings, span: f64, wall: f64) {
        let tasks: f64 = timings.tasks.iter().map(|t| t.duration_us / 1e6).sum();
        let count = timings.tasks.len().max(1) as f64;
        self.gaps.push(((span - tasks) / count).max(0.0));
        self.overheads.push((wall - span.max(tasks)).max(0.0));
        self.walls.push(wall);
        let mut fused = Vec::new();
        for task in &timings.tasks {
            let tasks: Option<Vec<(char, usize)>> =
                task.name.split(" + ").map(kind_and_stage).collect();
            match tasks.as_deref() {
                Some([one]) => self
                    .times
                    .entry(*one)
                    .or_default()
                    .push(task.duration_us / 1e6),
                Some(several) if several.len() > 1 => {
                    fused.push((several.to_vec(), task.duration_us / 1e6));
                }
                _ => {}
            }
        }
        self.fused.push(fused);
    }
}

/// `F s3 mb1` as `('F', 3)`.
fn kind_and_stage(name: &str) -> Option<(char, usize)> {
    let mut words = name.split(' ');
    let kind = words.next().and_then(|w| w.chars().next())?;
    let stage = words.next()?.strip_prefix('s')?.parse::<usize>().ok()?;
    Some((kind, stage))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// How much longer than their fair share of `cores` the step's work takes when `running`
/// groups of the planned run do it at once (below 1: shorter, the tasks alone leaving cores
/// idle): the measuring step runs on the devices of the client's first `running` groups
/// together (the same program on disjoint groups of the layout's size, each group starting a
/// fraction of a step after the one before, so that they overlap different tasks, as a
/// pipeline's groups do), against `alone`. 1 when fewer than two run or the devices do not
/// share cores.
fn measure_contention(
    run: &Runs,
    (client, layout, options): (
        &tessera_pjrt::Client,
        &layout::Layout,
        &tessera_mpmd::MpmdJitOptions,
    ),
    alone: &Timed,
    cores: u32,
    running: usize,
) -> anyhow::Result<f64> {
    let data = layout.shape.device_ids().len();
    if cores == 0 || running < 2 {
        return Ok(1.0);
    }
    let jits = (0..running)
        .map(|g| {
            let ids: Vec<i64> = (0..data).map(|d| (g * data + d) as i64).collect();
            let mesh = tessera_sharding::Mesh::new(layout.shape.abstract_mesh().clone(), ids)?;
            let mesh = tessera_mpmd::MpmdMesh::new(mesh, &layout.mpmd_axis)?;
            Ok(tessera_mpmd::mpmd_jit_with(
                client,
                &mesh,
                &run.training.program,
                options,
            )?)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let barrier = std::sync::Barrier::new(running);
    // Group `g` starts `g / running` of a step alone after the first.
    let step_alone = median(alone.walls.clone());
    let offset =
        |g: usize| std::time::Duration::from_secs_f64(step_alone * g as f64 / running as f64);
    let walls: Vec<Vec<f64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = jits
            .iter()
            .enumerate()
            .map(|(g, jit)| {
                let barrier = &barrier;
                scope.spawn(move || run.time(jit, Some((barrier, offset(g)))).map(|t| t.walls))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a measuring group panicked"))?
            })
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    // The slowest group's median step.
    let together = walls.iter().map(|w| median(w.clone())).fold(0.0, f64::max);
    let demand = (data as u32).clamp(1, cores);
    let share = (running as f64 * f64::from(demand) / f64::from(cores)).max(1.0);
    let fair = step_alone * share;
    // Below 1 where the tasks alone leave cores idle; never below what keeps a step together
    // at least as long as alone.
    Ok(match fair > 0.0 && together > 0.0 {
        true => (together / fair).max(1.0 / share),
        false => 1.0,
    })
}

/// The model's `--model` name.
pub fn model_name(decoder: &tessera_nn::DecoderConfig) -> &'static str {
    config::name(&config::ModelChoice::Decoder(*decoder))
}
