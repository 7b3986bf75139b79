//! The PJRT CPU plugin: downloaded as the `xla-cpu-pjrt` wheel from PyPI with pip into Tessera's
//! cache, checked against pinned SHA-256 sums, and unpacked there (never into the repository).
//!
//! The cache layout is shared with `tessera-pjrt` (`discovery.rs`) and its build script.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, anyhow, bail};
use sha2::{Digest, Sha256};

use crate::cmd::{self, step};

const PACKAGE: &str = "xla-cpu-pjrt==0.0.1";
const WHEEL: &str = "xla_cpu_pjrt-0.0.1-py3-none-manylinux_2_27_x86_64.whl";
const WHEEL_SHA256: &str = "55837b6b7b47daa717f2d9a5a03563ea0ceaa338d06a81a1e2d3f060d960decc";
/// Files taken from the wheel: (path in the wheel, path in the plugin folder, SHA-256).
const FILES: &[(&str, &str, &str)] = &[
    (
        "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so",
        "xla_cpu_pjrt.so",
        "88c3f28c5900f48ad4a82cab9e79bba9537809743395e341485f8794268820dc",
    ),
    (
        "xla_plugins/xla_cpu_pjrt/include/pjrt_c_api.h",
        "include/pjrt_c_api.h",
        "c85bb95cb1743c2a353a555b3ab35f065e5f17007c7f182ad68d23754950235c",
    ),
];
/// The plugin folder under the cache (kept in step with `tessera_pjrt::CPU_PLUGIN_DIR`).
const PLUGIN_DIR: &str = "pjrt/xla-cpu-pjrt-0.0.1";

/// Tessera's cache folder (the same rule as `tessera_pjrt::cache_dir`).
pub fn cache_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("TESSERA_CACHE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(dir).join("tessera"));
    }
    let home = std::env::var_os("HOME")
        .ok_or_else(|| anyhow!("HOME is unset; set TESSERA_CACHE_DIR to a folder for the cache"))?;
    Ok(PathBuf::from(home).join(".cache").join("tessera"))
}

/// Makes sure the plugin and its header are in the cache with the pinned checksums.
pub fn install() -> anyhow::Result<()> {
    let cache = cache_dir()?;
    let plugin_dir = cache.join(PLUGIN_DIR);
    if installed(&plugin_dir)? {
        step(&format!(
            "setup: PJRT CPU plugin is installed in {} (skipped)",
            plugin_dir.display()
        ));
        return Ok(());
    }
    let wheel = download_wheel(&cache.join("pjrt").join("wheels"))?;
    step(&format!(
        "setup: unpacking the plugin and its header into {}",
        plugin_dir.display()
    ));
    unpack(&wheel, &plugin_dir)?;
    if !installed(&plugin_dir)? {
        bail!(
            "unpacked {} but its files do not match the pinned checksums",
            wheel.display()
        );
    }
    Ok(())
}

/// True when every file is present with its pinned checksum. A present file with a wrong sum is
/// an error naming the file and the fix.
fn installed(plugin_dir: &Path) -> anyhow::Result<bool> {
    for (_, rel, sha) in FILES {
        let path = plugin_dir.join(rel);
        if !path.is_file() {
            return Ok(false);
        }
        if !stamp_matches(&path, sha) {
            let actual = sha256_file(&path)?;
            if actual != *sha {
                bail!(
                    "{} has SHA-256 {actual}, expected {sha}: the file is damaged or not the \
                     pinned plugin. Fix: delete {} and run `cargo xtask setup` again",
                    path.display(),
                    plugin_dir.display()
                );
            }
            write_stamp(&path, sha)?;
        }
    }
    Ok(true)
}

/// A stamp beside a verified file records its sum, size and modification time, so that later
/// runs skip hashing a file that has not changed.
fn stamp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".verified");
    path.with_file_name(name)
}

fn stamp_text(path: &Path, sha: &str) -> Option<String> {
    let meta = fs::metadata(path).ok()?;
    let mtime = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_nanos();
    Some(format!("{sha} {} {mtime}\n", meta.len()))
}

fn stamp_matches(path: &Path, sha: &str) -> bool {
    match (stamp_text(path, sha), fs::read_to_string(stamp_path(path))) {
        (Some(expected), Ok(actual)) => expected == actual,
        _ => false,
    }
}

fn write_stamp(path: &Path, sha: &str) -> anyhow::Result<()> {
    let text = stamp_text(path, sha).ok_or_else(|| anyhow!("cannot read {}", path.display()))?;
    fs::write(stamp_path(path), text)
        .with_context(|| format!("writing {}", stamp_path(path).display()))
}

fn download_wheel(wheels: &Path) -> anyhow::Result<PathBuf> {
    let wheel = wheels.join(WHEEL);
    if wheel.is_file() && sha256_file(&wheel)? == WHEEL_SHA256 {
        step(&format!(
            "setup: using the cached wheel {}",
            wheel.display()
        ));
        return Ok(wheel);
    }
    if wheel.is_file() {
        step(&format!(
            "setup: {} has the wrong checksum; downloading it again",
            wheel.display()
        ));
        fs::remove_file(&wheel)?;
    }
    ensure_pip()?;
    step(&format!(
        "setup: downloading {PACKAGE} from PyPI with pip into {}",
        wheels.display()
    ));
    fs::create_dir_all(wheels)?;
    cmd::run(
        Command::new("python3")
            .args(["-m", "pip", "download", "--quiet", "--no-deps"])
            .args([
                "--only-binary=:all:",
                "--platform",
                "manylinux_2_27_x86_64",
                "--python-version",
                "3",
                "--dest",
            ])
            .arg(wheels)
            .arg(PACKAGE),
    )?;
    if !wheel.is_file() {
        bail!(
            "pip finished but {} is not there. Fix: check the pip output above",
            wheel.display()
        );
    }
    let actual = sha256_file(&wheel)?;
    if actual != WHEEL_SHA256 {
        bail!(
            "{} has SHA-256 {actual}, expected {WHEEL_SHA256}. Fix: delete it and run `cargo xtask \
             setup` again; if it persists, PyPI serves a different file than the one pinned",
            wheel.display()
        );
    }
    Ok(wheel)
}

fn ensure_pip() -> anyhow::Result<()> {
    if cmd::output("python3", &["-m", "pip", "--version"]).is_some() {
        return Ok(());
    }
    bail!(
        "python3 with pip is needed to download the PJRT CPU plugin from PyPI. Fix: run \
         `apt-get install -y python3-pip` (as root) and then this command again"
    )
}

fn unpack(wheel: &Path, plugin_dir: &Path) -> anyhow::Result<()> {
    let file = fs::File::open(wheel).with_context(|| format!("opening {}", wheel.display()))?;
    let mut archive = zip::ZipArchive::new(file)
        .with_context(|| format!("{} is not a readable wheel (zip)", wheel.display()))?;
    let staging = plugin_dir.with_extension("partial");
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    for (inner, rel, _) in FILES {
        let mut entry = archive
            .by_name(inner)
            .with_context(|| format!("{} has no {inner}", wheel.display()))?;
        let dest = staging.join(rel);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent)?;
        }
        let mut out = fs::File::create(&dest)?;
        io::copy(&mut entry, &mut out).with_context(|| format!("writing {}", dest.display()))?;
    }
    if plugin_dir.exists() {
        fs::remove_dir_all(plugin_dir)?;
    }
    fs::rename(&staging, plugin_dir)?;
    Ok(())
}

/// The SHA-256 of a file, in lowercase hex.
pub fn sha256_file(path: &Path) -> anyhow::Result<String> {
    let mut file = fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
