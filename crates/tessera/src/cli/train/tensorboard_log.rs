//! `--tensorboard DIR`: the run's scalars as TensorBoard event files
//! ([`tessera_nn::tensorboard`]), one new file per invocation, so a resumed run adds its steps
//! beside the earlier ones and `tensorboard --logdir DIR` shows the whole run.
//!
//! Per step: `train/loss`, `train/learning_rate`, `train/tokens_per_second` and `train/step_ms`
//! (the pipelined call, as the progress bar and `--json` count them), and `eval/loss` at the
//! steps that compute it. At the invocation's last step, when the step ran the schedule's
//! pipeline tasks in one process, the measured peak bytes of each MPMD group
//! (`memory/group_N_peak_bytes`, `--json`'s `memory.groups[N].peak_live_bytes`). Under MPI only
//! rank 0 writes: the eval loss (computed through the pipeline) but no per-group memory, which
//! it does not see.

use anyhow::Context;
use tessera_mpmd::MpmdJit;
use tessera_nn::tensorboard::EventWriter;

use super::{Args, RunLog};

/// Checks, before any training, that `--tensorboard DIR` can hold event files: makes DIR if
/// missing and creates and removes a probe file in it. Only the rank that writes checks.
pub(super) fn check(args: &Args, writes: bool) -> anyhow::Result<()> {
    let Some(dir) = args.tensorboard.as_deref().filter(|_| writes) else {
        return Ok(());
    };
    let refuse = |err: std::io::Error| {
        anyhow::anyhow!(
            "--tensorboard {}: cannot write event files there ({err}); pass a writable directory",
            dir.display()
        )
    };
    std::fs::create_dir_all(dir).map_err(refuse)?;
    let probe = dir.join(format!(".tessera-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(refuse)?;
    std::fs::remove_file(&probe)
        .with_context(|| format!("--tensorboard: removing the probe {}", probe.display()))
}

/// The event file of this invocation, or nothing without `--tensorboard` (or off rank 0).
pub(super) struct Board {
    writer: Option<EventWriter>,
    /// Whether the run is one rank of an MPI job (no per-group memory).
    in_job: bool,
}

impl Board {
    /// Starts this invocation's event file in `--tensorboard DIR` when `writes` (rank 0).
    pub(super) fn open(args: &Args, writes: bool, in_job: bool) -> anyhow::Result<Board> {
        let writer = match (&args.tensorboard, writes) {
            (Some(dir), true) => {
                let writer = EventWriter::create(dir)?;
                crate::cli::out::outln!("tensorboard: {}", writer.path().display())?;
                Some(writer)
            }
            _ => None,
        };
        Ok(Board { writer, in_job })
    }

    /// Writes the scalars of the step `log` recorded last and flushes them, so a crash loses
    /// at most this step; at the invocation's `last` step also the peak bytes per group of the
    /// pipeline's last run.
    pub(super) fn step(
        &mut self,
        log: &RunLog,
        jit: &MpmdJit,
        last: bool,
        lr: f64,
        tokens_per_step: u64,
    ) -> anyhow::Result<()> {
        let Some(writer) = &mut self.writer else {
            return Ok(());
        };
        let (Some(&step), Some(&loss), Some(&step_ms)) =
            (log.steps.last(), log.losses.last(), log.step_ms.last())
        else {
            return Ok(());
        };
        let mut scalars: Vec<(String, f32)> = vec![
            ("train/loss".into(), loss as f32),
            ("train/learning_rate".into(), lr as f32),
            (
                "train/tokens_per_second".into(),
                (tokens_per_step as f64 / (step_ms / 1000.0)) as f32,
            ),
            ("train/step_ms".into(), step_ms as f32),
        ];
        if let Some(&(_, eval)) = log.eval_losses.last().filter(|(s, _)| *s == step) {
            scalars.push(("eval/loss".into(), eval as f32));
        }
        if let (true, false, false, Some(timings)) =
            (last, self.in_job, jit.is_fused(), &log.timings)
        {
            let memory = jit.pipeline().memory_report(timings);
            for (group, bytes) in memory.peak_live_bytes.iter().enumerate() {
                scalars.push((format!("memory/group_{group}_peak_bytes"), *bytes as f32));
            }
        }
        let scalars: Vec<(&str, f32)> = scalars.iter().map(|(t, v)| (t.as_str(), *v)).collect();
        writer.add_scalars(step, &scalars)?;
        writer.flush()?;
        Ok(())
    }
}
