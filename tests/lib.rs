//! Helpers shared by the workspace-level integration tests.

use std::path::PathBuf;

/// The repository root (the parent of this package's directory).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// The `shared/` folder beside the repository, holding the JAX oracle files.
pub fn shared_dir() -> PathBuf {
    repo_root().join("..").join("shared")
}

/// The path of the built `tessera` binary (built by `cargo xtask test` before the tests run).
pub fn tessera_bin() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    target.join("debug").join("tessera")
}

/// Runs the `tessera` program with `args`, checks that it succeeded, and returns the last line
/// it printed (the oracle runners' `N passed, M failed`).
pub fn tessera_last_line<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let out = std::process::Command::new(tessera_bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e} (build it with `cargo build -p tessera`)",
                tessera_bin().display()
            )
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().last().unwrap_or_default().to_owned()
}

/// Asserts that an oracle report has no failures (listing them otherwise) and `cases` passes.
pub fn assert_all_pass(report: &tessera_ir::oracle::Report, cases: usize) {
    let failures: Vec<String> = report
        .failures
        .iter()
        .map(|(n, w)| format!("{n}: {w}"))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(report.passed, cases);
}
