//! Saving and resuming a run: the checkpoint directory is checked before any training, a
//! resumed run must be of the same model, and checkpoints are written atomically by
//! `tessera_nn::checkpoint`, each process writing the blocks it holds ([`super::save_parts`]),
//! now or in the background.

use std::path::{Path, PathBuf};

use anyhow::bail;
use tessera_ir::ShapedArray;
use tessera_mpmd::mpi_job::MpiJob;
use tessera_nn::Tree;
use tessera_nn::checkpoint::{self, Manifest, Piece};

use super::save_parts::{self, Pending};

/// Where a run saves its checkpoints, and how often.
pub struct Saver {
    dir: PathBuf,
    every: Option<u64>,
    /// Held by rank 0 (the only process of a one-process run) for the whole run: a second run
    /// on the same directory is refused.
    _lock: Option<checkpoint::DirLock>,
    /// Whether saves are written on a background thread.
    background: bool,
    /// The background save still being written.
    pending: Option<Pending>,
}

impl Saver {
    /// Checks that `dir` is a directory Tessera can write (creating it if needed) before any
    /// training starts, so a run never trains for an hour and then fails to save.
    /// Rank 0 (`lock`) takes the directory's lock; `background` writes saves on a thread.
    pub fn new(
        dir: &Path,
        every: Option<u64>,
        lock: bool,
        background: bool,
    ) -> anyhow::Result<Saver> {
        if every == Some(0) {
            bail!("--checkpoint-every 0: save every N steps with N at least 1");
        }
        let probe = dir.join(format!(".tessera-write-test-{}", std::process::id()));
        let writable = std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&probe, b"probe"))
            .and_then(|()| std::fs::remove_file(&probe));
        if let Err(err) = writable {
            bail!(
                "cannot write checkpoints to {}: {err}. Fix: pass a --checkpoint-dir that is a \
                 writable directory (or can be created)",
                dir.display()
            );
        }
        let lock = lock
            .then(|| checkpoint::DirLock::acquire(dir))
            .transpose()?;
        Ok(Saver {
            dir: dir.to_path_buf(),
            every,
            _lock: lock,
            background,
            pending: None,
        })
    }

    /// Refuses to start a new run in a directory that holds another run's checkpoints, which
    /// the new run would overwrite step by step.
    pub fn refuse_earlier_run(&self) -> anyhow::Result<()> {
        if let Some(newest) = checkpoint::latest(&self.dir)? {
            bail!(
                "--checkpoint-dir {} already holds checkpoints (the newest is {}), which a new run \
                 would overwrite. Fix: pass --resume {} to continue that run, or pick an empty \
                 directory",
                self.dir.display(),
                newest.display(),
                self.dir.display()
            );
        }
        Ok(())
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether to save after step `step` (counted from 1) of an invocation that stops after step
    /// `last`.
    pub fn due(&self, step: u64, last: u64) -> bool {
        step == last || self.every.is_some_and(|n| step.is_multiple_of(n))
    }

    /// Saves this process's blocks of a checkpoint (every process of a job calls it). Returns
    /// the checkpoints committed by this call (on rank 0): this one, or, in the background, the
    /// previous one, which it waits for first.
    pub fn save(
        &mut self,
        job: Option<&MpiJob>,
        manifest: Manifest,
        pieces: Vec<Piece>,
    ) -> anyhow::Result<Vec<PathBuf>> {
        let mut committed = self.finish(job)?;
        match self.background {
            false => committed.extend(save_parts::save_now(&self.dir, &manifest, job, &pieces)?),
            true => self.pending = Some(save_parts::start(&self.dir, manifest, job, pieces)?),
        }
        Ok(committed)
    }

    /// Waits for the background save, if one is being written, and commits it.
    pub fn finish(&mut self, job: Option<&MpiJob>) -> anyhow::Result<Vec<PathBuf>> {
        match self.pending.take() {
            None => Ok(Vec::new()),
            Some(pending) => Ok(save_parts::finish(&self.dir, job, pending)?
                .into_iter()
                .collect()),
        }
    }
}

/// Loads the newest checkpoint of `dir` for a run of `model` (its description), checking that
/// it holds that model: an empty directory, another model, or a tensor of another shape or
/// dtype is an error that names it. Only the tensors `wanted` names are read.
pub fn resume(
    dir: &Path,
    model: &str,
    params: &Tree<ShapedArray>,
    state: &Tree<ShapedArray>,
    wanted: &dyn Fn(checkpoint::Part, &str) -> bool,
) -> anyhow::Result<checkpoint::PartialCheckpoint> {
    let Some(folder) = checkpoint::latest(dir)? else {
        bail!(
            "--resume {}: there is no checkpoint there (no step-NNNNNNNN folder with a \
             manifest). Fix: train with --checkpoint-dir {} first, or drop --resume",
            dir.display(),
            dir.display()
        );
    };
    let manifest = checkpoint::read_manifest(&folder)
        .map_err(|err| anyhow::anyhow!("--resume {}: {err}", dir.display()))?;
    if manifest.model != model {
        bail!(
            "--resume {}: the checkpoint {} holds a run of `{}`, but this run is `{model}`. \
             Fix: resume with the same model, sizes and optimizer, or use another directory",
            dir.display(),
            folder.display(),
            manifest.model
        );
    }
    checkpoint::load_where(&folder, params, state, wanted).map_err(|err| {
        anyhow::anyhow!(
            "--resume {}: the checkpoint {} cannot be resumed: {err}",
            dir.display(),
            folder.display()
        )
    })
}
