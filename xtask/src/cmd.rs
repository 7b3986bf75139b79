//! Running commands and printing what xtask is doing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

/// Prints one step of what xtask is doing.
pub fn step(what: &str) {
    eprintln!("xtask: {what}");
}

/// The workspace root (the parent of `xtask/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Runs `cargo ARGS` in the workspace root, failing if it fails.
pub fn cargo(args: &[&str]) -> anyhow::Result<()> {
    run(&mut cargo_command(args))
}

/// Builds the release `tessera` binary (`target/release/tessera`).
pub fn build_release_tessera() -> anyhow::Result<()> {
    cargo(&[
        "build",
        "--release",
        "--package",
        "tessera",
        "--bin",
        "tessera",
    ])
}

/// Runs the Python script `script` (relative to `root`) with `args` and `env`, its stderr shown,
/// and returns what it printed on stdout; XLA's informational log lines are quieted unless the
/// caller set `TF_CPP_MIN_LOG_LEVEL`.
pub fn python_stdout(
    python: &Path,
    root: &Path,
    script: &str,
    args: &[String],
    env: &[(&str, &str)],
) -> anyhow::Result<String> {
    let mut command = Command::new(python);
    command
        .arg(root.join(script))
        .args(args)
        .current_dir(root)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    for (key, value) in env {
        command.env(key, value);
    }
    if std::env::var_os("TF_CPP_MIN_LOG_LEVEL").is_none() {
        command.env("TF_CPP_MIN_LOG_LEVEL", "1");
    }
    let out = command
        .output()
        .with_context(|| format!("could not start {command:?}"))?;
    if !out.status.success() {
        bail!("{command:?} failed ({})", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `cargo ARGS` in the workspace root. XLA's informational and warning log lines are quieted
/// (`TF_CPP_MIN_LOG_LEVEL=2`; errors still print) unless the caller set that variable.
pub fn cargo_command(args: &[&str]) -> Command {
    let mut command = Command::new(cargo_bin());
    command.args(args).current_dir(workspace_root());
    if std::env::var_os("TF_CPP_MIN_LOG_LEVEL").is_none() {
        command.env("TF_CPP_MIN_LOG_LEVEL", "2");
    }
    crate::compile_count::attach(&mut command);
    command
}

/// Runs the release `tessera` program with `args` in `root` (its stderr shown) and reads the JSON
/// object it prints as its last line; `what` names the run in errors.
pub fn tessera_json(root: &Path, args: &[&str], what: &str) -> anyhow::Result<serde_json::Value> {
    let mut all = vec!["run", "--release", "--quiet", "--package", "tessera", "--"];
    all.extend_from_slice(args);
    let mut command = cargo_command(&all);
    command
        .current_dir(root)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    let out = command
        .output()
        .with_context(|| format!("could not start {command:?}"))?;
    summary_of_a_run(what, out.status, &String::from_utf8_lossy(&out.stdout))
}

/// The JSON summary a run printed as its last line; a run that exited with a failure is an
/// error, not a data point (`tessera train` prints its summary before its checks can fail).
fn summary_of_a_run(
    what: &str,
    status: std::process::ExitStatus,
    stdout: &str,
) -> anyhow::Result<serde_json::Value> {
    if !status.success() {
        bail!("{what} failed ({status}); its figures are not used");
    }
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .with_context(|| format!("{what} printed no JSON summary"))
}

/// The cargo that runs this xtask.
pub fn cargo_bin() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// Runs a command with inherited output, failing with the command line if it fails.
pub fn run(command: &mut Command) -> anyhow::Result<()> {
    let line = format!("{command:?}");
    let status = command
        .status()
        .with_context(|| format!("could not start {line}"))?;
    if !status.success() {
        bail!("{line} failed ({status})");
    }
    Ok(())
}

/// Runs a command quietly and returns its trimmed standard output, or `None` if it cannot run or
/// fails.
pub fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// "CPU model, N CPUs (nproc)" from `/proc/cpuinfo` and `nproc`.
pub fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, name)| name.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = output("nproc", &[]).unwrap_or_else(|| "?".into());
    format!("{model}, {cpus} CPUs (nproc)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn a_failed_run_is_not_a_data_point() {
        let line = "log\n{\"step_ms\": 3.0}";
        let ok = summary_of_a_run("run", std::process::ExitStatus::from_raw(0), line);
        assert_eq!(ok.unwrap()["step_ms"], 3.0);
        // Exit code 1 (a wait status of 256): the summary it printed is refused.
        let failed = summary_of_a_run("run", std::process::ExitStatus::from_raw(256), line);
        assert!(failed.unwrap_err().to_string().contains("failed"));
    }
}
