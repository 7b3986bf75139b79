//! `cargo xtask test`: setup (which installs the pinned TensorBoard that `tests/tensorboard.rs`
//! reads event files with; its Python is passed in `TESSERA_TENSORBOARD_PYTHON`), then every test
//! of the workspace (unit, integration, doc tests and the oracle runners), ending with one
//! `N passed, M failed, K skipped` line summed over all test binaries. A test that cannot run
//! on this machine (no GPU, too few GPUs) records itself in the file `TESSERA_TEST_SKIPS`
//! names (`tessera_tests::skip`) and is counted as skipped, not passed; ignored tests (the
//! child processes some tests start, which are no tests of their own) are counted as skipped
//! too.

use std::io::{BufRead, BufReader};
use std::process::{ExitCode, Stdio};

use anyhow::Context;

use crate::cmd::{self, step};

/// Totals read from libtest's `test result:` lines.
#[derive(Debug, Default, PartialEq)]
struct Totals {
    passed: u64,
    failed: u64,
    ignored: u64,
    binaries: u64,
}

impl Totals {
    /// Adds one `test result: ok. 3 passed; 0 failed; 0 ignored; ...` line; other lines are
    /// ignored.
    fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            return;
        };
        self.binaries += 1;
        for part in rest.split([';', '.']) {
            let mut words = part.split_whitespace();
            if let (Some(n), Some(what)) = (words.next(), words.next()) {
                let Ok(n) = n.parse::<u64>() else { continue };
                match what {
                    "passed" => self.passed += n,
                    "failed" => self.failed += n,
                    "ignored" => self.ignored += n,
                    _ => {}
                }
            }
        }
    }
}

/// Runs setup and the whole test suite.
pub fn run(extra: &[String]) -> anyhow::Result<ExitCode> {
    crate::setup::run()?;
    step("test: building the tessera binary (the CLI tests run it)");
    cmd::cargo(&["build", "--package", "tessera"])?;
    step("test: building the release tessera binary (the GPU bundle's test packs it)");
    cmd::build_release_tessera()?;
    step("test: building the examples tests/mpi.rs and tests/mpi_steps.rs run under mpirun");
    cmd::cargo(&[
        "build",
        "--package",
        "tessera-examples",
        "--example",
        "mpi_reshard",
        "--example",
        "pipeline_metrics",
        "--example",
        "mpi_steps",
    ])?;
    step("test: cargo test --workspace --no-fail-fast");
    let skips_log = cmd::workspace_root().join("target").join("test-skips.log");
    match std::fs::remove_file(&skips_log) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("removing {}", skips_log.display()));
        }
        _ => {}
    }
    let mut child = cmd::cargo_command(&["test", "--workspace", "--no-fail-fast"])
        .args(extra)
        .env(
            crate::tensorboard::PYTHON_VAR,
            crate::tensorboard::python(&cmd::workspace_root()),
        )
        .env(SKIPS_ENV, &skips_log)
        .stdout(Stdio::piped())
        .spawn()
        .context("could not start cargo test")?;
    let mut totals = Totals::default();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line?;
            println!("{line}");
            totals.add_line(&line);
        }
    }
    let status = child.wait()?;
    let skips = read_skips(&skips_log)?;
    println!(
        "\nxtask test: {} test binaries; {} ignored (child processes of other tests); {} \
         skipped as this machine cannot run them:",
        totals.binaries,
        totals.ignored,
        skips.len()
    );
    for skip in &skips {
        println!("  skipped: {skip}");
    }
    let passed = totals.passed.saturating_sub(skips.len() as u64);
    let skipped = totals.ignored + skips.len() as u64;
    println!(
        "{passed} passed, {} failed, {skipped} skipped",
        totals.failed
    );
    if status.success() && totals.failed == 0 && totals.binaries > 0 {
        Ok(ExitCode::SUCCESS)
    } else {
        if !status.success() && totals.failed == 0 {
            eprintln!(
                "xtask test: cargo test failed ({status}) before reporting a failed test: see the build errors above"
            );
        }
        Ok(ExitCode::FAILURE)
    }
}

/// The variable naming the file skipped tests record themselves in (`tests/lib.rs`).
const SKIPS_ENV: &str = "TESSERA_TEST_SKIPS";

/// The skipped tests recorded in `path` (none when no test wrote it).
fn read_skips(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text.lines().map(str::to_owned).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_libtest_result_lines() {
        let mut totals = Totals::default();
        totals.add_line("test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s");
        totals.add_line("running 2 tests");
        totals.add_line(
            "test result: FAILED. 5 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out",
        );
        assert_eq!(
            totals,
            Totals {
                passed: 8,
                failed: 2,
                ignored: 1,
                binaries: 2
            }
        );
    }
}
