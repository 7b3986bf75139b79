//! PJRT plugins: each downloaded as its wheel from PyPI with pip into Tessera's cache, checked
//! against pinned SHA-256 sums, and unpacked there (never into the repository). Which wheels,
//! which sums and which folders: `tessera-pjrt`'s `known_plugins.rs`, included here, so the
//! installer, the loader and the build script (which takes the header from `xla-cpu-pjrt`) read
//! one table.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, anyhow, bail};
use sha2::{Digest, Sha256};

use crate::cmd::{self, step};
use crate::known_plugins::{
    CPU_PLUGINS, CUDA_LIBRARY_WHEELS, CUDA_PLUGIN_LIBRARY, DEFAULT_CPU_PLUGIN, JAX_CUDA12,
    KnownPlugin, PYTHON_CUDA_PLUGIN_QUERY, XLA_CPU_PJRT, known_plugin, known_plugin_names,
};

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

/// Installs the plugins every build needs: `xla-cpu-pjrt` (its wheel carries the header the
/// bindings are generated from) and the default CPU plugin, then the `extra` ones named.
pub fn install(extra: &[String]) -> anyhow::Result<()> {
    install_plugin(&XLA_CPU_PJRT)?;
    install_plugin(&DEFAULT_CPU_PLUGIN)?;
    for name in extra {
        let plugin = known_plugin(name)
            .filter(|plugin| CPU_PLUGINS.iter().any(|cpu| cpu.name == plugin.name))
            .ok_or_else(|| {
                anyhow!(
                    "unknown CPU plugin `{name}`: name one of {} (the CUDA plugin is installed \
                     with --cuda)",
                    known_plugin_names().join(", ")
                )
            })?;
        install_plugin(&plugin)?;
    }
    Ok(())
}

/// Makes sure one plugin's files are in the cache with the pinned checksums.
fn install_plugin(plugin: &KnownPlugin) -> anyhow::Result<()> {
    let cache = cache_dir()?;
    let plugin_dir = cache.join(plugin.cache_subdir());
    let label = format!("{} {} (`{}`)", plugin.package, plugin.version, plugin.name);
    if installed(plugin, &plugin_dir)? {
        step(&format!(
            "setup: PJRT plugin {label} is installed in {} (skipped)",
            plugin_dir.display()
        ));
        return Ok(());
    }
    let wheel = download_wheel(plugin, &cache.join("pjrt").join("wheels"))?;
    step(&format!(
        "setup: unpacking {label} into {}",
        plugin_dir.display()
    ));
    unpack(plugin, &wheel, &plugin_dir)?;
    if !installed(plugin, &plugin_dir)? {
        bail!(
            "unpacked {} but its files do not match the pinned checksums",
            wheel.display()
        );
    }
    Ok(())
}

/// `cargo xtask setup --cuda`: JAX's CUDA 12 plugin and the NVIDIA library wheels it loads, as
/// `jax[cuda12]` installs them, with pip into one folder of the cache (the plugin's wheel is
/// pinned by its checksum; the libraries by pip's resolution of `jax-cuda12-plugin[with-cuda]`).
/// Where there is no network but a Python with JAX's CUDA plugin, `--plugin cuda` finds that one
/// instead.
pub fn install_cuda() -> anyhow::Result<()> {
    let dir = cache_dir()?.join(JAX_CUDA12.cache_subdir());
    let library = dir
        .join("jax_plugins/xla_cuda12")
        .join(JAX_CUDA12.library());
    if library.is_file() && sha256_file(&library)? == JAX_CUDA12.files[0].sha256 {
        step(&format!(
            "setup: the CUDA plugin {} {} is installed in {} (skipped)",
            JAX_CUDA12.package,
            JAX_CUDA12.version,
            dir.display()
        ));
        return Ok(());
    }
    if let Some(found) = python_cuda_plugin() {
        step(&format!(
            "setup: python3 already has JAX's CUDA plugin at {}; Tessera uses it (nothing to \
             download; `--plugin cuda` finds it)",
            found.display()
        ));
        return Ok(());
    }
    ensure_pip()?;
    let requirement = format!("jax-cuda12-plugin[with-cuda]=={}", JAX_CUDA12.version);
    step(&format!(
        "setup: installing {requirement} (the CUDA plugin and {} NVIDIA library wheels, several \
         GB) with pip into {}",
        CUDA_LIBRARY_WHEELS.len(),
        dir.display()
    ));
    cmd::run(
        Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "--upgrade", "--target"])
            .arg(&dir)
            .arg(&requirement),
    )?;
    let actual = sha256_file(&library)?;
    if actual != JAX_CUDA12.files[0].sha256 {
        bail!(
            "{} has SHA-256 {actual}, expected {}. Fix: delete {} and run `cargo xtask setup \
             --cuda` again",
            library.display(),
            JAX_CUDA12.files[0].sha256,
            dir.display()
        );
    }
    step("setup: the CUDA plugin is installed; try it with `tessera devices --plugin cuda`");
    Ok(())
}

/// JAX's CUDA plugin in the `python3` on PATH, where there is one (a GPU machine may have it and
/// no network).
fn python_cuda_plugin() -> Option<PathBuf> {
    let dir = cmd::output("python3", &["-c", PYTHON_CUDA_PLUGIN_QUERY])?;
    if dir.is_empty() {
        return None;
    }
    let path = PathBuf::from(dir).join(CUDA_PLUGIN_LIBRARY);
    path.is_file().then_some(path)
}

/// True when every file is present with its pinned checksum. A present file with a wrong sum is
/// an error naming the file and the fix.
fn installed(plugin: &KnownPlugin, plugin_dir: &Path) -> anyhow::Result<bool> {
    for file in plugin.files {
        let (rel, sha) = (file.in_cache, file.sha256);
        let path = plugin_dir.join(rel);
        if !path.is_file() {
            return Ok(false);
        }
        if !stamp_matches(&path, sha) {
            let actual = sha256_file(&path)?;
            if actual != sha {
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

fn download_wheel(plugin: &KnownPlugin, wheels: &Path) -> anyhow::Result<PathBuf> {
    let wheel = wheels.join(plugin.wheel);
    let package = format!("{}=={}", plugin.package, plugin.version);
    if wheel.is_file() && sha256_file(&wheel)? == plugin.wheel_sha256 {
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
        "setup: downloading {package} from PyPI with pip into {}",
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
                "3.11",
                "--dest",
            ])
            .arg(wheels)
            .arg(&package),
    )?;
    if !wheel.is_file() {
        bail!(
            "pip finished but {} is not there. Fix: check the pip output above",
            wheel.display()
        );
    }
    let actual = sha256_file(&wheel)?;
    if actual != plugin.wheel_sha256 {
        bail!(
            "{} has SHA-256 {actual}, expected {}. Fix: delete it and run `cargo xtask \
             setup` again; if it persists, PyPI serves a different file than the one pinned",
            wheel.display(),
            plugin.wheel_sha256
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

fn unpack(plugin: &KnownPlugin, wheel: &Path, plugin_dir: &Path) -> anyhow::Result<()> {
    let file = fs::File::open(wheel).with_context(|| format!("opening {}", wheel.display()))?;
    let mut archive = zip::ZipArchive::new(file)
        .with_context(|| format!("{} is not a readable wheel (zip)", wheel.display()))?;
    let staging = plugin_dir.with_extension("partial");
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    for file in plugin.files {
        let mut entry = archive
            .by_name(file.in_wheel)
            .with_context(|| format!("{} has no {}", wheel.display(), file.in_wheel))?;
        let dest = staging.join(file.in_cache);
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
