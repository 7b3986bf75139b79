//! `cargo xtask test`: setup (which installs the pinned TensorBoard that `tests/tensorboard.rs`
//! reads event files with; its Python is passed in `TESSERA_TENSORBOARD_PYTHON`), then every test
//! of the workspace (unit, integration, doc tests and the oracle runners), ending with one
//! `N passed, M failed` line summed over all test binaries.

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
    let mut child = cmd::cargo_command(&["test", "--workspace", "--no-fail-fast"])
        .args(extra)
        .env(
            crate::tensorboard::PYTHON_VAR,
            crate::tensorboard::python(&cmd::workspace_root()),
        )
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
    println!(
        "\nxtask test: {} test binaries, {} ignored",
        totals.binaries, totals.ignored
    );
    println!("{} passed, {} failed", totals.passed, totals.failed);
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
