//! `tessera launch -n N [--max-restarts R] -- train ...`: starts a `tessera` command as an MPI
//! job of N ranks, and restarts it when it fails (a rank died, a wait passed `--timeout`), from
//! the newest complete checkpoint of its `--checkpoint-dir` (or `--resume`), at most R times,
//! saying each restart on standard error. A resumed run continues bit for bit, so the restarted
//! job's final losses are an uninterrupted run's.
//!
//! The job is started with `srun -n N` inside a Slurm allocation (`SLURM_JOB_ID` set), else with
//! `mpirun -n N` (Open MPI's `--oversubscribe` and, as root, `--allow-run-as-root` added);
//! `--launcher` chooses. The `srun` form follows Slurm's documentation and has not been run here
//! (no Slurm is installed where Tessera is tested).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};

/// `tessera launch`'s arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The number of ranks (processes) of the job.
    #[arg(short = 'n', long = "ranks", value_name = "N")]
    pub ranks: u32,
    /// How many times a failed job is restarted from its newest complete checkpoint.
    #[arg(long, default_value_t = 3, value_name = "R")]
    pub max_restarts: u32,
    /// The MPI launcher: `auto` (srun inside a Slurm allocation, else mpirun), `mpirun` or
    /// `srun`.
    #[arg(long, default_value = "auto")]
    pub launcher: String,
    /// The `tessera` command each rank runs (after `--`), e.g. `train --model gpt ...
    /// --checkpoint-dir ckpt`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Runs the job, restarting it as the arguments allow; the last attempt's exit status.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.ranks == 0 {
        bail!("-n 0: a job has at least one rank");
    }
    let launcher = Launcher::choose(&args.launcher)?;
    let checkpoints = checkpoint_dir(&args.command)?;
    let program = std::env::current_exe().context("finding the tessera program")?;
    let mut command = args.command.clone();
    for attempt in 0..=args.max_restarts {
        let status = launcher
            .command(args.ranks, &program, &command)
            .status()
            .with_context(|| format!("starting {}", launcher.name()))?;
        if status.success() {
            return Ok(ExitCode::SUCCESS);
        }
        if attempt == args.max_restarts {
            eprintln!(
                "tessera launch: the job failed ({status}) and has been restarted {} times, \
                 the most --max-restarts allows; giving up",
                args.max_restarts
            );
            return Ok(ExitCode::FAILURE);
        }
        let Some(dir) = &checkpoints else {
            bail!(
                "the job failed ({status}) and cannot be restarted: the command has no \
                 --checkpoint-dir (or --resume) to restart from; add one"
            );
        };
        command = restart_command(&args.command, dir)?;
        let from = match tessera_nn::checkpoint::latest(dir)? {
            Some(folder) => format!("from checkpoint {}", folder.display()),
            None => "from the start (no complete checkpoint yet)".to_owned(),
        };
        eprintln!(
            "tessera launch: the job failed ({status}); restart {} of {} {from}",
            attempt + 1,
            args.max_restarts
        );
    }
    Ok(ExitCode::FAILURE)
}

/// The checkpoint directory of a `train` command: its `--checkpoint-dir`, else its `--resume`.
fn checkpoint_dir(command: &[String]) -> anyhow::Result<Option<PathBuf>> {
    if command.first().map(String::as_str) != Some("train") {
        bail!(
            "tessera launch runs `train` (restarted from its checkpoints); got {:?}",
            command.first().map_or("nothing", String::as_str)
        );
    }
    Ok(flag_value(command, "--checkpoint-dir")
        .or_else(|| flag_value(command, "--resume"))
        .map(PathBuf::from))
}

/// The value of `--flag VALUE` or `--flag=VALUE` in `command`.
fn flag_value(command: &[String], flag: &str) -> Option<String> {
    let prefix = format!("{flag}=");
    command
        .iter()
        .enumerate()
        .find_map(|(i, arg)| match arg.strip_prefix(&prefix) {
            Some(value) => Some(value.to_owned()),
            None if arg == flag => command.get(i + 1).cloned(),
            None => None,
        })
}

/// `command` resuming from `dir` where it holds a complete checkpoint (its own `--resume`
/// replaced), else `command` as given (a run that saved nothing starts again).
fn restart_command(command: &[String], dir: &Path) -> anyhow::Result<Vec<String>> {
    if tessera_nn::checkpoint::latest(dir)?.is_none() {
        return Ok(command.to_vec());
    }
    let mut out = Vec::with_capacity(command.len() + 2);
    let mut skip = false;
    for arg in command {
        if std::mem::take(&mut skip) {
            continue;
        }
        if arg == "--resume" {
            skip = true;
            continue;
        }
        if arg.starts_with("--resume=") {
            continue;
        }
        out.push(arg.clone());
    }
    out.extend(["--resume".to_owned(), dir.display().to_string()]);
    Ok(out)
}

/// How the ranks are started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Launcher {
    Mpirun { open_mpi: bool },
    Srun,
}

impl Launcher {
    fn choose(name: &str) -> anyhow::Result<Launcher> {
        match name {
            "auto" if std::env::var_os("SLURM_JOB_ID").is_some() => Ok(Launcher::Srun),
            "auto" | "mpirun" => Ok(Launcher::Mpirun {
                open_mpi: is_open_mpi(),
            }),
            "srun" => Ok(Launcher::Srun),
            other => bail!("--launcher {other}: give auto, mpirun or srun"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Launcher::Mpirun { .. } => "mpirun",
            Launcher::Srun => "srun",
        }
    }

    /// The command starting `ranks` copies of `program command...`.
    fn command(self, ranks: u32, program: &Path, command: &[String]) -> Command {
        let mut c = Command::new(self.name());
        c.arg("-n").arg(ranks.to_string());
        if let Launcher::Mpirun { open_mpi: true } = self {
            c.arg("--oversubscribe");
            if is_root() {
                c.arg("--allow-run-as-root");
            }
        }
        c.arg(program);
        c.args(command.iter().map(OsString::from));
        c
    }
}

/// Whether `mpirun` is Open MPI's (whose flags Tessera adds).
fn is_open_mpi() -> bool {
    Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("Open MPI"))
}

/// Whether this process runs as root (Open MPI refuses root without a flag).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0")
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use super::*;

    fn strings(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn the_checkpoint_directory_is_found_in_either_spelling() {
        let cmd = strings(&["train", "--steps", "4", "--checkpoint-dir", "ck"]);
        assert_eq!(checkpoint_dir(&cmd).unwrap(), Some(PathBuf::from("ck")));
        let cmd = strings(&["train", "--resume=old"]);
        assert_eq!(checkpoint_dir(&cmd).unwrap(), Some(PathBuf::from("old")));
        assert_eq!(checkpoint_dir(&strings(&["train"])).unwrap(), None);
        assert!(checkpoint_dir(&strings(&["plan"])).is_err());
    }

    #[test]
    fn a_restart_resumes_from_the_directory_only_once_it_holds_a_checkpoint() {
        let dir = std::env::temp_dir().join(format!("tessera-launch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cmd = strings(&["train", "--resume", "x", "--checkpoint-dir", "ck"]);
        assert_eq!(restart_command(&cmd, &dir).unwrap(), cmd);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
