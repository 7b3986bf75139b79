//! `tessera train`: pipelined training over MPMD groups of the PJRT CPU plugin's devices, checked
//! step by step against the same training run unpipelined.
//!
//! The model is traced with stage markers, partitioned into stage programs, and every action of
//! the schedule is compiled for its group; each step runs the schedule over the microbatches,
//! then SGD updates the parameters (on the host, for now). The reference run differentiates the
//! whole loss with `value_and_grad` on the reference interpreter and applies the same update.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use tessera::jit::{from_host, to_host};
use tessera_ir::autodiff::value_and_grad;
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::trace;
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_mpmd::MpmdMesh;
use tessera_mpmd::driver::CompiledPipeline;
use tessera_pjrt::Client;
use tessera_schedule::{Costs, Registry, ScheduleParams};
use tessera_sharding::Mesh;

/// Arguments of `tessera train`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model: `mlp` (`gpt` is not built yet).
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
    /// SGD learning rate.
    #[arg(long, default_value_t = 0.2)]
    lr: f64,
    /// Write a Chrome / Perfetto trace of the last step's tasks here.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Print a JSON summary as the last line.
    #[arg(long)]
    json: bool,
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

fn sgd(params: &mut [Array], grads: &[Array], scale: f64) -> anyhow::Result<()> {
    for (p, g) in params.iter_mut().zip(grads) {
        let values = p
            .to_vec()
            .iter()
            .zip(g.to_vec())
            .map(|(a, b)| a - scale * b)
            .collect();
        *p = Array::new(p.dtype, &p.shape(), values)?;
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.model != "mlp" {
        return super::not_built_yet(
            &format!("train --model {}", args.model),
            "tessera-mpmd: MPMD pipeline-parallel training (the GPT model)",
        );
    }
    let mpmd_dim = args.mpmd_dim.unwrap_or(args.stages);
    if mpmd_dim == 0 || !args.devices.is_multiple_of(mpmd_dim) {
        bail!(
            "--devices {} is not a multiple of the {mpmd_dim} MPMD groups; give each group the same number of devices",
            args.devices
        );
    }
    if args.microbatches == 0 || !args.batch.is_multiple_of(args.microbatches) {
        bail!(
            "--batch {} is not divisible by --microbatches {}; pick a batch that splits evenly",
            args.batch,
            args.microbatches
        );
    }
    let schedule = Registry::with_builtins()
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
    let loss = mlp_loss(stages, rows)?;
    let params: Vec<usize> = (1..=stages).collect();
    let client = Client::cpu(i64::from(args.devices))
        .context("the PJRT CPU plugin (run `cargo xtask setup`)")?;
    let group = i64::from(args.devices / mpmd_dim);
    let mesh = MpmdMesh::new(
        Mesh::auto(&[("stage", i64::from(mpmd_dim)), ("data", group)])?,
        "stage",
    )?;
    let pipeline = CompiledPipeline::new(
        &client,
        &mesh,
        &loss,
        &params,
        schedule.as_ref(),
        args.microbatches,
    )?;
    let data = dataset(args.microbatches as usize, rows)?;
    let mut weights: Vec<Array> = (0..stages)
        .map(|s| {
            Array::new(
                DType::F32,
                &[WIDTH, WIDTH],
                pseudo(s as f64 + 0.5, WIDTH * WIDTH, 0.5),
            )
        })
        .collect::<Result<_, _>>()?;
    let mut reference = weights.clone();
    let reference_step = value_and_grad(&loss, &params)?;
    let scale = args.lr / f64::from(args.microbatches);
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(u64::from(args.steps)),
        indicatif::ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let (mut losses, mut reference_losses, mut last_timings) = (Vec::new(), Vec::new(), None);
    for _ in 0..args.steps {
        let mut by_arg = HashMap::new();
        for (k, w) in weights.iter().enumerate() {
            by_arg.insert(k + 1, to_host(w)?);
        }
        let batches = data
            .iter()
            .map(|(x, y)| Ok(HashMap::from([(0, to_host(x)?), (stages + 1, to_host(y)?)])))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let out = pipeline.step(&by_arg, &batches)?;
        let grads = out
            .grads
            .iter()
            .map(|g| from_host(g, DType::F32))
            .collect::<Result<Vec<_>, _>>()?;
        losses.push(out.losses.iter().sum::<f64>() / out.losses.len() as f64);
        sgd(&mut weights, &grads, scale)?;
        // The same step, unpipelined.
        let (mut ref_loss, mut ref_grads) = (0.0, vec![Array::zeros(&weights[0].aval()); stages]);
        for (x, y) in &data {
            let mut call = vec![x.clone()];
            call.extend(reference.iter().cloned());
            call.push(y.clone());
            let r = eval_closed(&reference_step, &call)?;
            ref_loss += r[0].to_vec()[0];
            for (acc, g) in ref_grads.iter_mut().zip(&r[1..]) {
                let sum = acc
                    .to_vec()
                    .iter()
                    .zip(g.to_vec())
                    .map(|(a, b)| a + b)
                    .collect();
                *acc = Array::new(DType::F32, &acc.shape(), sum)?;
            }
        }
        reference_losses.push(ref_loss / data.len() as f64);
        sgd(&mut reference, &ref_grads, scale)?;
        bar.set_message(format!(
            "loss {:.5}",
            losses.last().copied().unwrap_or(f64::NAN)
        ));
        bar.inc(1);
        if !args.json {
            bar.suspend(|| {
                println!(
                    "step {:>3}  loss {:.6}  (unpipelined {:.6})",
                    losses.len(),
                    losses[losses.len() - 1],
                    reference_losses[reference_losses.len() - 1]
                )
            });
        }
        last_timings = Some(out.timings);
    }
    bar.finish_and_clear();
    let timings = last_timings.context("no steps were run")?;
    print_task_table(&timings);
    let groups = pipeline.schedule_plan().actors.len();
    let simulated = tessera_schedule::simulate(
        pipeline.schedule_plan(),
        &Costs::uniform(args.stages, 1.0, 2.0, 0.0),
    )
    .map(|s| s.bubble_ratio)
    .unwrap_or(f64::NAN);
    let measured = timings.bubble_ratio(groups);
    println!("bubble ratio: measured {measured:.3}, simulator (F=1, B=2) {simulated:.3}");
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
        "bubble_ratio_simulated": simulated,
        "order_matches_schedule": orders_match,
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

/// Mean task times of the last step, per task kind and stage (microbatches pooled).
fn print_task_table(timings: &tessera_mpmd::runtime::Timings) {
    let mut pooled: std::collections::BTreeMap<String, Vec<f64>> =
        std::collections::BTreeMap::new();
    for (name, times) in timings.task_times_ms() {
        let key: Vec<&str> = name.split(' ').filter(|w| !w.starts_with("mb")).collect();
        pooled.entry(key.join(" ")).or_default().extend(times);
    }
    println!("{:<16} {:>6} {:>10}", "task", "runs", "mean ms");
    for (name, times) in pooled {
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        println!("{name:<16} {:>6} {mean:>10.3}", times.len());
    }
}
