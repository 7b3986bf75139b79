//! `tessera train` as an MPI job: launched by `mpirun -n G` (or `srun`), each rank runs MPMD
//! group `rank` on its own PJRT client with `--devices / G` devices; rank 0 runs the unpipelined
//! reference and prints. Without an MPI launcher the command runs in one process, as before.
//!
//! An error on any rank is printed by that rank and ends the whole job with `MPI_Abort`, never
//! by unwinding into `MPI_Finalize` (a collective that passed its deadline,
//! `TESSERA_MPI_TIMEOUT_S`, is such an error on the ranks that waited for it); a disagreement
//! found at the rendezvous, which every rank finds at the same collective, is printed by rank 0
//! and every rank exits with a failure.

use super::out::outln;
use std::io::Write;

use sha2::Digest;
use std::process::ExitCode;

use anyhow::{Context, bail};
use tessera_ir::Array;
use tessera_mpmd::driver::DriverError;
use tessera_mpmd::mpi_job::MpiJob;
use tessera_mpmd::processes::{ProcessError, Processes};
use tessera_mpmd::runtime::Timings;
use tessera_mpmd::{MpmdMesh, StepResult};
use tessera_pjrt::Client;
use tessera_sharding::Mesh;

/// Runs `body` as this process's share of the job (or alone, outside a job).
pub fn run_job<A>(
    args: A,
    plugin: Option<&str>,
    body: impl FnOnce(A, Option<&str>, Option<&MpiJob>) -> anyhow::Result<ExitCode>,
) -> anyhow::Result<ExitCode> {
    let Some(job) = MpiJob::init()? else {
        return body(args, plugin, None);
    };
    match body(args, plugin, Some(&job)) {
        Ok(code) => Ok(code),
        Err(err) => {
            let collective = matches!(
                err.downcast_ref::<DriverError>(),
                Some(DriverError::Processes(
                    ProcessError::Mismatch(_) | ProcessError::CallsDiffer { .. }
                ))
            );
            if !collective || job.rank() == 0 {
                // One write of the whole line: stderr is unbuffered, and a formatted print
                // writes it in pieces that other ranks' lines interleave with under mpirun.
                let line = format!(
                    "error (rank {} of {}): {}\n",
                    job.rank(),
                    job.size(),
                    message(&err)
                );
                let _ = std::io::stderr().write_all(line.as_bytes());
                let _ = std::io::stderr().flush();
            }
            if !collective {
                // After a deadline every rank says what it waits for: the one that gave up
                // waits a moment for the others it told, and they a moment longer, so that
                // no MPI_Abort ends a rank before it has spoken.
                if let Some(grace) = grace_before_abort(&err) {
                    std::thread::sleep(grace);
                }
                job.abort(1)
            }
            // Every rank found it at the same collective: all end cleanly, with a failure.
            drop(job);
            Ok(ExitCode::FAILURE)
        }
    }
}

/// How long a rank whose pipeline wait passed its deadline (it told the others), or that was
/// told so, waits before it aborts the job.
fn grace_before_abort(err: &anyhow::Error) -> Option<std::time::Duration> {
    use tessera_mpmd::runtime::RunError;
    // A run's error, alone or inside the driver's (whose `Run` is transparent: not a link of
    // the chain of its own).
    fn run_error<'a>(cause: &'a (dyn std::error::Error + 'static)) -> Option<&'a RunError> {
        match cause.downcast_ref::<DriverError>() {
            Some(DriverError::Run(run)) => Some(run),
            _ => cause.downcast_ref::<RunError>(),
        }
    }
    err.chain().find_map(|cause| match run_error(cause) {
        Some(RunError::Timeout { .. }) => Some(std::time::Duration::from_secs(5)),
        Some(RunError::PeerGaveUp { .. }) => Some(std::time::Duration::from_secs(8)),
        _ => None,
    })
}

/// The error and its causes on one line, leaving out a cause its parent already quotes.
fn message(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&cause);
        }
    }
    text
}

/// The field of a rank's gathered options that says why it could not read `--data`.
const DATA_ERROR: &str = "data_error";

/// Refuses a job whose ranks were started with different options or data: every option of
/// `args` but those that only name output files, and the SHA-256 of the `--data` file (not its
/// path), are
/// gathered on rank 0, which names the first rank and option that differ from its own. A
/// collective: every rank calls it.
pub fn check_same_config(job: &MpiJob, args: &super::train::Args) -> anyhow::Result<()> {
    let mut config = serde_json::to_value(args)?;
    if let Some(fields) = config.as_object_mut() {
        // Output files only matter on rank 0; the data file may lie elsewhere on each host,
        // so its bytes are compared instead of its path.
        for field in ["trace", "plot", "tensorboard", "json", "data"] {
            fields.remove(field);
        }
        // A --data file a rank cannot read is said after the gather (every rank must take
        // part in it), naming the rank, not hashed as "no data" on every rank alike.
        let (data_sha256, data_error) = match args.data.as_deref().map(std::fs::read) {
            None => (None, None),
            Some(Ok(bytes)) => (Some(format!("{:x}", sha2::Sha256::digest(&bytes))), None),
            Some(Err(e)) => (None, Some(e.to_string())),
        };
        fields.insert("data_sha256".into(), data_sha256.into());
        fields.insert(DATA_ERROR.into(), data_error.into());
    }
    let unreadable = |rank: usize, config: &serde_json::Value| -> anyhow::Result<()> {
        match config.get(DATA_ERROR).and_then(|e| e.as_str()) {
            Some(error) => bail!(
                "rank {rank} cannot read the --data file {}: {error}; give every rank a path to \
                 the same file that it can read",
                args.data
                    .as_deref()
                    .map_or("?".into(), |p| p.display().to_string())
            ),
            None => Ok(()),
        }
    };
    let Some(parts) = job.gather_to_root(&serde_json::to_vec(&config)?)? else {
        return unreadable(job.rank(), &config);
    };
    let ranks = parts
        .iter()
        .map(|p| serde_json::from_slice::<serde_json::Value>(p))
        .collect::<Result<Vec<_>, _>>()
        .context("a rank's options did not decode")?;
    for (rank, other) in ranks.iter().enumerate() {
        unreadable(rank, other)?;
    }
    let empty = serde_json::Map::new();
    let root = config.as_object().unwrap_or(&empty);
    for (rank, other) in ranks.iter().enumerate().skip(1) {
        let other = other.as_object().unwrap_or(&empty);
        let differs = root
            .keys()
            .chain(other.keys())
            .find(|key| root.get(*key) != other.get(*key));
        if let Some(key) = differs {
            let shown =
                |v: Option<&serde_json::Value>| v.map_or("nothing".into(), |v| v.to_string());
            let option = match key.as_str() {
                "data_sha256" => "the --data file's SHA-256".to_owned(),
                name => format!("--{}", name.replace('_', "-")),
            };
            bail!(
                "the ranks were started with different options: rank {rank} has {option} = {} \
                 but rank 0 has {}; give every rank of the job the same options and the same data",
                shown(other.get(key)),
                shown(root.get(key))
            );
        }
    }
    Ok(())
}

/// Whether this process prints and runs the reference (rank 0, or the only process).
pub fn is_root(job: Option<&MpiJob>) -> bool {
    job.is_none_or(|j| j.rank() == 0)
}

/// The client and the MPMD mesh (the whole mesh `shape`, split along `mpmd_axis`) of this
/// process: all devices in one process; in a job of one rank per group, the rank's group's.
pub fn open(
    job: Option<&MpiJob>,
    plugin: Option<&str>,
    shape: &Mesh,
    mpmd_axis: &str,
) -> anyhow::Result<(Client, MpmdMesh)> {
    let devices = shape.device_ids().len() as u32;
    let mpmd_dim = shape.abstract_mesh().axis_size(mpmd_axis).unwrap_or(1) as u32;
    let group = devices / mpmd_dim.max(1);
    let (client, mesh, wanted) = match job {
        None => {
            let client = Client::open(plugin, i64::from(devices))?;
            (client, MpmdMesh::new(shape.clone(), mpmd_axis)?, devices)
        }
        Some(job) => {
            if job.size() != mpmd_dim as usize {
                bail!(
                    "the step has {mpmd_dim} MPMD groups (--mpmd-dim, or --stages) but the job has {} ranks; launch one rank per group (mpirun -n {mpmd_dim})",
                    job.size()
                );
            }
            if shape.abstract_mesh().axis_index(mpmd_axis) != Some(0) {
                bail!(
                    "under MPI the MPMD axis '{mpmd_axis}' must be the first axis of --mesh (each rank's group is then a block of consecutive devices); move it to the front"
                );
            }
            let client = Client::open(plugin, i64::from(group))?;
            let mesh = MpmdMesh::for_process(shape, mpmd_axis, job.rank())?;
            (client, mesh, group)
        }
    };
    let available = client.addressable_devices()?.len();
    if available != wanted as usize {
        bail!(
            "--devices {devices} needs {wanted} devices in this process but the {} client has {available}; pass --devices {}",
            client.platform_name()?,
            available * (devices / wanted) as usize
        );
    }
    Ok((client, mesh))
}

/// The step's processes in a job (`None` alone).
pub fn processes(
    job: Option<&MpiJob>,
    client: &Client,
    mesh: &MpmdMesh,
) -> anyhow::Result<Option<std::sync::Arc<dyn Processes>>> {
    Ok(job.map(|j| j.processes(client, mesh)).transpose()?)
}

/// What a rank reports at the end of a run in a job.
pub struct Finish<'a> {
    /// What reading `--model-dir`'s weights cost this rank.
    pub import: Option<&'a super::train::ImportStats>,
    pub model: &'a str,
    pub schedule: &'a str,
    pub stages: u32,
    pub microbatches: u32,
    pub devices: u32,
    pub json: bool,
    pub losses: &'a [f64],
    pub reference_losses: &'a [f64],
    /// The step numbers of `losses` (a resumed run starts past 1).
    pub steps: &'a [u64],
    /// The whole run's losses from step 1, across resumes.
    pub history: &'a tessera_nn::checkpoint::History,
    /// The checkpoints this invocation committed (on rank 0).
    pub checkpoints: &'a [std::path::PathBuf],
    /// Where the loss curve was written.
    pub plot: Option<&'a std::path::Path>,
    /// The eval losses (`--eval-every`), by step.
    pub eval_losses: &'a [(u64, f64)],
    /// Every step's timings of this rank's group.
    pub timings: &'a [Timings],
    pub pipeline: &'a tessera_mpmd::driver::CompiledPipeline,
    /// Where to write the job's Chrome trace (every rank's tasks on one timeline).
    pub trace: Option<&'a std::path::Path>,
    /// Each step's wall time on this rank (a step ends on every rank with the losses' broadcast).
    pub step_ms: &'a [f64],
    /// The largest relative difference from the reference that passes.
    pub tolerance: f64,
}

/// Ends a run in a job: every rank sends every step's timings of its group to rank 0, which
/// puts each step's on one timeline (the ranks' clocks are one host's) and prints what a
/// one-process run prints (the makespan against the simulator over the settled steps, the rest
/// from the last step): the task table, bubble ratio, makespan against the simulator, memory per group,
/// the trace (`--trace`), and the losses next to the reference's (with `--json`, the summary as
/// its last line).
pub fn finish(job: &MpiJob, f: &Finish) -> anyhow::Result<ExitCode> {
    let mine = serde_json::to_vec(&(f.timings, f.import))?;
    let Some(parts) = job.gather_to_root(&mine)? else {
        return Ok(ExitCode::SUCCESS);
    };
    type RankReport = (Vec<Timings>, Option<super::train::ImportStats>);
    let (parts, imports): (Vec<_>, Vec<_>) = parts
        .iter()
        .map(|p| serde_json::from_slice::<RankReport>(p))
        .collect::<Result<Vec<_>, _>>()
        .context("a rank's timings did not decode")?
        .into_iter()
        .unzip();
    let steps = parts.iter().map(Vec::len).min().unwrap_or(0);
    let merged: Vec<Timings> = (0..steps)
        .map(|i| Timings::merged(parts.iter().map(|p| p[i].clone()).collect()))
        .collect();
    let timings = merged.last().context("no steps were run")?;
    let plan = f.pipeline.schedule_plan();
    let per_step: Vec<(f64, f64)> = merged
        .iter()
        .map(|t| super::timing::calibrate(t, plan))
        .collect();
    let figures = super::train::report::pipeline_figures(f.pipeline, timings, &per_step, f.stages)?;
    let orders_match = figures.orders_match;
    if let Some(path) = f.trace {
        std::fs::write(path, timings.to_chrome_trace())
            .with_context(|| format!("writing {}", path.display()))?;
        outln!("trace: {}", path.display())?;
    }
    let max_diff = super::train::report::max_difference(f.losses, f.reference_losses);
    let wall_ms = f.step_ms.last().copied().unwrap_or(f64::NAN);
    outln!("step wall time (last step, rank 0, update included): {wall_ms:.3} ms")?;
    if f.json {
        let summary = serde_json::json!({
            "model": f.model,
            "schedule": f.schedule,
            "stages": f.stages,
            "microbatches": f.microbatches,
            "devices": f.devices,
            "processes": job.size(),
            "first_step": f.steps.first(),
            "steps": f.steps,
            "losses": f.losses,
            "reference_losses": f.reference_losses,
            "history": f.history,
            "checkpoints": f.checkpoints,
            "plot": f.plot,
            "eval_losses": f.eval_losses,
            "final_loss": f.losses.last(),
            "reference_loss": f.reference_losses.last(),
            "max_relative_difference": max_diff,
            "order_matches_schedule": orders_match,
            "step_wall_ms": wall_ms,
            "bubble_ratio_measured": figures.bubble_measured,
            "bubble_ratio_simulated": figures.bubble_simulated,
            "makespan_ms": figures.makespan_ms,
            "predicted_makespan_ms": figures.predicted_ms,
            "memory": figures.memory,
            "import_per_rank": imports,
        });
        outln!("{summary}")?;
    } else {
        let last = |v: &[f64]| v.last().map_or("-".into(), |l| format!("{l:.6}"));
        outln!(
            "final loss {} (unpipelined {}); largest relative difference over the steps {}",
            last(f.losses),
            last(f.reference_losses),
            max_diff.map_or("- (--no-reference)".into(), |d| format!("{d:.2e}"))
        )?;
    }
    super::train::report::verdict(max_diff, f.tolerance, orders_match)
}

/// The carried values (parameters, then optimizer state) of a step's results, gathered on rank
/// 0 from the ranks holding them (`None` on the other ranks); a collective: every rank calls it.
/// `like` gives each value's dtype and shape.
pub fn gather_carried(
    job: &MpiJob,
    outputs: &[StepResult],
    like: &[Array],
) -> anyhow::Result<Option<Vec<Array>>> {
    let mut mine = Vec::new();
    for (index, output) in outputs.iter().enumerate().take(like.len()) {
        let host = match output {
            StepResult::Host(h) => Some(h.clone()),
            StepResult::Mpmd(m) => m.to_mpmd_local_array()?.map(|a| a.to_host()).transpose()?,
        };
        if let Some(host) = host {
            let bytes = host.to_le_bytes();
            mine.extend_from_slice(&(index as u64).to_le_bytes());
            mine.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            mine.extend_from_slice(&bytes);
        }
    }
    let Some(parts) = job.gather_to_root(&mine)? else {
        return Ok(None);
    };
    let mut found: Vec<Option<Array>> = vec![None; like.len()];
    for part in &parts {
        let mut at = 0;
        while at + 16 <= part.len() {
            let word =
                |i: usize| u64::from_le_bytes(part[i..i + 8].try_into().unwrap_or([0; 8])) as usize;
            let (index, len) = (word(at), word(at + 8));
            let bytes = part
                .get(at + 16..at + 16 + len)
                .context("a rank's parameters arrived cut short")?;
            at += 16 + len;
            let (Some(slot), Some(a)) = (found.get_mut(index), like.get(index)) else {
                bail!("a rank sent a parameter of index {index}, past the step's results");
            };
            if slot.is_none() {
                let (element, dims) = tessera_pjrt::device_layout(a);
                let host = Array::from_le_bytes(element.dtype(), &dims, bytes.to_vec())?;
                *slot = Some(tessera::jit::from_host(&host, a.dtype())?);
            }
        }
    }
    found
        .into_iter()
        .enumerate()
        .map(|(i, a)| a.with_context(|| format!("no rank holds result {i} of the step")))
        .collect::<anyhow::Result<Vec<_>>>()
        .map(Some)
}
