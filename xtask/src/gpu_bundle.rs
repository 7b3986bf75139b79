//! `cargo xtask gpu-bundle DIR`: what a GPU machine without MLIR or a network needs to run Tessera
//! against its own JAX, in at most [`LIMIT_BYTES`]:
//!
//! - `tessera.xz`: the release `tessera` binary, stripped and compressed by the `xz` command
//!   (XZ Utils: on every Debian-like system, no library to build into xtask, and multithreaded;
//!   `run.sh` unpacks with `xz`, or Python's `lzma` where `xz` is missing);
//! - `libs.tar.xz`: the shared libraries the binary needs (`ldd`) beyond the C and C++ runtimes
//!   and zlib, which every machine with Python has: Open MPI's `libmpi` and its dependencies;
//! - `jax/llama_jax.py` and `data/corpus.txt`: JAX's side of the Llama benchmark and its data;
//!   `jax/gen_cudnn_lowering.py`: captures JAX's cuDNN attention lowering (the fixture of
//!   `tests/data/cudnn/`) with the machine's cuDNN;
//! - `oracle/`: JAX's jaxpr oracle files that run on one device (`tessera oracle jaxpr`);
//! - `run.sh` (`gpu_bundle/run.sh`): unpacks them and runs the comparison, the oracle files and a
//!   2-rank `mpirun` job on the machine's device, printing a table;
//! - `MANIFEST`: the commit, the oldest glibc the binary runs with (`run.sh` checks it), and the
//!   files.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

use crate::cmd::{self, step};

/// The most the bundle may hold.
pub const LIMIT_BYTES: u64 = 60 * 1024 * 1024;
/// The script that runs the bundle.
const RUN_SH: &str = include_str!("gpu_bundle/run.sh");
/// JAX's oracle files whose programs run on one device (the sharded and collective cases need 8).
pub const ORACLE_FILES: [&str; 2] = ["jaxpr_cases.json", "jaxpr_real_cases.json"];
/// Libraries every machine that runs JAX has (the C library, the C++ and GCC runtimes, zlib):
/// name prefixes of `ldd`'s lines left out of the bundle.
const SYSTEM_LIBRARIES: [&str; 12] = [
    "linux-vdso.so",
    "ld-linux",
    "libc.so",
    "libm.so",
    "libpthread.so",
    "libdl.so",
    "librt.so",
    "libresolv.so",
    "libutil.so",
    "libstdc++.so",
    "libgcc_s.so",
    "libz.so",
];

/// `cargo xtask gpu-bundle DIR`.
pub fn run(dir: &Path) -> anyhow::Result<()> {
    crate::setup::run()?;
    let total = make(&cmd::workspace_root(), dir)?;
    step(&format!(
        "gpu-bundle: {} holds {:.1} MiB (at most {} MiB); copy it to the GPU machine and run \
         {}/run.sh",
        dir.display(),
        total as f64 / 1048576.0,
        LIMIT_BYTES / 1048576,
        dir.display()
    ));
    Ok(())
}

/// Builds the release binary and writes the bundle into `dir` (empty, missing, or an earlier
/// bundle); returns its size in bytes.
pub fn make(root: &Path, dir: &Path) -> anyhow::Result<u64> {
    step("gpu-bundle: building the release tessera binary");
    cmd::build_release_tessera()?;
    let binary = root.join("target").join("release").join("tessera");
    prepare_dir(dir)?;
    let staging = root.join("target").join("tmp").join("gpu-bundle");
    if staging.exists() {
        fs::remove_dir_all(&staging)
            .with_context(|| format!("could not remove {}", staging.display()))?;
    }
    fs::create_dir_all(staging.join("libs"))?;

    step("gpu-bundle: stripping the binary and compressing it with xz");
    let stripped = staging.join("tessera");
    cmd::run(
        Command::new("strip")
            .arg("--strip-all")
            .arg("-o")
            .arg(&stripped)
            .arg(&binary),
    )
    .context("strip (binutils) is needed to make the bundle")?;
    let glibc = cmd::output("objdump", &["-T", &stripped.to_string_lossy()])
        .and_then(|text| newest_glibc(&text));
    let packed = fs::File::create(dir.join("tessera.xz"))?;
    cmd::run(
        Command::new("xz")
            .args(["-T0", "-6", "-c"])
            .arg(&stripped)
            .stdout(packed),
    )
    .context("xz (XZ Utils) is needed to make the bundle")?;

    let ldd = Command::new("ldd")
        .arg(&binary)
        .stderr(Stdio::inherit())
        .output()
        .context("could not run ldd")?;
    let libraries = bundled_libraries(&String::from_utf8_lossy(&ldd.stdout));
    step(&format!(
        "gpu-bundle: packing the shared libraries a GPU machine may lack: {}",
        libraries
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    for (name, path) in &libraries {
        // A copy of the file a link points at, under the name the binary asks for.
        fs::copy(path, staging.join("libs").join(name))
            .with_context(|| format!("could not copy {}", path.display()))?;
    }
    let mut tar = Command::new("tar");
    tar.arg("-cJf")
        .arg(dir.join("libs.tar.xz"))
        .arg("-C")
        .arg(staging.join("libs"))
        .args(libraries.iter().map(|(name, _)| name));
    cmd::run(&mut tar)?;

    let copies = [
        (
            root.join(crate::llama::SCRIPT),
            "jax/llama_jax.py".to_owned(),
        ),
        (root.join(crate::llama::DATA), "data/corpus.txt".to_owned()),
        (
            root.join("tests/data/cudnn/gen_cudnn_lowering.py"),
            "jax/gen_cudnn_lowering.py".to_owned(),
        ),
    ];
    let oracle = root.join("..").join("shared").join("oracle");
    let oracles = ORACLE_FILES
        .iter()
        .map(|name| (oracle.join(name), format!("oracle/{name}")));
    for (from, to) in copies.into_iter().chain(oracles) {
        let to = dir.join(to);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::copy(&from, &to)
            .with_context(|| format!("could not copy {} (the bundle needs it)", from.display()))?;
    }
    write_script(&dir.join("run.sh"))?;
    let root_text = root.to_string_lossy();
    let describe = [
        "-C",
        &root_text,
        "describe",
        "--always",
        "--dirty",
        "--abbrev=40",
    ];
    let commit = cmd::output("git", &describe).unwrap_or_else(|| "unknown".into());
    let mut manifest = format!("tessera {commit}\n");
    if let Some((major, minor)) = glibc {
        manifest.push_str(&format!("glibc {major}.{minor}\n"));
    }
    for (name, _) in &libraries {
        manifest.push_str(&format!("library {name}\n"));
    }
    fs::write(dir.join("MANIFEST"), manifest)?;
    fs::remove_dir_all(&staging).ok();

    let total = size_of(dir)?;
    if total > LIMIT_BYTES {
        bail!(
            "the bundle in {} holds {total} bytes, more than the {LIMIT_BYTES} allowed",
            dir.display()
        );
    }
    Ok(total)
}

/// Makes `dir`, refusing one that holds something other than an earlier bundle.
fn prepare_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() && !dir.is_dir() {
        bail!(
            "{} is a file; give a directory for the bundle",
            dir.display()
        );
    }
    if dir.is_dir() && fs::read_dir(dir)?.next().is_some() {
        if !dir.join("MANIFEST").is_file() || !dir.join("run.sh").is_file() {
            bail!(
                "{} is not empty and holds no earlier bundle; give an empty or new directory",
                dir.display()
            );
        }
        step(&format!(
            "gpu-bundle: replacing the bundle in {}",
            dir.display()
        ));
        fs::remove_dir_all(dir)?;
    }
    fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))
}

#[cfg(unix)]
fn write_script(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::write(path, RUN_SH)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// The libraries of `ldd`'s output to bundle: (the name the binary asks for, where it is), the
/// system's ([`SYSTEM_LIBRARIES`]) left out.
pub fn bundled_libraries(ldd: &str) -> Vec<(String, PathBuf)> {
    ldd.lines()
        .filter_map(|line| {
            let (name, rest) = line.trim().split_once(" => ")?;
            let path = rest.split(" (").next()?.trim();
            let system = SYSTEM_LIBRARIES.iter().any(|p| name.starts_with(p));
            (!system && path.starts_with('/')).then(|| (name.to_owned(), PathBuf::from(path)))
        })
        .collect()
}

/// The newest `GLIBC_x.y` symbol version `objdump -T` lists: the oldest glibc the binary runs
/// with.
pub fn newest_glibc(objdump: &str) -> Option<(u32, u32)> {
    objdump
        .split("GLIBC_")
        .skip(1)
        .filter_map(|rest| {
            let version: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let mut parts = version.split('.').map(str::parse::<u32>);
            match (parts.next(), parts.next()) {
                (Some(Ok(major)), Some(Ok(minor))) => Some((major, minor)),
                _ => None,
            }
        })
        .max()
}

/// The bytes of the files under `dir`.
fn size_of(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            size_of(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

#[cfg(test)]
mod tests;
