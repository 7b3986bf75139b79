//! Where Tessera looks for PJRT plugins: an explicit path, `TESSERA_PJRT_PLUGIN`, then the cache
//! that `cargo xtask setup` fills.

use std::path::{Path, PathBuf};

use crate::error::{PjrtError, Result};

/// The environment variable naming a plugin to use instead of the cached CPU plugin.
pub const PLUGIN_ENV: &str = "TESSERA_PJRT_PLUGIN";

/// The cache folder of the CPU plugin, relative to [`cache_dir`]. `cargo xtask setup` writes here.
pub const CPU_PLUGIN_DIR: &str = "pjrt/xla-cpu-pjrt-0.0.1";

/// The CPU plugin's file name inside [`CPU_PLUGIN_DIR`].
pub const CPU_PLUGIN_FILE: &str = "xla_cpu_pjrt.so";

/// Tessera's cache folder: `$TESSERA_CACHE_DIR`, else `$XDG_CACHE_HOME/tessera`, else
/// `$HOME/.cache/tessera`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TESSERA_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(dir).join("tessera"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache").join("tessera"))
}

/// The path of the CPU plugin in the cache, whether or not it exists.
pub fn cached_cpu_plugin() -> Option<PathBuf> {
    cache_dir().map(|dir| dir.join(CPU_PLUGIN_DIR).join(CPU_PLUGIN_FILE))
}

/// Finds the plugin to load: `explicit` if given, else `$TESSERA_PJRT_PLUGIN`, else the cached
/// CPU plugin. An explicit or environment path that does not exist is an error naming it; it
/// never silently falls back to another plugin.
pub fn find_plugin(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = explicit {
        return existing(path.to_path_buf(), "the path given");
    }
    if let Some(path) = std::env::var_os(PLUGIN_ENV) {
        return existing(PathBuf::from(path), PLUGIN_ENV);
    }
    match cached_cpu_plugin() {
        Some(path) if path.is_file() => Ok(path),
        Some(path) => Err(PjrtError::PluginNotFound {
            searched: format!("{PLUGIN_ENV} (unset), {}", path.display()),
        }),
        None => Err(PjrtError::PluginNotFound {
            searched: format!("{PLUGIN_ENV} (unset), the cache (HOME is unset)"),
        }),
    }
}

/// The CUDA plugin of the `jax-cuda13-pjrt` (or `jax-cuda12-pjrt`) Python package, where one is
/// installed for the `python3` on `PATH`. `None` when there is none (no GPU stack here).
pub fn find_cuda_plugin() -> Option<PathBuf> {
    const QUERY: &str = "import importlib.util as u\n\
for m in ('jax_plugins.xla_cuda13', 'jax_plugins.xla_cuda12'):\n\
    try:\n\
        s = u.find_spec(m)\n\
    except Exception:\n\
        s = None\n\
    if s and s.submodule_search_locations:\n\
        print(list(s.submodule_search_locations)[0]); break\n";
    let out = std::process::Command::new("python3")
        .args(["-c", QUERY])
        .output()
        .ok()?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let path = PathBuf::from(dir).join("xla_cuda_plugin.so");
    (out.status.success() && path.is_file()).then_some(path)
}

fn existing(path: PathBuf, source: &str) -> Result<PathBuf> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(PjrtError::PluginNotFound {
            searched: format!("{} (from {source}; no such file)", path.display()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_discovery_finds_nothing_or_a_real_file() {
        if let Some(path) = find_cuda_plugin() {
            assert!(
                path.is_file() && path.ends_with("xla_cuda_plugin.so"),
                "{}",
                path.display()
            );
        }
    }

    #[test]
    fn explicit_missing_path_is_named_in_the_error() {
        let err = find_plugin(Some(Path::new("/nonexistent/plugin.so"))).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("/nonexistent/plugin.so"), "{text}");
        assert!(text.contains("cargo xtask setup"), "{text}");
    }
}
