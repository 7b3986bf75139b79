//! Saving a step's state from where it lives: each process writes the blocks its devices hold
//! (each distinct block once, by the first MPMD group holding the array), and rank 0 commits the
//! checkpoint once every rank's part is written (`tessera_nn::checkpoint::writer`'s protocol).
//! A save can run in the background: the blocks are copied to the host, then written on a
//! thread while training goes on; the next save (or the end of the run) waits for it.
//!
//! `TESSERA_CHECKPOINT_FAULT=kill@RANK:STEP` makes rank RANK kill itself with SIGKILL after
//! writing its part of step STEP's checkpoint, before the commit: the fault tests use it.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use anyhow::{Context, bail};
use tessera_ir::Array;
use tessera_mpmd::StepResult;
use tessera_mpmd::mpi_job::MpiJob;
use tessera_nn::checkpoint::{self, Index, Manifest, Part, Piece};

/// The environment variable that injects a fault into a save (see the module docs).
pub const CHECKPOINT_FAULT_ENV: &str = "TESSERA_CHECKPOINT_FAULT";

/// The tree and path of each carried value of the step (parameters, then optimizer state).
pub type Names = [(Part, String)];

/// The blocks of the step's carried results that this process writes. A value on the host is
/// written by rank 0; a value on MPMD groups by the process holding the first of its groups,
/// one block per distinct shard of that group's array (never gathered whole).
pub fn pieces(
    outputs: &[StepResult],
    names: &Names,
    like: &[Array],
    root: bool,
) -> anyhow::Result<Vec<Piece>> {
    // Every shard's copy to the host starts before any is waited for: one wait for all of
    // them instead of a round trip per tensor.
    let mut started = Vec::new();
    let mut pieces = Vec::new();
    for ((output, (part, path)), a) in outputs.iter().zip(names).zip(like) {
        match output {
            StepResult::Host(host) if root => pieces.push(Piece::whole(
                *part,
                path.clone(),
                tessera::jit::from_host(host, a.dtype())?,
            )),
            StepResult::Host(_) => {}
            StepResult::Mpmd(m) => {
                let first = m.mpmd_idxs().into_iter().min();
                let local = m.to_mpmd_local_arrays()?;
                let Some(array) = first.and_then(|g| local.get(&g)) else {
                    continue; // another process holds it
                };
                let mut seen = HashSet::new();
                for shard in array.addressable_shards()? {
                    if !seen.insert(shard.block.clone()) {
                        continue; // a replica of a block already written
                    }
                    let start = shard.block.iter().map(|(start, _)| *start).collect();
                    let place = (*part, path.clone(), m.shape().to_vec(), start);
                    started.push((place, shard.buffer.to_host_started()?, a.dtype()));
                }
            }
        }
    }
    for ((part, path, global_shape, start), copy, dtype) in started {
        let host = copy.wait()?;
        // The host copy is the snapshot itself where the dtypes agree (no second copy).
        let data = match host.dtype() == dtype {
            true => host,
            false => tessera::jit::from_host(&host, dtype)?,
        };
        pieces.push(Piece {
            part,
            path,
            global_shape,
            start,
            data,
        });
    }
    Ok(pieces)
}

/// What a writer's thread produced: its part's index, or (the only writer) the committed folder.
enum Written {
    Part(Index),
    Committed(PathBuf),
}

/// A save whose blocks are being written on a thread.
pub struct Pending {
    manifest: Manifest,
    thread: JoinHandle<anyhow::Result<Written>>,
}

/// Where this process stands in the job: (its rank, the number of ranks).
fn writer_of(job: Option<&MpiJob>) -> (usize, usize) {
    job.map_or((0, 1), |j| (j.rank(), j.size()))
}

/// Writer 0 removes the torn checkpoints of ended runs while the others wait.
fn prepare(dir: &Path, job: Option<&MpiJob>) -> anyhow::Result<()> {
    let prepared = match writer_of(job).0 {
        0 => checkpoint::prepare(dir).map_err(anyhow::Error::from),
        _ => Ok(()),
    };
    let all = match job {
        Some(j) => j.all(prepared.is_ok())?,
        None => true,
    };
    prepared?;
    if !all {
        bail!(
            "rank 0 could not prepare the checkpoint directory {}",
            dir.display()
        );
    }
    Ok(())
}

/// Writes this process's blocks and, outside a job (`alone`), commits them.
fn write(
    dir: &Path,
    manifest: &Manifest,
    (writer, writers): (usize, usize),
    alone: bool,
    pieces: &[Piece],
) -> anyhow::Result<Written> {
    let index = checkpoint::write_part(dir, manifest.step, writer, writers, pieces)?;
    injected_fault(writer, manifest.step);
    match alone {
        true => Ok(Written::Committed(checkpoint::commit(
            dir, manifest, index,
        )?)),
        false => Ok(Written::Part(index)),
    }
}

/// Kills this process where `TESSERA_CHECKPOINT_FAULT` asks for it.
fn injected_fault(writer: usize, step: u64) {
    let Ok(fault) = std::env::var(CHECKPOINT_FAULT_ENV) else {
        return;
    };
    let wanted = fault
        .strip_prefix("kill@")
        .and_then(|at| at.split_once(':'))
        .and_then(|(r, s)| Some((r.parse::<usize>().ok()?, s.parse::<u64>().ok()?)));
    if wanted == Some((writer, step)) {
        let pid = std::process::id().to_string();
        eprintln!(
            "injected fault ({CHECKPOINT_FAULT_ENV}): killing process {pid} with SIGKILL while \
             saving step {step}"
        );
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid])
            .status();
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

/// Joins the ranks' parts on rank 0 and commits there; every rank learns whether it worked.
/// Returns the committed folder on rank 0.
fn commit_parts(
    dir: &Path,
    manifest: &Manifest,
    job: Option<&MpiJob>,
    written: anyhow::Result<Written>,
) -> anyhow::Result<Option<PathBuf>> {
    let Some(job) = job else {
        return match written? {
            Written::Committed(folder) => Ok(Some(folder)),
            Written::Part(index) => Ok(Some(checkpoint::commit(dir, manifest, index)?)),
        };
    };
    let mine: Result<Index, String> = match written {
        Ok(Written::Part(index)) => Ok(index),
        Ok(Written::Committed(_)) => Err("committed alone in a job".into()),
        Err(e) => Err(format!("{e:#}")),
    };
    let bytes = serde_json::to_vec(&mine).context("encoding this rank's part")?;
    let committed = job
        .gather_to_root(&bytes)?
        .map(|parts| join_and_commit(dir, manifest, &parts))
        .transpose();
    let ok = job.all(committed.is_ok())?;
    let folder = committed?;
    if !ok {
        bail!(
            "the checkpoint of step {} was not committed: another rank failed to write or \
             commit it (its error is in that rank's output)",
            manifest.step
        );
    }
    Ok(folder)
}

fn join_and_commit(dir: &Path, manifest: &Manifest, parts: &[Vec<u8>]) -> anyhow::Result<PathBuf> {
    let mut whole = Index::default();
    for (rank, bytes) in parts.iter().enumerate() {
        let part: Result<Index, String> =
            serde_json::from_slice(bytes).with_context(|| format!("reading rank {rank}'s part"))?;
        let part = part.map_err(|e| {
            anyhow::anyhow!("rank {rank} could not write its part of the checkpoint: {e}")
        })?;
        whole.merge(part)?;
    }
    Ok(checkpoint::commit(dir, manifest, whole)?)
}

/// Saves now: prepares, writes this process's blocks, commits. Returns the folder on rank 0.
pub fn save_now(
    dir: &Path,
    manifest: &Manifest,
    job: Option<&MpiJob>,
    pieces: &[Piece],
) -> anyhow::Result<Option<PathBuf>> {
    prepare(dir, job)?;
    let written = write(dir, manifest, writer_of(job), job.is_none(), pieces);
    commit_parts(dir, manifest, job, written)
}

/// Starts a save in the background: prepares, then writes the blocks (already on the host) on a
/// thread. [`finish`] waits for it and commits.
pub fn start(
    dir: &Path,
    manifest: Manifest,
    job: Option<&MpiJob>,
    pieces: Vec<Piece>,
) -> anyhow::Result<Pending> {
    prepare(dir, job)?;
    let (dir, writer, m) = (dir.to_path_buf(), writer_of(job), manifest.clone());
    let alone = job.is_none();
    let thread = std::thread::Builder::new()
        .name(format!("checkpoint-{}", manifest.step))
        .spawn(move || {
            // On a CPU plugin the devices are this machine's cores: write on idle ones only.
            tessera_pjrt::background::yield_cores_to_devices();
            write(&dir, &m, writer, alone, &pieces)
        })
        .context("starting the checkpoint writer thread")?;
    Ok(Pending { manifest, thread })
}

/// Waits for a background save and commits it. Returns the folder on rank 0.
pub fn finish(
    dir: &Path,
    job: Option<&MpiJob>,
    pending: Pending,
) -> anyhow::Result<Option<PathBuf>> {
    let written = pending
        .thread
        .join()
        .map_err(|_| anyhow::anyhow!("the checkpoint writer thread panicked"))
        .and_then(|r| r);
    commit_parts(dir, &pending.manifest, job, written)
}
