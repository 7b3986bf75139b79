//! The pinned `tensorboard` whose own reader (`EventAccumulator`) `tests/tensorboard.rs` reads
//! `tessera train --tensorboard` event files with: a virtual environment under
//! `target/tb-venv/`, made by `cargo xtask setup` (and so by `cargo xtask test`, which passes
//! its Python to the tests in [`PYTHON_VAR`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cmd::{self, step};

/// The TensorBoard release the test reads event files with (the newest when this was written).
pub const TENSORBOARD_VERSION: &str = "2.21.0";
/// The virtual environment, under the git-ignored `target/`.
pub const VENV_DIR: &str = "target/tb-venv";
/// The environment variable that tells `tests/tensorboard.rs` which Python has `tensorboard`.
pub const PYTHON_VAR: &str = "TESSERA_TENSORBOARD_PYTHON";

/// The virtual environment's Python (whether or not it exists yet).
pub fn python(root: &Path) -> PathBuf {
    root.join(VENV_DIR).join("bin").join("python")
}

/// Makes `target/tb-venv/` with the pinned `tensorboard` unless it is there already.
pub fn ensure(root: &Path) -> anyhow::Result<()> {
    let python = crate::venv::ensure_venv_at(root, VENV_DIR, "setup")?;
    let installed = cmd::output(
        &python.to_string_lossy(),
        &["-c", "import tensorboard; print(tensorboard.__version__)"],
    );
    if installed.as_deref() == Some(TENSORBOARD_VERSION) {
        step(&format!(
            "setup: tensorboard {TENSORBOARD_VERSION} is installed in {VENV_DIR} (skipped)"
        ));
        return Ok(());
    }
    step(&format!(
        "setup: installing tensorboard {TENSORBOARD_VERSION} into {VENV_DIR} with pip, for \
         tests/tensorboard.rs (was: {})",
        installed.as_deref().unwrap_or("none")
    ));
    cmd::run(Command::new(&python).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        &format!("tensorboard=={TENSORBOARD_VERSION}"),
    ]))
}
