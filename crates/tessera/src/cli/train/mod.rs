//! `tessera train`: pipelined training over MPMD groups of the PJRT plugin's devices, checked
//! step by step against the same training run unpipelined.
//!
//! - [`args`]: the command line; [`config`]: which model and its sizes (`--config` TOML or flags).
//! - [`model`]: the model library's decoders (or the toy MLP) with stage markers, and their data.
//! - [`step`]: the training step as one traced program (a `treduce` over micro-batches of
//!   `value_and_grad_call(loss)`, then the optimizer), and the unpipelined reference.
//! - [`layout`]: the device mesh (`--mesh`, `--mpmd-axis`) and the step arguments' specs
//!   (tensor parallelism, `--fsdp`); [`reference`]: the unpipelined step each step is checked
//!   against.
//! - [`eval`]: the eval loss (`--eval-every`), a forward-only pipeline over the training
//!   step's groups on the parameters they hold, in one process and under MPI.
//! - [`checkpoints`]: saving and resuming; [`progress`]: the progress bar; [`report`]: the
//!   figures printed at the end.
//!
//! `mpmd_jit` partitions the step into stage programs, compiles every action of the schedule for
//! its group and runs the update on the groups that hold the parameters, which stay there from
//! step to step. The reference is the same step unpipelined under `jit`: on one device, or, with
//! sharded layouts, with the same shardings on one group-shaped mesh.

mod args;
mod checkpoints;
mod config;
mod eval;
mod fault;
mod hf_import;
pub use hf_import::ImportStats;
mod layout;
mod model;
mod phases;
mod plan_use;
pub(super) mod profile;
mod progress;
mod reference;
pub(super) mod report;
mod save_parts;
mod start;
mod step;
mod tensorboard_log;
mod xla_profile;

use crate::cli::out::outln;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use tessera::jit::{from_host, to_host};
use tessera_ir::{Array, DType};
use tessera_mpmd::{StepArg, StepResult};
use tessera_nn::checkpoint::{History, Manifest, Part};
use tessera_nn::data::token_files::TokenWidth;
use tessera_nn::lr::LrSchedule;
use tessera_nn::optim::{AdamW, Optimizer, Sgd};
use tessera_pjrt::Client;
use tessera_schedule::{Registry, ScheduleParams};

pub use args::{Args, DEFAULTED_FLAGS};
use model::Model;
use progress::Progress;
use start::{carried_names, starting_point};

/// Checks the arguments that need no model or device, before any work.
fn check_args(args: &Args, mpmd_dim: u32) -> anyhow::Result<()> {
    if mpmd_dim == 0 || !args.devices.is_multiple_of(mpmd_dim) {
        bail!(
            "--devices {} is not a multiple of the {mpmd_dim} MPMD groups; give each group the \
             same number of devices",
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
    if let Some(warmup) = args.warmup.filter(|&w| w > u64::from(args.steps)) {
        bail!(
            "--warmup {warmup} is longer than the run's {} --steps",
            args.steps
        );
    }
    if let Some(norm) = args.clip_grad_norm.filter(|n| !n.is_finite() || *n <= 0.0) {
        bail!("--clip-grad-norm {norm}: give a finite norm above 0, e.g. --clip-grad-norm 1.0");
    }
    if args.steps == 0 {
        bail!("--steps 0: a run trains at least 1 step, e.g. --steps 10");
    }
    if let Some(stop) = args.stop_after.filter(|&s| s == 0) {
        bail!("--stop-after {stop}: stop after step 1 or later");
    }
    if let Some(stop) = args.stop_after.filter(|&s| s > args.steps) {
        bail!(
            "--stop-after {stop} is after the run's last step (--steps {}), so it would never \
             stop the run early; drop it or give a step up to {}",
            args.steps,
            args.steps
        );
    }
    if args.batch == 0 {
        bail!("--batch 0: a step trains on at least one example per micro-batch, e.g. --batch 64");
    }
    compiler_options(&args.xla_profile, &args.xla_options)?;
    let saves = args.checkpoint_dir.is_some() || args.resume.is_some();
    if args.checkpoint_every.is_some() && !saves {
        bail!("--checkpoint-every needs --checkpoint-dir DIR (where to save)");
    }
    if args.checkpoint_async && !saves {
        bail!("--checkpoint-async needs --checkpoint-dir DIR (where to save in the background)");
    }
    Ok(())
}

/// Checks that the files written at the end of a run (`--trace`, `--plot`) can be written, so a
/// run never trains for an hour and then fails to save them. A file that exists is left as it
/// is; one that does not is created and removed again.
fn check_output_paths(args: &Args) -> anyhow::Result<()> {
    let outputs = [("--trace", &args.trace), ("--plot", &args.plot)];
    for (option, path) in outputs {
        let Some(path) = path else { continue };
        let existed = path.exists();
        let opened = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path);
        if let Err(err) = opened {
            bail!(
                "{option} {}: cannot write there ({err}); pass a path in a writable directory",
                path.display()
            );
        }
        if !existed {
            std::fs::remove_file(path)
                .with_context(|| format!("{option} {}: removing the probe", path.display()))?;
        }
    }
    Ok(())
}

/// The compiler options of `--xla-profile`, then each `--xla-option NAME=VALUE` (winning over
/// the profile's option of the same name).
fn compiler_options(
    profile: &str,
    options: &[String],
) -> anyhow::Result<tessera_mpmd::runtime::CompilerOptions> {
    let mut all: tessera_mpmd::runtime::CompilerOptions =
        xla_profile::options(profile)?.into_iter().collect();
    for option in options {
        match option.split_once('=') {
            Some((name, value)) if !name.is_empty() => {
                all.insert(name.to_owned(), tessera_pjrt::OptionOverride::parse(value));
            }
            _ => bail!(
                "--xla-option {option}: write NAME=VALUE, e.g. --xla-option \
                 xla_cpu_enable_fast_math=false"
            ),
        }
    }
    Ok(all)
}

/// The dtype the model computes in (float32 for the MLP).
fn compute_dtype(choice: &config::ModelChoice) -> DType {
    match choice {
        config::ModelChoice::Mlp => DType::F32,
        config::ModelChoice::Decoder(c) => c.compute_dtype,
    }
}

fn optimizer(name: &str) -> anyhow::Result<Box<dyn Optimizer>> {
    match name {
        "sgd" => Ok(Box::new(Sgd { momentum: 0.0 })),
        "adamw" => Ok(Box::new(AdamW::default())),
        other => bail!("unknown optimizer `{other}`: use `sgd` or `adamw`"),
    }
}

/// The warning naming the optimizer-state arrays the step could not donate (their update is
/// not one program on their group returning a value of their type and layout): each step then
/// holds two copies of them. Scalars (a step count) are left out, as they cost nothing.
fn undonated_state(
    program: &tessera_ir::ClosedJaxpr,
    options: &tessera_mpmd::MpmdJitOptions,
    donated: &[usize],
    names: &[(Part, String)],
) -> Option<String> {
    let avals = program.jaxpr.in_avals();
    let kept: Vec<(String, u64)> = options
        .donate_where_possible
        .iter()
        .filter(|a| !donated.contains(a))
        .filter_map(|&a| {
            let aval = avals.get(a)?;
            let bytes = aval.size() as u64 * aval.dtype.size_in_bytes() as u64;
            (!aval.shape.is_empty()).then(|| {
                (
                    names
                        .get(a)
                        .map_or(format!("argument {a}"), |n| n.1.clone()),
                    bytes,
                )
            })
        })
        .collect();
    if kept.is_empty() {
        return None;
    }
    let total: u64 = kept.iter().map(|k| k.1).sum();
    let list: Vec<&str> = kept.iter().map(|k| k.0.as_str()).collect();
    Some(format!(
        "warning: {} optimizer-state arrays ({total} bytes) are not donated, so each step holds two copies of them: {}",
        kept.len(),
        list.join(", ")
    ))
}

/// Whether the step runs as one program: one MPMD group, one process, fusion on.
fn runs_as_one_program(
    args: &Args,
    layout: &layout::Layout,
    job: Option<&tessera_mpmd::mpi_job::MpiJob>,
) -> bool {
    !args.no_fuse && layout.mpmd_dim() == 1 && job.is_none()
}

/// The remat policy each decoder block applies as a `checkpoint` region when the step runs as
/// one program, where the pipeline's per-task policy has no tasks to apply to; `None` for
/// saving everything (no region, as `jax.jit` without `jax.checkpoint`) and for pipelined
/// steps. Offloading residuals needs the tasks: refused in one program.
fn one_program_remat(
    args: &Args,
    layout: &layout::Layout,
    job: Option<&tessera_mpmd::mpi_job::MpiJob>,
) -> anyhow::Result<Option<tessera_mpmd::RematPolicy>> {
    if !runs_as_one_program(args, layout, job) {
        return Ok(None);
    }
    if let Some(kind) = &args.remat_offload {
        bail!(
            "--remat-offload {kind} moves saved residuals between a stage's forward and backward \
             tasks, but this step runs as one program (one MPMD group): add --no-fuse to run its \
             tasks, or drop --remat-offload"
        );
    }
    Ok((args.remat != tessera_mpmd::RematPolicy::EverythingSaveable).then_some(args.remat))
}

#[cfg(test)]
mod donation_tests {
    #![allow(clippy::unwrap_used)] // test code

    use super::*;
    use tessera_ir::{DType, ShapedArray};

    /// Of the state donated where possible, the arrays the step did not donate are named with
    /// their bytes; a scalar, and what was donated, are not.
    #[test]
    fn undonated_state_arrays_are_named() {
        let f = |shape: &[i64]| ShapedArray::new(DType::F32, shape);
        let program =
            tessera_ir::trace::trace(&[f(&[4]), f(&[4]), f(&[2, 3]), f(&[])], |a| a.to_vec())
                .unwrap();
        let options = tessera_mpmd::MpmdJitOptions {
            donate_where_possible: vec![1, 2, 3],
            ..tessera_mpmd::MpmdJitOptions::default()
        };
        let names: Vec<(Part, String)> = ["w", "mu/w", "nu/b", "count"]
            .iter()
            .map(|n| (Part::Optimizer, n.to_string()))
            .collect();
        let warning = undonated_state(&program, &options, &[1], &names).unwrap();
        assert!(
            warning.contains("1 optimizer-state arrays (24 bytes)"),
            "{warning}"
        );
        assert!(warning.ends_with("nu/b"), "{warning}");
        assert_eq!(undonated_state(&program, &options, &[1, 2], &names), None);
    }
}

/// The carried values (parameters, then optimizer state) of a step's results, on the host.
fn carried_on_host(outputs: &[StepResult], like: &[Array]) -> anyhow::Result<Vec<Array>> {
    outputs
        .iter()
        .zip(like)
        .map(|(o, a)| Ok(from_host(&o.to_host()?, a.dtype())?))
        .collect()
}

pub fn run(args: Args, plugin: Option<&str>) -> anyhow::Result<ExitCode> {
    let args = plan_use::apply(args, plugin)?;
    super::mpi::run_job(args, plugin, run_in)
}

/// The run in one process, or in one rank of an MPI job (`job`).
fn run_in(
    args: Args,
    plugin: Option<&str>,
    job: Option<&tessera_mpmd::mpi_job::MpiJob>,
) -> anyhow::Result<ExitCode> {
    let timeout = args.timeout.map(std::time::Duration::from_secs_f64);
    if let (Some(job), Some(timeout)) = (job, timeout) {
        // Before the first collective: every wait of the job is bounded by --timeout.
        job.set_timeout(timeout);
    }
    if let Some(job) = job {
        super::mpi::check_same_config(job, &args)?;
    }
    let layout = layout::Layout::choose(&args)?;
    let mpmd_dim = layout.mpmd_dim();
    check_args(&args, mpmd_dim)?;
    layout.check_rows(args.batch / args.microbatches)?;
    let choice = config::with_attention(config::choose_model(&args)?, &args.attention, plugin)?;
    let stage_layers = config::stage_layers(&args, &choice)?;
    if args.was_given("eval_every")
        && args.eval_every != 0
        && matches!(choice, config::ModelChoice::Mlp)
    {
        bail!(
            "--eval-every {} computes the held-out loss of a decoder's data; the mlp model has \
             none: drop it, or use --model llama or gpt2",
            args.eval_every
        );
    }
    if args.data.is_some() && matches!(choice, config::ModelChoice::Mlp) {
        bail!("--data trains --model llama or gpt2; the mlp model has its own data");
    }
    let opt = optimizer(&args.optimizer)?;
    config::check_memory(&choice, &args.optimizer, args.batch)?;
    check_output_paths(&args)?;
    tensorboard_log::check(&args, super::mpi::is_root(job))?;
    let description = config::describe(&choice, &args.optimizer);
    let rows = i64::from(args.batch / args.microbatches);
    let imported = hf_import::open(&args)?;
    hf_import::check_export(&args, &choice, job.map_or(1, |j| j.size()))?;
    let width = args
        .data_dtype
        .as_deref()
        .map(TokenWidth::parse)
        .transpose()?;
    let data = model::DataSource {
        file: args.data.as_deref(),
        tokenizer: imported.as_ref().map(|i| &i.tokenizer),
        width,
    };
    // An imported model's parameters are read from its folder, not made from the seed.
    let seed = imported.is_none().then_some(args.seed);
    let model = Model::new(
        &choice,
        &stage_layers,
        rows,
        args.microbatches as usize,
        &data,
        seed,
        one_program_remat(&args, &layout, job)?,
    )?;
    let save_dir = args.checkpoint_dir.clone().or(args.resume.clone());
    let mut saver = save_dir
        .as_deref()
        .map(|dir| {
            checkpoints::Saver::new(
                dir,
                args.checkpoint_every,
                super::mpi::is_root(job),
                args.checkpoint_async,
            )
        })
        .transpose()?;
    if let (Some(saver), None) = (&saver, &args.resume) {
        saver.refuse_earlier_run()?;
    }
    if let (Some(dir), true, config::ModelChoice::Decoder(decoder)) =
        (&save_dir, super::mpi::is_root(job), &choice)
    {
        hf_import::record_in_checkpoints(dir, imported.as_ref(), decoder)?;
    }
    let training = step::training_step(
        &model,
        &args.schedule,
        opt.as_ref(),
        args.clip_grad_norm,
        &step::stack(&model, &model.batches(0)?)?,
    )?;
    // cuDNN's attention calls cannot be partitioned by XLA: in a group of several devices
    // they run per shard.
    let program = &match layout.attention_shards(&choice, rows) {
        Some(shards) => tessera_ir::passes::shard_attention(&training.program, &shards),
        None => training.program.clone(),
    };
    let n_carried = model.n_params() + training.state_avals.len();
    let data_args = program.jaxpr.invars.len() - n_carried - 1;
    let in_specs = layout.step_specs(&choice, &model.param_avals, opt.as_ref(), data_args)?;
    let carried_names = carried_names(&model, &training);
    let (client, mesh) = super::mpi::open(job, plugin, &layout.shape, &layout.mpmd_axis)?;
    let root = super::mpi::is_root(job);
    let lr = args.lr.unwrap_or(match choice {
        config::ModelChoice::Mlp => 0.2,
        config::ModelChoice::Decoder(_) => 0.1,
    });
    // The update writes each parameter into its old buffers (donated): one copy per group; and
    // the optimizer state too where it can (no new buffers each step).
    let options = tessera_mpmd::MpmdJitOptions {
        donate_argnums: (0..model.n_params()).collect(),
        donate_where_possible: (model.n_params()..n_carried).collect(),
        processes: super::mpi::processes(job, &client, &mesh)?,
        in_specs,
        fusion: match args.no_fuse {
            true => tessera_mpmd::Fusion::Never,
            false => tessera_mpmd::Fusion::Auto,
        },
        compiler_options: compiler_options(&args.xla_profile, &args.xla_options)?,
        timeout,
        remat: match &args.remat_offload {
            Some(kind) => tessera_mpmd::Remat::all(args.remat).with_offload(kind),
            None => tessera_mpmd::Remat::all(args.remat),
        },
        grad_reduce: args.grad_reduce,
        fsdp_gather: args.fsdp_gather,
        ..tessera_mpmd::MpmdJitOptions::default()
    };
    let jit = tessera_mpmd::mpmd_jit_with(&client, &mesh, program, &options)?;
    if root && let Some(warning) = undonated_state(program, &options, jit.donated(), &carried_names)
    {
        eprintln!("{warning}");
    }
    // One process, and rank 0 running the unpipelined reference, use every value; the other
    // ranks of a job read from a checkpoint only what their groups use.
    let reads: Vec<bool> = match job.is_none() || (root && !args.no_reference) {
        true => vec![true; n_carried],
        false => jit.reads_here().into_iter().take(n_carried).collect(),
    };
    let (start, carried, history, run_seed, import_stats) = starting_point(
        &args,
        &model,
        &training,
        &description,
        &reads,
        imported.as_ref(),
    )?;
    // The reference runs on rank 0 (the only rank in one process).
    let mut reference = match (args.no_reference || !root, layout.explicit) {
        (true, _) => None,
        (false, false) => Some(reference::Reference::one_device(
            &client, program, &carried,
        )?),
        (false, true) => Some(reference::Reference::sharded(
            &client,
            program,
            mesh.lowering_mesh(),
            (jit.in_specs(), jit.out_specs()),
            &carried,
        )?),
    };
    // The eval loss runs forward only where the parameters live, on every rank.
    let eval = match args.eval_every {
        0 => None,
        _ => eval::Eval::new(&eval::EvalSetup {
            client: &client,
            mesh: &mesh,
            model: &model,
            schedule: &args.schedule,
            training: &options,
            check: !args.no_reference,
            root,
            compute: compute_dtype(&choice),
        })?,
    };
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
    schedule.validate()?;
    let last = u64::from(args.steps);
    // Where this invocation stops: the run's last step, or --stop-after.
    let stop = args.stop_after.map_or(last, |s| u64::from(s).min(last));
    if stop <= start {
        bail!(
            "--stop-after {stop}: the run resumes after step {start}, so it would stop before \
             training; give --stop-after above {start}, or drop it"
        );
    }
    let tokens_per_step = u64::from(args.batch) * model.tokens_per_example;
    let mut weights: Vec<StepArg> = carried
        .iter()
        .map(|a| Ok(StepArg::Host(to_host(a)?)))
        .collect::<anyhow::Result<_>>()?;
    let tolerance = reference::tolerance(compute_dtype(&choice));
    let mut log = RunLog {
        earlier: history,
        tolerance,
        ..RunLog::default()
    };
    let mut board = tensorboard_log::Board::open(&args, root, job.is_some())?;
    let mut progress = Progress::new(start + 1, last, root);
    // The next step's batch is made and placed on another thread while a step runs.
    let carried_count = weights.len();
    let batch_args = |i: u64| step::batch_args(&model, &schedule, &jit, i, carried_count);
    let mut next_batch: Option<Vec<StepArg>> = None;
    for step_index in start..stop {
        let step_number = step_index + 1;
        fault::kill_at_step(job.map_or(0, |j| j.rank()), step_number)?;
        let step_began = std::time::Instant::now();
        let batch = match next_batch.take() {
            Some(batch) => batch,
            None => batch_args(step_index)?,
        };
        let mut call_args: Vec<StepArg> = weights.drain(..).chain(batch).collect();
        let began = std::time::Instant::now();
        let batch_ms = began.duration_since(step_began).as_secs_f64() * 1000.0;
        let (run, ahead, waited_ms) = std::thread::scope(|scope| {
            let ahead = (step_index + 1 < stop).then(|| scope.spawn(|| batch_args(step_index + 1)));
            let run = jit.call_mpmd_donated(&mut call_args);
            // Waiting here for the next batch is batch time (a loaded host may run it late).
            let waiting = std::time::Instant::now();
            let ahead = ahead.map(|h| h.join());
            (run, ahead, waiting.elapsed().as_secs_f64() * 1000.0)
        });
        let run = run?;
        let seconds = began.elapsed().as_secs_f64();
        next_batch = match ahead {
            Some(Ok(prepared)) => Some(prepared?),
            Some(Err(_)) => bail!("the thread making the next step's batch panicked"),
            None => None,
        };
        let mut outputs = run.outputs;
        let loss = outputs
            .pop()
            .context("the step returned nothing")?
            .to_host()?;
        let loss = from_host(&loss, DType::F32)?.to_vec()[0];
        let wall_ms = step_began.elapsed().as_secs_f64() * 1000.0;
        log.step_times.push(phases::StepTime {
            wall_ms,
            batch_ms: batch_ms + waited_ms,
            call: run.phases,
            loss_ms: wall_ms - batch_ms - seconds * 1000.0,
        });
        if !loss.is_finite() && !args.allow_nonfinite {
            progress.finish();
            bail!(
                "the loss of step {step_number} is {loss}: training diverged{}. Fix: lower --lr, \
                 or pass --allow-nonfinite to train on",
                log.checkpoints
                    .last()
                    .map(|c| format!(" (the last checkpoint, {}, is kept)", c.display()))
                    .unwrap_or_default()
            );
        }
        log.steps.push(step_number);
        log.losses.push(loss);
        log.step_ms.push(seconds * 1000.0);
        if let Some(reference) = &mut reference {
            // The same batch the step took, made again for the unpipelined reference.
            let data = step::stack(&model, &model.batches(step_index)?)?;
            let ref_loss = reference.step(&client, program, schedule.at(step_index), &data)?;
            log.reference_losses.push(ref_loss);
            reference::check_step(step_number, loss, ref_loss, tolerance)?;
        }
        let restart_due = !args.no_reference
            && step_number.is_multiple_of(reference::RESTART_EVERY)
            && step_number < stop;
        if restart_due {
            let now = match job {
                None => Some(carried_on_host(&outputs, &carried)?),
                Some(job) => super::mpi::gather_carried(job, &outputs, &carried)?,
            };
            if let (Some(reference), Some(now)) = (&mut reference, now) {
                reference.restart(&client, &now)?;
            }
        }
        progress.step(loss, tokens_per_step as f64 / seconds);
        if !args.json && root {
            let reference = log
                .reference_losses
                .last()
                .map(|r| format!("  (unpipelined {r:.6})"))
                .unwrap_or_default();
            progress.println(&format!("step {step_number:>4}  loss {loss:.6}{reference}"))?;
        }
        let eval_due = args.eval_every > 0
            && (step_number.is_multiple_of(args.eval_every) || step_number == stop);
        let save_due = saver.as_ref().is_some_and(|s| s.due(step_number, stop));
        if let (true, Some(eval)) = (eval_due, &eval) {
            let got = eval.loss(&client, &model, &outputs, &carried, job)?;
            progress.eval(got.loss);
            log.eval_losses.push((step_number, got.loss));
            if !args.json && root {
                let one = got.one_device.map(|l| format!("  (one device {l:.6})"));
                let line = format!("step {step_number:>4}  eval loss {:.6}", got.loss);
                progress.println(&format!("{line}{}", one.unwrap_or_default()))?;
            }
        }
        if let (true, Some(saver)) = (save_due, &mut saver) {
            let manifest = Manifest {
                step: step_number,
                seed: run_seed,
                data_position: model.data_position(step_number),
                model: description.clone(),
                history: log.history(),
            };
            let pieces = save_parts::pieces(&outputs, &carried_names, &carried, root)?;
            log.checkpoints.extend(saver.save(job, manifest, pieces)?);
        }
        if !jit.is_fused() && step_index > start {
            for (name, times) in super::timing::task_times_by_name(&run.timings) {
                log.task_ms.entry(name).or_default().extend(times);
            }
        }
        if !jit.is_fused() {
            log.per_step.push(super::timing::calibrate(
                &run.timings,
                jit.pipeline().schedule_plan(),
            ));
        }
        if job.is_some() {
            log.job_timings.push(run.timings.clone());
        }
        log.timings = Some(run.timings);
        board.step(
            &log,
            &jit,
            step_number == stop,
            schedule.at(step_index),
            tokens_per_step,
        )?;
        weights = outputs.into_iter().map(StepResult::into_arg).collect();
        log.iteration_ms
            .push(step_began.elapsed().as_secs_f64() * 1000.0);
    }
    progress.finish();
    if let Some(saver) = &mut saver {
        log.checkpoints.extend(saver.finish(job)?);
    }
    if job.is_none() {
        let n = model.n_params();
        log.parameter_bytes = Some(report::parameter_bytes(
            &weights[..n.min(weights.len())],
            &mesh,
        )?);
    }
    if let (Some(out), config::ModelChoice::Decoder(decoder)) = (&args.export_hf, &choice) {
        let n = model.n_params().min(weights.len());
        let dir = hf_import::export(
            out,
            imported.as_ref(),
            decoder,
            &model.param_avals,
            &weights[..n],
        )?;
        log.exported = Some(dir);
    }
    log.import = import_stats;
    if let Some(job) = job {
        let history = log.history();
        let plot = match root {
            true => write_plot(&args, saver.as_ref(), &history)?,
            false => None,
        };
        let finish = super::mpi::Finish {
            import: log.import.as_ref(),
            steps: &log.steps,
            history: &history,
            checkpoints: &log.checkpoints,
            plot: plot.as_deref(),
            model: config::name(&choice),
            schedule: &args.schedule,
            stages: args.stages,
            microbatches: args.microbatches,
            devices: args.devices,
            json: args.json,
            losses: &log.losses,
            reference_losses: &log.reference_losses,
            eval_losses: &log.eval_losses,
            timings: &log.job_timings,
            pipeline: jit.pipeline(),
            trace: args.trace.as_deref(),
            step_ms: &log.step_ms,
            tolerance,
        };
        return super::mpi::finish(job, &finish);
    }
    let name = format!(
        "{} ({} parameters, {})",
        config::name(&choice),
        model.param_count(),
        args.optimizer
    );
    finish(&args, &name, &client, &model, &jit, log, saver.as_ref())
}

/// What the steps of a run recorded.
#[derive(Default)]
struct RunLog {
    /// The losses of the steps before this invocation (from the checkpoint it resumed).
    earlier: History,
    steps: Vec<u64>,
    losses: Vec<f64>,
    reference_losses: Vec<f64>,
    eval_losses: Vec<(u64, f64)>,
    step_ms: Vec<f64>,
    per_step: Vec<(f64, f64)>,
    checkpoints: Vec<PathBuf>,
    timings: Option<tessera_mpmd::runtime::Timings>,
    /// In a job, every step's timings of this rank's group, for rank 0 to merge.
    job_timings: Vec<tessera_mpmd::runtime::Timings>,
    /// The largest relative difference from the reference that passes.
    tolerance: f64,
    /// Where each step's time went.
    step_times: Vec<phases::StepTime>,
    /// Each step's whole iteration, evaluation and saving included.
    iteration_ms: Vec<f64>,
    /// The parameters' bytes per group and device after the last step.
    parameter_bytes: Option<serde_json::Value>,
    /// Each task name's times over the steps after the first (`F s0`, `B s1`, ...).
    task_ms: std::collections::BTreeMap<String, Vec<f64>>,
    /// What reading `--model-dir`'s weights cost this process.
    import: Option<hf_import::ImportStats>,
    /// Where `--export-hf` wrote the trained model.
    exported: Option<PathBuf>,
}

impl RunLog {
    /// The run's losses from step 1: those before this invocation, then its own.
    fn history(&self) -> History {
        let mut whole = self.earlier.clone();
        whole
            .losses
            .extend(self.steps.iter().copied().zip(self.losses.iter().copied()));
        whole.eval_losses.extend(self.eval_losses.iter().copied());
        whole
    }
}

/// Writes the loss curve of the whole run (from step 1, across resumes) to `--plot` or the
/// checkpoint directory; returns where.
fn write_plot(
    args: &Args,
    saver: Option<&checkpoints::Saver>,
    whole: &History,
) -> anyhow::Result<Option<PathBuf>> {
    let plot = args
        .plot
        .clone()
        .or_else(|| saver.map(|s| s.dir().join("loss.svg")));
    if let Some(path) = &plot {
        let title = format!(
            "tessera train --model {}",
            args.model.as_deref().unwrap_or("mlp")
        );
        tessera::plot::loss_curve_svg(path, &title, &whole.losses, &whole.eval_losses)?;
        outln!("loss curve: {}", path.display())?;
    }
    Ok(plot)
}

/// Prints the run's figures, writes the loss curve, and gives the exit status: success when
/// every pipelined step equals its unpipelined reference within 1e-4 and every group ran the
/// schedule's order.
fn finish(
    args: &Args,
    name: &str,
    client: &Client,
    model: &Model,
    jit: &tessera_mpmd::MpmdJit,
    log: RunLog,
    saver: Option<&checkpoints::Saver>,
) -> anyhow::Result<ExitCode> {
    let timings = log.timings.as_ref().context("no steps were run")?;
    let figures = match jit.is_fused() {
        true => report::one_program_figures(&log.step_ms)?,
        false => report::pipeline_figures(jit.pipeline(), timings, &log.per_step, args.stages)?,
    };
    let tokens_per_step = f64::from(args.batch) * model.tokens_per_example as f64;
    let tokens_per_second = tokens_per_step / (report::settled_median(&log.step_ms) / 1000.0);
    let throughput = report::throughput(
        client,
        tokens_per_second,
        (model.flops_per_token, model.flops_per_token_maxtext),
        model.compute_dtype,
    )?;
    let plot = write_plot(args, saver, &log.history())?;
    if let Some(path) = &args.trace {
        std::fs::write(path, timings.to_chrome_trace())
            .with_context(|| format!("writing {}", path.display()))?;
        outln!("trace: {}", path.display())?;
    }
    let max_diff = report::max_difference(&log.losses, &log.reference_losses);
    let median_step = phases::median_step(&log.step_times);
    if let Some(step) = &median_step {
        phases::print(step)?;
    }
    let compiles = report::compiles()?;
    let collectives = report::collectives(jit)?;
    let mut summary = serde_json::json!({
        "compiles": compiles,
        "model": name,
        "schedule": args.schedule,
        "stages": args.stages,
        "stage_layers": model.stage_layers,
        "microbatches": args.microbatches,
        "devices": args.devices,
        "parameters": model.param_count(),
        "first_step": log.steps.first(),
        "steps": log.steps,
        "losses": log.losses,
        "reference_losses": log.reference_losses,
        "eval_losses": log.eval_losses,
        "final_loss": log.losses.last(),
        "reference_loss": log.reference_losses.last(),
        "max_relative_difference": max_diff,
        "bubble_ratio_measured": figures.bubble_measured,
        "bubble_ratio_simulated": figures.bubble_simulated,
        "group_busy_ms": figures.group_busy_ms,
        "transfer_wait_ms": figures.transfer_wait_ms,
        "makespan_ms": figures.makespan_ms,
        "predicted_makespan_ms": figures.predicted_ms,
        "step_wall_ms": log.step_ms.last(),
        "iteration_ms": log.iteration_ms,
        "step_phases_ms": median_step.map(phases::StepTime::to_json),
        "task_ms": report::task_medians(&log.task_ms),
        "remat": report::remat(jit),
        "remat_offload": args.remat_offload,
        "grad_reduce": args.grad_reduce,
        "fsdp_gather": args.fsdp_gather,
        "collectives_per_step": collectives,
        "order_matches_schedule": figures.orders_match,
        "tokens_per_second": throughput.tokens_per_second,
        "model_flops_per_token": throughput.flops_per_token,
        "peak_flops_per_second": throughput.peak_flops_per_second,
        "peak_source": throughput.peak_source,
        "mfu": throughput.mfu,
        "checkpoints": log.checkpoints,
        "plot": plot,
        "memory": figures.memory,
        "history": log.history(),
    });
    summary["attention"] = model.attention.into();
    if let Some(fields) = summary.as_object_mut() {
        fields.insert("import".into(), serde_json::to_value(&log.import)?);
        fields.insert("mfu_maxtext".into(), throughput.mfu_maxtext.into());
        fields.insert("xla_profile".into(), args.xla_profile.clone().into());
        fields.insert("export_hf".into(), serde_json::to_value(&log.exported)?);
    }
    if let (Some(serde_json::Value::Object(bytes)), Some(fields)) =
        (&log.parameter_bytes, summary.as_object_mut())
    {
        fields.extend(bytes.clone());
        fields.insert("mesh".into(), args.mesh.clone().into());
        fields.insert("fsdp".into(), args.fsdp.into());
    }
    plan_use::report(args, &mut summary, report::settled_median(&log.step_ms))?;
    if args.json {
        outln!("{summary}")?;
    } else {
        let last = |v: &[f64]| v.last().map_or("-".into(), |l| format!("{l:.6}"));
        outln!(
            "final loss {} (unpipelined {}); largest relative difference over the steps {}",
            last(&log.losses),
            last(&log.reference_losses),
            max_diff.map_or("- (--no-reference)".into(), |d| format!("{d:.2e}"))
        )?;
    }
    report::verdict(max_diff, log.tolerance, figures.orders_match)
}
