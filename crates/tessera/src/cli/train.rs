//! `tessera train`: pipelined training over MPMD groups of the PJRT CPU plugin's devices, checked
//! step by step against the same training run unpipelined.
//!
//! The training step is one traced program: a `treduce` over the micro-batches of
//! `value_and_grad_call(loss)` (the loss carries stage markers), then SGD. `mpmd_jit` partitions
//! the loss into stage programs, compiles every action of the schedule for its group, and runs
//! the update on the groups that hold the parameters. The reference run is the same step
//! unpipelined (the loop as a `stablehlo.while`) under `jit` on one device.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use tessera::jit::{from_host, to_host};
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{Tensor, trace, treduce, value_and_grad_call};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_mpmd::{StepArg, StepResult};
use tessera_nn::data::{ByteCorpus, Split};
use tessera_nn::lr::LrSchedule;
use tessera_nn::optim::{AdamW, Optimizer, Sgd};
use tessera_nn::{DecoderConfig, StagePlan, Tree};
use tessera_pjrt::{Client, HostArray};
use tessera_schedule::{Costs, Registry, ScheduleParams};

/// A model to train: its loss program, which arguments are parameters, their initial values,
/// and the data arguments of each microbatch.
struct Model {
    loss: ClosedJaxpr,
    params: Vec<usize>,
    init: Vec<Array>,
    batches: Vec<HashMap<usize, Array>>,
}

fn mlp_model(stages: usize, rows: i64, microbatches: usize) -> anyhow::Result<Model> {
    let loss = mlp_loss(stages, rows)?;
    let init = (0..stages)
        .map(|s| {
            Array::new(
                DType::F32,
                &[WIDTH, WIDTH],
                pseudo(s as f64 + 0.5, WIDTH * WIDTH, 0.5),
            )
        })
        .collect::<Result<_, _>>()?;
    let batches = dataset(microbatches, rows)?
        .into_iter()
        .map(|(x, y)| HashMap::from([(0, x), (stages + 1, y)]))
        .collect();
    Ok(Model {
        loss,
        params: (1..=stages).collect(),
        init,
        batches,
    })
}

/// The byte-level GPT on the corpus shipped in `examples/data/corpus.txt`: each microbatch takes
/// `rows` windows of `seq` bytes and predicts each next byte.
fn gpt_model(stages: usize, rows: i64, microbatches: usize) -> anyhow::Result<Model> {
    let config = super::gpt::GptConfig {
        layers: 4,
        d: 64,
        heads: 4,
        seq: 32,
        rows,
    };
    if !config.layers.is_multiple_of(stages) {
        bail!(
            "the GPT has {} blocks; --stages must divide them (1, 2 or 4)",
            config.layers
        );
    }
    let loss = super::gpt::loss(&config, stages)?;
    let init = super::gpt::init(&config)?;
    let corpus = include_bytes!("../../../../examples/data/corpus.txt");
    let n_params = init.len();
    let window = config.seq as usize + 1;
    let batches = (0..microbatches)
        .map(|m| {
            let mut tokens = Vec::new();
            let mut targets = Vec::new();
            for r in 0..rows as usize {
                let start = ((m * rows as usize + r) * 97) % (corpus.len() - window);
                let piece = &corpus[start..start + window];
                tokens.extend(piece[..window - 1].iter().map(|&b| f64::from(b)));
                targets.extend(piece[1..].iter().map(|&b| f64::from(b)));
            }
            let shape = [rows, config.seq];
            Ok(HashMap::from([
                (0, Array::new(DType::I32, &shape, tokens)?),
                (n_params + 1, Array::new(DType::I32, &shape, targets)?),
            ]))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Model {
        loss,
        params: (1..=n_params).collect(),
        init,
        batches,
    })
}

/// A decoder of the model library (`tessera-nn`): Llama or GPT-2 style, 4 layers of width 64 with
/// 4 heads over 32-byte windows of the corpus, its stages starting at evenly spaced layers.
fn library_model(
    kind: &str,
    stages: usize,
    rows: i64,
    microbatches: usize,
    data_file: Option<&std::path::Path>,
) -> anyhow::Result<Model> {
    let config = match kind {
        "llama" => DecoderConfig::llama(256, 4, 64, 4, 32),
        _ => DecoderConfig::gpt2(256, 4, 64, 4, 32),
    };
    let loss = config.loss(rows, &StagePlan::even(stages, config.layers)?)?;
    let init = config.init(0)?.flatten();
    let seq = config.seq_len as usize;
    let data = match data_file {
        Some(path) => ByteCorpus::from_file(path, seq, 0.0)?,
        None => {
            let corpus = include_bytes!("../../../../examples/data/corpus.txt").to_vec();
            let source = std::path::Path::new("examples/data/corpus.txt");
            ByteCorpus::from_bytes(source, corpus, seq, 0.0)?
        }
    };
    let n_params = init.len();
    let batches = (0..microbatches)
        .map(|m| {
            let (tokens, targets) =
                data.batch(Split::Train, (m as i64 * rows) as u64, rows as usize)?;
            Ok(HashMap::from([(0, tokens), (n_params + 1, targets)]))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Model {
        loss,
        params: (1..=n_params).collect(),
        init,
        batches,
    })
}

/// Arguments of `tessera train`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model: `mlp`; `gpt` (the CLI's byte-level GPT on the corpus in examples/data); or
    /// `llama` / `gpt2` (the model library's decoders, 4 layers of width 64, on the same corpus).
    #[arg(long, default_value = "mlp")]
    model: String,
    /// The schedule (any name `tessera schedule --list` shows).
    #[arg(long, default_value = "1f1b")]
    schedule: String,
    /// Pipeline stages (the model gets one stage marker per stage boundary).
    #[arg(long, default_value_t = 4)]
    stages: u32,
    /// MPMD groups (defaults to the number of stages).
    #[arg(long)]
    mpmd_dim: Option<u32>,
    /// Microbatches per step.
    #[arg(long, default_value_t = 8)]
    microbatches: u32,
    /// Devices of the CPU plugin; each group gets devices / mpmd-dim of them.
    #[arg(long, default_value_t = 8)]
    devices: u32,
    /// Training steps.
    #[arg(long, default_value_t = 10)]
    steps: u32,
    /// Examples per step (divided among the microbatches).
    #[arg(long, default_value_t = 64)]
    batch: u32,
    /// SGD learning rate (default: 0.2 for the MLP, 0.1 for the GPT).
    #[arg(long)]
    lr: Option<f64>,
    /// Write a Chrome / Perfetto trace of the last step's tasks here.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Print a JSON summary as the last line.
    #[arg(long)]
    json: bool,
    /// The optimizer: `sgd` (plain) or `adamw` (optax's defaults: b1 0.9, b2 0.999, eps 1e-8,
    /// weight decay 1e-4), from the model library.
    #[arg(long, default_value = "sgd")]
    optimizer: String,
    /// Warm the learning rate up linearly from 0 to --lr over this many steps, then decay it
    /// along a cosine to --lr / 10 at the last step (default: a constant --lr).
    #[arg(long)]
    warmup: Option<u64>,
    /// Train `--model llama|gpt2` on the bytes of this file instead of examples/data/corpus.txt.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Go on when the loss becomes NaN or infinite (by default the run stops with an error).
    #[arg(long)]
    allow_nonfinite: bool,
}

const WIDTH: i64 = 16;

/// `x, w_0..w_{S-1}, y -> mean((tanh(... tanh(x w_0) ...) - y)^2)`, a stage marker per layer.
fn mlp_loss(stages: usize, rows: i64) -> anyhow::Result<ClosedJaxpr> {
    let f = |s: &[i64]| ShapedArray::new(DType::F32, s);
    let mut avals = vec![f(&[rows, WIDTH])];
    avals.extend((0..stages).map(|_| f(&[WIDTH, WIDTH])));
    avals.push(f(&[rows, WIDTH]));
    Ok(trace(&avals, |a| {
        let mut h = a[0].clone();
        for s in 0..stages {
            if s > 0 {
                h = h.enter_stage(s as i64);
            }
            h = h.matmul(&a[1 + s]).tanh();
        }
        vec![(&h - &a[stages + 1]).integer_pow(2).mean(&[0, 1])]
    })?)
}

fn pseudo(seed: f64, n: i64, scale: f64) -> Vec<f64> {
    (0..n)
        .map(|i| ((i as f64 + 1.0) * 0.618_034 + seed).sin() * scale)
        .collect()
}

/// A fixed regression task: targets are a fixed random tanh layer of the inputs.
fn dataset(microbatches: usize, rows: i64) -> anyhow::Result<Vec<(Array, Array)>> {
    let teacher = Array::new(
        DType::F32,
        &[WIDTH, WIDTH],
        pseudo(99.0, WIDTH * WIDTH, 0.4),
    )?;
    let program = trace(
        &[ShapedArray::new(DType::F32, &[rows, WIDTH]), teacher.aval()],
        |a| vec![a[0].matmul(&a[1]).tanh()],
    )?;
    (0..microbatches)
        .map(|m| {
            let x = Array::new(
                DType::F32,
                &[rows, WIDTH],
                pseudo(m as f64 * 7.0, rows * WIDTH, 1.0),
            )?;
            let y = eval_closed(&program, &[x.clone(), teacher.clone()])?.remove(0);
            Ok((x, y))
        })
        .collect()
}

/// The training step as one program: `(params..., optimizer state..., lr, data...) ->
/// (params'..., state'..., mean loss)`, each data argument holding every micro-batch along a
/// leading axis. The micro-batch loop is a `treduce` of `value_and_grad_call(loss)` under
/// `schedule`; the optimizer's update (`tessera_nn::optim`) of the mean gradients follows it.
/// Also returns the data and the optimizer's initial state.
fn training_step(
    model: &Model,
    schedule: &str,
    opt: &dyn Optimizer,
) -> anyhow::Result<(ClosedJaxpr, Vec<Array>, Vec<Array>)> {
    let n_args = model.loss.jaxpr.invars.len();
    let data_args: Vec<usize> = (0..n_args).filter(|k| !model.params.contains(k)).collect();
    let mbs = model.batches.len();
    let data = data_args
        .iter()
        .map(|k| {
            let parts: Vec<&Array> = model
                .batches
                .iter()
                .map(|b| b.get(k).context("a micro-batch lacks a data argument"))
                .collect::<anyhow::Result<_>>()?;
            let mut shape = vec![mbs as i64];
            shape.extend(parts[0].shape());
            let values: Vec<f64> = parts.iter().flat_map(|p| p.to_vec()).collect();
            Ok(Array::new(parts[0].dtype, &shape, values)?)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // The parameters as a tree named by position, for the optimizer.
    let as_tree = |leaves: Vec<ShapedArray>| {
        Tree::node(
            leaves
                .into_iter()
                .enumerate()
                .map(|(i, a)| (i.to_string(), Tree::Leaf(a))),
        )
    };
    let param_avals = as_tree(model.init.iter().map(Array::aval).collect());
    let state_avals = opt.state_avals(&param_avals);
    let init_state = opt
        .init_state(&param_avals.unflatten(model.init.clone())?)?
        .flatten();
    let mut avals = param_avals.flatten();
    avals.extend(state_avals.flatten());
    avals.push(ShapedArray::new(DType::F32, &[]));
    avals.extend(data.iter().map(Array::aval));
    let (n_params, n_state) = (model.params.len(), state_avals.len());
    let mut failure = None;
    let step = trace(&avals, |a| {
        let (weights, rest) = a.split_at(n_params);
        let (state, rest) = rest.split_at(n_state);
        let weight_refs: Vec<&Tensor> = weights.iter().collect();
        let xs: Vec<&Tensor> = rest[1..].iter().collect();
        let outs = treduce(&weight_refs, &xs, 0, schedule, &[], |w, mb| {
            let args: Vec<&Tensor> = (0..n_args)
                .map(|k| match model.params.iter().position(|&p| p == k) {
                    Some(i) => &w[i],
                    None => &mb[data_args.iter().position(|&d| d == k).unwrap_or(0)],
                })
                .collect();
            value_and_grad_call(&model.loss, &model.params, &args)
        });
        // The mean of the micro-batches' gradients, then the optimizer's update.
        let update = || -> tessera_nn::Result<Vec<Tensor>> {
            let grads: Vec<Tensor> = outs[1..=n_params].iter().map(|g| g / mbs as f64).collect();
            let (params, state) = opt.update(
                &rest[0],
                &param_avals.unflatten(weights.to_vec())?,
                &param_avals.unflatten(grads)?,
                &state_avals.unflatten(state.to_vec())?,
            )?;
            let mut results = params.flatten();
            results.extend(state.flatten());
            results.push(outs[0].mean(&[0]));
            Ok(results)
        };
        update().unwrap_or_else(|err| {
            failure = Some(err);
            vec![outs[0].clone()]
        })
    });
    if let Some(err) = failure {
        return Err(err.into());
    }
    Ok((step?, data, init_state))
}

/// The step's arguments as host arrays.
fn step_args(weights: &[Array], lr: f64, data: &[Array]) -> anyhow::Result<Vec<HostArray>> {
    let lr = Array::scalar(DType::F32, lr);
    weights
        .iter()
        .chain(std::iter::once(&lr))
        .chain(data)
        .map(|a| Ok(to_host(a)?))
        .collect()
}

/// The step's results: the mean loss and the updated parameters.
fn split_outputs(outputs: &[HostArray]) -> anyhow::Result<(f64, Vec<Array>)> {
    let (loss, weights) = outputs.split_last().context("the step returned nothing")?;
    let loss = from_host(loss, DType::F32)?.to_vec()[0];
    let weights = weights
        .iter()
        .map(|w| Ok(from_host(w, DType::F32)?))
        .collect::<anyhow::Result<_>>()?;
    Ok((loss, weights))
}

/// One unpipelined step: the whole step compiled for one device.
fn reference_step(
    client: &Client,
    exe: &tessera_pjrt::LoadedExecutable,
    step: &ClosedJaxpr,
    args: &[HostArray],
) -> anyhow::Result<(f64, Vec<Array>)> {
    let buffers = args
        .iter()
        .map(|a| Ok(tessera_pjrt::Buffer::from_host_to(client, a, 0)?))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let outs = exe.execute(&[buffers.iter().collect()])?;
    let hosts = outs[0]
        .iter()
        .map(|b| Ok(b.to_host()?))
        .collect::<anyhow::Result<Vec<_>>>()?;
    debug_assert_eq!(hosts.len(), step.jaxpr.outvars.len());
    split_outputs(&hosts)
}

pub fn run(args: Args, plugin: Option<&str>) -> anyhow::Result<ExitCode> {
    super::mpi::run_job(args, plugin, run_in)
}

/// The run in one process, or in one rank of an MPI job (`job`).
fn run_in(
    args: Args,
    plugin: Option<&str>,
    job: Option<&tessera_mpmd::mpi_job::MpiJob>,
) -> anyhow::Result<ExitCode> {
    let mpmd_dim = args.mpmd_dim.unwrap_or(args.stages);
    if mpmd_dim == 0 || !args.devices.is_multiple_of(mpmd_dim) {
        bail!(
            "--devices {} is not a multiple of the {mpmd_dim} MPMD groups; give each group the same number of devices",
            args.devices
        );
    }
    super::check_pipeline_size(args.stages, args.microbatches)?;
    if let Some(lr) = args.lr.filter(|lr| !lr.is_finite() || *lr <= 0.0) {
        bail!("--lr {lr} is not a learning rate: give a finite number above 0, e.g. --lr 0.1");
    }
    if !args.batch.is_multiple_of(args.microbatches) {
        bail!(
            "--batch {} is not divisible by --microbatches {}; pick a batch that splits evenly",
            args.batch,
            args.microbatches
        );
    }
    // Checked here, before any device work; mpmd_jit makes it again from the step's treduce.
    Registry::with_builtins()
        .create(
            &args.schedule,
            ScheduleParams {
                stages: args.stages,
                mpmd_dim,
            },
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let rows = i64::from(args.batch / args.microbatches);
    let stages = args.stages as usize;
    let microbatches = args.microbatches as usize;
    if args.data.is_some() && !matches!(args.model.as_str(), "llama" | "gpt2") {
        bail!(
            "--data trains --model llama or gpt2; the {} model has its own data",
            args.model
        );
    }
    if let Some(warmup) = args.warmup.filter(|&w| w > u64::from(args.steps)) {
        bail!(
            "--warmup {warmup} is longer than the run's {} --steps",
            args.steps
        );
    }
    let model = match args.model.as_str() {
        "mlp" => mlp_model(stages, rows, microbatches)?,
        "gpt" => gpt_model(stages, rows, microbatches)?,
        "llama" | "gpt2" => library_model(
            &args.model,
            stages,
            rows,
            microbatches,
            args.data.as_deref(),
        )?,
        other => bail!("unknown model `{other}`: use `mlp`, `gpt`, `llama` or `gpt2`"),
    };
    let (client, mesh) = super::mpi::open(job, plugin, args.devices, mpmd_dim)?;
    let root = super::mpi::is_root(job);
    let lr = args
        .lr
        .unwrap_or(if args.model == "mlp" { 0.2 } else { 0.1 });
    let opt: Box<dyn Optimizer> = match args.optimizer.as_str() {
        "sgd" => Box::new(Sgd { momentum: 0.0 }),
        "adamw" => Box::new(AdamW::default()),
        other => bail!("unknown optimizer `{other}`: use `sgd` or `adamw`"),
    };
    let (step, data, init_state) = training_step(&model, &args.schedule, opt.as_ref())?;
    // What each step takes and gives back: the parameters, then the optimizer's state.
    let carried: Vec<Array> = model.init.iter().cloned().chain(init_state).collect();
    // The update writes each parameter into its old buffers (donated): one copy per group.
    let options = tessera_mpmd::MpmdJitOptions {
        donate_argnums: (0..model.init.len()).collect(),
        processes: super::mpi::processes(job, &client, &mesh)?,
        ..tessera_mpmd::MpmdJitOptions::default()
    };
    let jit = tessera_mpmd::mpmd_jit_with(&client, &mesh, &step, &options)?;
    let pipeline = jit.pipeline();
    // The reference: the same step unpipelined (its treduce a while loop) under `jit`, one device.
    let reference_exe = match root {
        true => Some(tessera::jit::compile(&client, &step, 0)?),
        false => None,
    };
    // The pipelined run keeps its weights on their groups between steps: each step's update
    // leaves them there and the next step takes them from there.
    let schedule = match args.warmup {
        Some(warmup) => LrSchedule::WarmupCosine {
            init: 0.0,
            peak: lr,
            warmup,
            decay_steps: u64::from(args.steps),
            end: lr / 10.0,
        },
        None => LrSchedule::Constant(lr),
    };
    let host_args = step_args(&carried, lr, &data)?;
    let n_carried = carried.len();
    let mut weights: Vec<StepArg> = host_args[..n_carried]
        .iter()
        .cloned()
        .map(StepArg::Host)
        .collect();
    let mut rest: Vec<StepArg> = host_args[n_carried..]
        .iter()
        .cloned()
        .map(StepArg::Host)
        .collect();
    let mut reference = carried;
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(u64::from(args.steps)),
        indicatif::ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let (mut losses, mut reference_losses, mut last_timings) = (Vec::new(), Vec::new(), None);
    let mut per_step: Vec<(f64, f64)> = Vec::new();
    let mut step_ms: Vec<f64> = Vec::new();
    for step_index in 0..u64::from(args.steps) {
        let lr = schedule.at(step_index);
        rest[0] = StepArg::Host(to_host(&Array::scalar(DType::F32, lr))?);
        let mut call_args: Vec<StepArg> = weights.drain(..).chain(rest.iter().cloned()).collect();
        let began = std::time::Instant::now();
        let run = jit.call_mpmd_donated(&mut call_args)?;
        step_ms.push(began.elapsed().as_secs_f64() * 1000.0);
        let mut outputs = run.outputs;
        let loss = outputs
            .pop()
            .context("the step returned nothing")?
            .to_host()?;
        let loss = from_host(&loss, DType::F32)?.to_vec()[0];
        if !loss.is_finite() && !args.allow_nonfinite {
            bar.finish_and_clear();
            bail!(
                "the loss of step {} is {loss}: training diverged. Fix: lower --lr, or pass \
                 --allow-nonfinite to train on",
                losses.len() + 1
            );
        }
        losses.push(loss);
        weights = outputs.into_iter().map(StepResult::into_arg).collect();
        if let Some(exe) = &reference_exe {
            let (ref_loss, ref_next) =
                reference_step(&client, exe, &step, &step_args(&reference, lr, &data)?)?;
            reference_losses.push(ref_loss);
            reference = ref_next;
        }
        bar.set_message(format!(
            "loss {:.5}",
            losses.last().copied().unwrap_or(f64::NAN)
        ));
        bar.inc(1);
        if !args.json && root {
            bar.suspend(|| {
                println!(
                    "step {:>3}  loss {:.6}  (unpipelined {:.6})",
                    losses.len(),
                    losses[losses.len() - 1],
                    reference_losses[reference_losses.len() - 1]
                )
            });
        }
        per_step.push(super::timing::calibrate(
            &run.timings,
            pipeline.schedule_plan(),
        ));
        last_timings = Some(run.timings);
    }
    bar.finish_and_clear();
    let timings = last_timings.context("no steps were run")?;
    if let Some(job) = job {
        let finish = super::mpi::Finish {
            model: &args.model,
            schedule: &args.schedule,
            stages: args.stages,
            microbatches: args.microbatches,
            devices: args.devices,
            json: args.json,
            losses: &losses,
            reference_losses: &reference_losses,
            timings: &timings,
            plan: pipeline.schedule_plan(),
            step_ms: &step_ms,
        };
        return super::mpi::finish(job, &finish);
    }
    super::timing::print_task_table(&timings);
    let groups = pipeline.schedule_plan().actors.len();
    let simulated = tessera_schedule::simulate(
        pipeline.schedule_plan(),
        &Costs::uniform(args.stages, 1.0, 2.0, 0.0),
    )
    .map(|s| s.bubble_ratio)
    .unwrap_or(f64::NAN);
    let measured = timings.bubble_ratio(groups);
    println!("bubble ratio: measured {measured:.3}, simulator (F=1, B=2) {simulated:.3}");
    // Medians over the steps after the first (which warms caches up), when there are any.
    let settled = if per_step.len() > 1 {
        &per_step[1..]
    } else {
        &per_step[..]
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let makespan_ms = median(settled.iter().map(|s| s.0).collect());
    let predicted_ms = median(settled.iter().map(|s| s.1).collect());
    println!(
        "step makespan (median over steps): measured {makespan_ms:.3} ms, simulator with the measured task and transfer times {predicted_ms:.3} ms"
    );
    let orders_match = timings
        .group_orders(groups)
        .iter()
        .zip(&pipeline.schedule_plan().actors)
        .all(|(got, want)| {
            got == &want
                .iter()
                .map(tessera_mpmd::pipeline::action_name)
                .collect::<Vec<_>>()
        });
    println!("each group ran its actions in the schedule's order: {orders_match}");
    let wall_ms = step_ms.last().copied().unwrap_or(f64::NAN);
    println!(
        "step wall time (last step, weights kept on their groups, update included): {wall_ms:.3} ms; transfers: {} issued in {:.3} ms",
        timings.transfers.len(),
        timings.transfers.iter().map(|t| t.duration_us).sum::<f64>() / 1000.0
    );
    let memory = pipeline.memory_report(&timings);
    println!(
        "peak live bytes per group: measured {:?}, predicted {:?}; peak in-flight micro-batches per stage: measured {:?}, schedule {:?}",
        memory.peak_live_bytes,
        memory.predicted_peak_live_bytes,
        memory.peak_inflight_microbatches,
        memory.predicted_inflight_microbatches
    );
    if let Some(path) = &args.trace {
        std::fs::write(path, timings.to_chrome_trace())
            .with_context(|| format!("writing {}", path.display()))?;
        println!("trace: {}", path.display());
    }
    let max_diff = losses
        .iter()
        .zip(&reference_losses)
        .map(|(a, b)| (a - b).abs() / b.abs().max(1e-12))
        .fold(0.0, f64::max);
    let summary = serde_json::json!({
        "model": args.model,
        "schedule": args.schedule,
        "stages": args.stages,
        "microbatches": args.microbatches,
        "devices": args.devices,
        "losses": losses,
        "reference_losses": reference_losses,
        "final_loss": losses.last(),
        "reference_loss": reference_losses.last(),
        "max_relative_difference": max_diff,
        "bubble_ratio_measured": measured,
        "makespan_ms": makespan_ms,
        "step_wall_ms": wall_ms,
        "predicted_makespan_ms": predicted_ms,
        "bubble_ratio_simulated": simulated,
        "order_matches_schedule": orders_match,
        "memory": memory_json(&pipeline.memory_report(&timings), pipeline.schedule_plan()),
    });
    if args.json {
        println!("{summary}");
    } else {
        println!(
            "final loss {:.6} (unpipelined {:.6}); largest relative difference over the steps {max_diff:.2e}",
            losses.last().copied().unwrap_or(f64::NAN),
            reference_losses.last().copied().unwrap_or(f64::NAN)
        );
    }
    Ok(if max_diff <= 1e-4 && orders_match {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
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
            })
        })
        .collect();
    serde_json::json!({ "groups": groups, "stages": stages })
}
