//! The Python virtual environments of the benchmarks and TensorBoard: made under the
//! git-ignored `target/` with `python3 -m venv` (installing Debian's `python3-venv` where it is
//! missing and xtask runs as root), and the pinned CPU JAX the comparisons run.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::cmd::{self, step};
use crate::jax::{JAX_VERSION, JAXLIB_VERSION, OPTAX_VERSION, VENV_DIR};

/// Makes `target/jax-venv/` if it is missing or broken, and returns its Python.
pub fn ensure_venv(root: &Path) -> anyhow::Result<PathBuf> {
    ensure_venv_at(root, VENV_DIR, "bench")
}

/// Makes the virtual environment `dir` (relative to `root`) if it is missing or broken, and
/// returns its Python; `command` (e.g. `bench`) begins the lines that say what it does.
pub fn ensure_venv_at(root: &Path, dir: &str, command: &str) -> anyhow::Result<PathBuf> {
    let venv = root.join(dir);
    let python = venv.join("bin").join("python");
    if python.is_file() && cmd::output(&python.to_string_lossy(), &["--version"]).is_some() {
        step(&format!(
            "{command}: Python virtual environment {} exists (skipped)",
            venv.display()
        ));
        return Ok(python);
    }
    if venv.exists() {
        step(&format!(
            "{command}: {} is broken (its Python does not run); making it anew",
            venv.display()
        ));
        fs::remove_dir_all(&venv)
            .with_context(|| format!("could not remove {}", venv.display()))?;
    }
    ensure_venv_module()?;
    step(&format!(
        "{command}: making a Python virtual environment in {}",
        venv.display()
    ));
    cmd::run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    if !python.is_file() {
        bail!(
            "python3 -m venv finished but {} is missing",
            python.display()
        );
    }
    Ok(python)
}

/// `python3 -m venv` needs the `venv` and `ensurepip` modules (Debian's `python3-venv`).
fn ensure_venv_module() -> anyhow::Result<()> {
    let has_venv = || cmd::output("python3", &["-c", "import venv, ensurepip"]).is_some();
    if cmd::output("python3", &["--version"]).is_none() {
        bail!(
            "python3 was not found; JAX and TensorBoard run in Python virtual environments. Install \
             it: apt-get install python3 python3-venv"
        );
    }
    if has_venv() {
        return Ok(());
    }
    let is_root = cmd::output("id", &["-u"]).as_deref() == Some("0");
    if !is_root {
        bail!(
            "python3 has no venv/ensurepip module. xtask is not root, so it cannot install it. \
             Run:\n    sudo apt-get update && sudo apt-get install -y python3-venv\nthen run \
             this command again"
        );
    }
    step("bench: installing python3-venv from Debian's packages");
    cmd::run(
        Command::new("apt-get")
            .args(["update", "-q"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    cmd::run(
        Command::new("apt-get")
            .args([
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
                "python3-venv",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    if !has_venv() {
        bail!("apt-get installed python3-venv but python3 still has no venv/ensurepip module");
    }
    Ok(())
}

/// Installs the pinned CPU jax/jaxlib and optax into the venv unless they are there already.
pub fn ensure_jax(python: &Path) -> anyhow::Result<()> {
    let python_str = python.to_string_lossy();
    let installed = cmd::output(
        &python_str,
        &[
            "-c",
            "import jax, jaxlib, optax; print(jax.__version__, jaxlib.__version__, \
             optax.__version__)",
        ],
    );
    let wanted = format!("{JAX_VERSION} {JAXLIB_VERSION} {OPTAX_VERSION}");
    if installed.as_deref() == Some(wanted.as_str()) {
        step(&format!(
            "bench: jax {JAX_VERSION}, jaxlib {JAXLIB_VERSION} and optax {OPTAX_VERSION} are \
             installed in the venv (skipped)"
        ));
        return Ok(());
    }
    step(&format!(
        "bench: installing CPU jax {JAX_VERSION}, jaxlib {JAXLIB_VERSION} and optax \
         {OPTAX_VERSION} into the venv with pip (was: {})",
        installed.as_deref().unwrap_or("none")
    ));
    cmd::run(Command::new(python).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        &format!("jax=={JAX_VERSION}"),
        &format!("jaxlib=={JAXLIB_VERSION}"),
        &format!("optax=={OPTAX_VERSION}"),
    ]))
}
