//! `cargo xtask setup`: MLIR 22 and Open MPI from Debian's packages, then the PJRT plugins from
//! PyPI, and a pinned `tensorboard` in `target/tb-venv/` for `tests/tensorboard.rs`.

use std::process::Command;

use anyhow::bail;

use crate::cmd::{self, step};

/// Debian packages that `melior` 0.27 (MLIR 22) and `bindgen` need, and Open MPI (`mpirun`, and
/// `mpicc` for the `mpi` crate) for multi-process runs.
const APT_PACKAGES: &[&str] = &[
    "llvm-22-dev",
    "libmlir-22-dev",
    "mlir-22-tools",
    "libclang-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
    "libz3-dev",
    "libxml2-dev",
    "zlib1g-dev",
    "openmpi-bin",
    "libopenmpi-dev",
    // jemalloc, the `tessera` program's allocator, is built from source by `tikv-jemalloc-sys`.
    "make",
];

/// The LLVM prefix that `.cargo/config.toml` names in `MLIR_SYS_220_PREFIX`.
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

/// Options of `cargo xtask setup`.
#[derive(Debug, Default, clap::Args)]
pub struct Args {
    /// Also install this CPU plugin by name (`xla-cpu-pjrt`, `zml-cpu`, `jax-0.11-cpu`);
    /// may be repeated. The default CPU plugin and `xla-cpu-pjrt` are always installed.
    #[arg(long = "plugin", value_name = "NAME")]
    plugins: Vec<String>,
    /// Also install JAX's CUDA 12 plugin and the NVIDIA libraries it needs (several GB).
    #[arg(long)]
    cuda: bool,
}

/// Installs what every build needs, skipping what is already there.
pub fn run() -> anyhow::Result<()> {
    run_with(&Args::default())
}

/// Installs what every build needs and what `args` ask for.
pub fn run_with(args: &Args) -> anyhow::Result<()> {
    install_mlir()?;
    crate::plugin::install(&args.plugins)?;
    if args.cuda {
        crate::plugin::install_cuda()?;
    }
    crate::tensorboard::ensure(&cmd::workspace_root())?;
    step("setup: done");
    Ok(())
}

fn missing_packages() -> Vec<&'static str> {
    APT_PACKAGES
        .iter()
        .copied()
        .filter(|pkg| {
            cmd::output("dpkg-query", &["-W", "-f=${Status}", pkg])
                .is_none_or(|status| !status.ends_with("installed"))
        })
        .collect()
}

fn install_mlir() -> anyhow::Result<()> {
    let missing = missing_packages();
    if missing.is_empty() {
        step("setup: MLIR 22, libclang 22 and Open MPI from Debian are installed (skipped)");
    } else {
        apt_install(&missing)?;
    }
    check_llvm_prefix()
}

fn apt_install(packages: &[&str]) -> anyhow::Result<()> {
    let list = packages.join(" ");
    let is_root = cmd::output("id", &["-u"]).as_deref() == Some("0");
    if !is_root {
        bail!(
            "these Debian packages are missing: {list}. xtask is not root, so it cannot install \
             them. Run:\n    sudo apt-get update && sudo apt-get install -y --no-install-recommends {list}\nthen run this command again"
        );
    }
    step(&format!("setup: installing from Debian's packages: {list}"));
    cmd::run(
        Command::new("apt-get")
            .arg("update")
            .arg("-q")
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    cmd::run(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    let still = missing_packages();
    if !still.is_empty() {
        bail!(
            "apt-get finished but these packages are still missing: {}",
            still.join(" ")
        );
    }
    Ok(())
}

fn check_llvm_prefix() -> anyhow::Result<()> {
    let prefix = cmd::output("llvm-config-22", &["--prefix"])
        .or_else(|| cmd::output(&format!("{LLVM_PREFIX}/bin/llvm-config"), &["--prefix"]));
    match prefix {
        Some(prefix) if prefix == LLVM_PREFIX => Ok(()),
        Some(prefix) => bail!(
            "llvm-config-22 --prefix prints {prefix}, but .cargo/config.toml sets \
             MLIR_SYS_220_PREFIX and TABLEGEN_220_PREFIX to {LLVM_PREFIX}. Fix: set both (and \
             LIBCLANG_PATH to {prefix}/lib) in your environment or in .cargo/config.toml"
        ),
        None => bail!(
            "llvm-config-22 was not found although the LLVM 22 packages are installed. Fix: \
             reinstall them: apt-get install --reinstall llvm-22-dev"
        ),
    }
}
