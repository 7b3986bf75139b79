//! The allocator each side of a comparison with JAX runs on. The `tessera` program and
//! `tessera-bench-jit` link jemalloc (`tessera::use_jemalloc!`, `oversize_threshold:0`); JAX as
//! installed runs on glibc's `malloc`, which returns XLA's large temporaries to the kernel after
//! every step (docs/profiling.md). So that a row compares the two programs and not two
//! allocators, JAX runs once more per round with the same jemalloc preloaded: the static library
//! `tikv-jemalloc-sys` builds for the release binaries, linked here as a shared library, with
//! the same `oversize_threshold:0`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, anyhow, bail};

use crate::cmd::{self, step};

/// An allocator JAX's process runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocator {
    /// glibc's `malloc`, as JAX is installed.
    Glibc,
    /// jemalloc preloaded, configured as the `tessera` program's.
    Jemalloc,
}

impl Allocator {
    /// The key of this side in a run file.
    pub fn key(self) -> &'static str {
        match self {
            Allocator::Glibc => "jax_glibc",
            Allocator::Jemalloc => "jax_jemalloc",
        }
    }

    /// "JAX (glibc malloc)" or "JAX (jemalloc)".
    pub fn label(self) -> &'static str {
        match self {
            Allocator::Glibc => "JAX (glibc malloc)",
            Allocator::Jemalloc => "JAX (jemalloc)",
        }
    }

    /// The environment JAX's process gets for this allocator.
    pub fn env(self, preload: &Path) -> Vec<(String, String)> {
        match self {
            Allocator::Glibc => Vec::new(),
            Allocator::Jemalloc => vec![
                ("LD_PRELOAD".into(), preload.display().to_string()),
                ("MALLOC_CONF".into(), "oversize_threshold:0".into()),
            ],
        }
    }
}

/// The shared jemalloc JAX preloads, under `target/bench-jemalloc/` (made from the release
/// build's static library when missing or older than it). Needs the release build done.
pub fn jemalloc_preload(root: &Path) -> anyhow::Result<PathBuf> {
    let archive = newest_archive(root)?;
    let out_dir = root.join("target").join("bench-jemalloc");
    let out = out_dir.join("libjemalloc.so");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if out.is_file() && modified(&out) >= modified(&archive) {
        step(&format!("bench: {} is up to date (skipped)", out.display()));
        return Ok(out);
    }
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("could not make {}", out_dir.display()))?;
    step(&format!(
        "bench: linking {} from {} (jemalloc for JAX's process)",
        out.display(),
        archive.display()
    ));
    cmd::run(
        Command::new("cc")
            .arg("-shared")
            .arg("-o")
            .arg(&out)
            .arg("-Wl,--whole-archive")
            .arg(&archive)
            .args(["-Wl,--no-whole-archive", "-lpthread", "-ldl", "-lm"]),
    )?;
    Ok(out)
}

/// `libjemalloc_pic.a` of the newest `tikv-jemalloc-sys` build of the release profile.
fn newest_archive(root: &Path) -> anyhow::Result<PathBuf> {
    let build = root.join("target").join("release").join("build");
    let entries = std::fs::read_dir(&build).with_context(|| {
        format!(
            "could not read {} (build in release first)",
            build.display()
        )
    })?;
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("tikv-jemalloc-sys-") {
            continue;
        }
        let archive = entry
            .path()
            .join("out")
            .join("lib")
            .join("libjemalloc_pic.a");
        if let Ok(modified) = std::fs::metadata(&archive).and_then(|m| m.modified()) {
            found.push((modified, archive));
        }
    }
    found.sort();
    match found.pop() {
        Some((_, archive)) => Ok(archive),
        None => bail!(
            "no libjemalloc_pic.a under {}/tikv-jemalloc-sys-*/out/lib: the release build of \
             `tessera` did not build jemalloc",
            build.display()
        ),
    }
}

/// Checks that a process given [`Allocator::Jemalloc`]'s environment maps the library.
pub fn check_preload(python: &Path, preload: &Path) -> anyhow::Result<()> {
    let mut command = Command::new(python);
    command.args([
        "-c",
        "print(sum('libjemalloc' in l for l in open('/proc/self/maps')))",
    ]);
    for (key, value) in Allocator::Jemalloc.env(preload) {
        command.env(key, value);
    }
    let out = command
        .output()
        .with_context(|| format!("could not start {command:?}"))?;
    let mapped: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| anyhow!("{command:?} printed no count"))?;
    if !out.status.success() || mapped == 0 {
        bail!(
            "Python with LD_PRELOAD={} does not map jemalloc: {}",
            preload.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
