//! Running an MPI job in a test: `mpirun` with a time limit after which the job (mpirun and its
//! ranks, by process group) is killed, one job at a time per test binary (4 ranks on a small
//! machine), its output captured.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One job at a time.
pub static JOBS: Mutex<()> = Mutex::new(());

/// How a job ended: its status, its output, and when `marker` first appeared in its error output
/// (if asked for) relative to its exit.
pub struct Ended {
    /// mpirun's exit status.
    pub status: ExitStatus,
    /// Its standard output.
    pub stdout: String,
    /// Its error output.
    pub stderr: String,
    /// From the marker's appearance to the job's exit.
    pub after_marker: Option<Duration>,
}

/// A path named `name` in this test process's scratch folder (made if missing).
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-mpi-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Runs `mpirun` with `launch` (its arguments, the program included) and `env`, killing it
/// after `limit`; watches the error output for `marker`.
pub fn mpirun(
    launch: &[&str],
    env: &[(&str, &str)],
    limit: Duration,
    marker: Option<&str>,
) -> Ended {
    let _one = JOBS.lock().unwrap_or_else(|e| e.into_inner());
    let tag = launch.join("_").replace(['/', ' ', '@', '.'], "-");
    let tag: String = tag.chars().rev().take(60).collect();
    let (out_path, err_path) = (
        scratch(&format!("{tag}.out")),
        scratch(&format!("{tag}.err")),
    );
    let mut command = Command::new("mpirun");
    command
        .args(["--allow-run-as-root", "--oversubscribe"])
        .args(launch)
        .env_remove("TESSERA_PJRT_PLUGIN")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .process_group(0);
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run mpirun: {e} (run `cargo xtask setup`)"));
    let began = Instant::now();
    let mut seen: Option<Instant> = None;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if let (Some(m), None) = (marker, seen)
            && std::fs::read_to_string(&err_path)
                .unwrap_or_default()
                .contains(m)
        {
            seen = Some(Instant::now());
        }
        if began.elapsed() > limit {
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            let _ = child.wait();
            panic!(
                "the job {launch:?} ran past {limit:?}; its error output:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let exited = Instant::now();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let _ = (
        std::fs::remove_file(&out_path),
        std::fs::remove_file(&err_path),
    );
    if let Some(dir) = out_path.parent() {
        let _ = std::fs::remove_dir(dir); // the last job's (scratch makes it again)
    }
    let seen = seen.or_else(|| marker.filter(|m| stderr.contains(m)).map(|_| exited));
    Ended {
        status,
        stdout,
        stderr,
        after_marker: seen.map(|t| exited.duration_since(t)),
    }
}

/// Runs the `tessera` program with `args` in one process (no job), one at a time with the jobs,
/// without the caller's plugin choice; its output.
pub fn run_alone(args: &[String]) -> std::process::Output {
    let _one = JOBS.lock().unwrap_or_else(|e| e.into_inner());
    Command::new(crate::tessera_bin())
        .args(args)
        .env_remove("TESSERA_PJRT_PLUGIN")
        .output()
        .unwrap()
}
