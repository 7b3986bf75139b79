//! Where Tessera finds PJRT plugins. A plugin is asked for by name (`cpu`, `zml-cpu`,
//! `xla-cpu-pjrt`, `jax-0.11-cpu`, `cuda`; see [`crate::known_plugins`]) or by path, from an
//! explicit argument (`--plugin`), else `TESSERA_PJRT_PLUGIN`, else the default CPU plugin in the
//! cache that `cargo xtask setup` fills.

use std::path::{Path, PathBuf};

use crate::error::{PjrtError, Result};
use crate::known_plugins::{
    CUDA_PLUGIN_LIBRARY, DEFAULT_CPU_PLUGIN, JAX_CUDA12, KnownPlugin, PYTHON_CUDA_PLUGIN_QUERY,
    PluginPlatform, known_plugin, known_plugin_names,
};

/// The environment variable naming the plugin to use (a name or a path) when none is given.
pub const PLUGIN_ENV: &str = "TESSERA_PJRT_PLUGIN";

/// A plugin resolved to a file: what to load and which client options it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginChoice {
    /// The plugin library.
    pub path: PathBuf,
    /// Its platform, where known (from its name, or guessed from a path's file name); `None`
    /// means "pass no platform options".
    pub platform: Option<PluginPlatform>,
    /// How the user named it (`cpu`, a path, ...), for messages.
    pub label: String,
}

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

/// Where `cargo xtask setup` puts a known plugin's library, whether or not it is there.
pub fn cached_plugin(plugin: &KnownPlugin) -> Option<PathBuf> {
    cache_dir().map(|dir| dir.join(plugin.cache_subdir()).join(plugin.library()))
}

/// The path of the default CPU plugin in the cache, whether or not it exists.
pub fn cached_cpu_plugin() -> Option<PathBuf> {
    cached_plugin(&DEFAULT_CPU_PLUGIN)
}

/// Resolves a plugin request: `request` if given, else `$TESSERA_PJRT_PLUGIN`, else the default
/// CPU plugin. A request is a known name or a path; a missing file is an error naming it and the
/// fix, never a silent fallback to another plugin.
pub fn resolve_plugin(request: Option<&str>) -> Result<PluginChoice> {
    if let Some(request) = request {
        return resolve_request(request, "--plugin");
    }
    if let Some(value) = std::env::var_os(PLUGIN_ENV) {
        return resolve_request(&value.to_string_lossy(), PLUGIN_ENV);
    }
    resolve_request("cpu", "the default")
}

/// Finds the plugin file to load: `explicit` if given, else as [`resolve_plugin`] does.
pub fn find_plugin(explicit: Option<&Path>) -> Result<PathBuf> {
    let request = explicit.map(|path| path.to_string_lossy().into_owned());
    Ok(resolve_plugin(request.as_deref())?.path)
}

fn resolve_request(request: &str, source: &str) -> Result<PluginChoice> {
    if request == JAX_CUDA12.name {
        return resolve_cuda();
    }
    if let Some(plugin) = known_plugin(request) {
        let path = cached_plugin(&plugin).ok_or_else(|| PjrtError::PluginNotFound {
            searched: format!("the cache for `{request}` (HOME is unset)"),
        })?;
        if !path.is_file() {
            return Err(PjrtError::PluginNotInstalled {
                name: request.to_owned(),
                path,
                fix: format!("run `cargo xtask setup --plugin {}`", plugin.name),
            });
        }
        return Ok(PluginChoice {
            path,
            platform: Some(plugin.platform),
            label: request.to_owned(),
        });
    }
    let path = PathBuf::from(request);
    let looks_like_path = request.contains('/') || request.ends_with(".so");
    if !looks_like_path {
        return Err(PjrtError::UnknownPluginName {
            name: request.to_owned(),
            known: known_plugin_names().join(", "),
        });
    }
    if !path.is_file() {
        return Err(PjrtError::PluginNotFound {
            searched: format!("{} (from {source}; no such file)", path.display()),
        });
    }
    Ok(PluginChoice {
        platform: platform_from_file_name(&path),
        path,
        label: request.to_owned(),
    })
}

/// `cuda`: the plugin `cargo xtask setup --cuda` installed, else the one of a `jax-cuda12-pjrt`
/// or `jax-cuda13-pjrt` package in the `python3` on `PATH`.
fn resolve_cuda() -> Result<PluginChoice> {
    let cached = cache_dir().map(|dir| {
        dir.join(JAX_CUDA12.cache_subdir())
            .join("jax_plugins/xla_cuda12")
            .join(JAX_CUDA12.library())
    });
    let path = match cached.filter(|path| path.is_file()) {
        Some(path) => path,
        None => match find_cuda_plugin() {
            Some(path) => path,
            None if !nvidia_driver_present() => {
                return Err(PjrtError::NoGpu {
                    plugin: PathBuf::from("cuda"),
                    message: "no NVIDIA driver was found (no /proc/driver/nvidia, no \
                              /dev/nvidiactl, no libcuda.so.1), and no CUDA plugin is \
                              installed either (`cargo xtask setup --cuda` installs one)"
                        .into(),
                });
            }
            None => return Err(PjrtError::CudaPluginNotInstalled),
        },
    };
    Ok(PluginChoice {
        path,
        platform: Some(PluginPlatform::Cuda),
        label: "cuda".to_owned(),
    })
}

/// Whether this machine has an NVIDIA driver: its kernel module, its control device, or its
/// user-space library.
pub fn nvidia_driver_present() -> bool {
    if Path::new("/proc/driver/nvidia/version").exists() || Path::new("/dev/nvidiactl").exists() {
        return true;
    }
    // SAFETY: loading the CUDA driver library runs its initialisers, which are benign; it is
    // unloaded again at once.
    unsafe { libloading::Library::new("libcuda.so.1") }.is_ok()
}

/// A path's platform from its file name: XLA's plugins are named after it (`xla_cuda_plugin.so`,
/// `libpjrt_cpu.so`, `xla_cpu_pjrt.so`).
pub(crate) fn platform_from_file_name(path: &Path) -> Option<PluginPlatform> {
    let name = path.file_name()?.to_string_lossy().to_lowercase();
    if name.contains("cuda") || name.contains("gpu") {
        Some(PluginPlatform::Cuda)
    } else if name.contains("cpu") {
        Some(PluginPlatform::Cpu)
    } else {
        None
    }
}

/// The CUDA plugin of the `jax-cuda13-pjrt` (or `jax-cuda12-pjrt`) Python package, where one is
/// installed for the `python3` on `PATH`. `None` when there is none (no GPU stack here).
pub fn find_cuda_plugin() -> Option<PathBuf> {
    find_cuda_plugin_with(None)
}

/// [`find_cuda_plugin`], with `python_path` put first on Python's module path.
fn find_cuda_plugin_with(python_path: Option<&Path>) -> Option<PathBuf> {
    let mut query = std::process::Command::new("python3");
    query.args(["-c", PYTHON_CUDA_PLUGIN_QUERY]);
    if let Some(dir) = python_path {
        query.env("PYTHONPATH", dir);
    }
    let out = query.output().ok()?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let path = PathBuf::from(dir).join(CUDA_PLUGIN_LIBRARY);
    (out.status.success() && path.is_file()).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A package laid out as JAX's CUDA plugin (`jax_plugins/xla_cuda13` holding
    /// `xla_cuda_plugin.so`) on Python's path is found, whether or not this machine has a real
    /// one; its library missing, it is not.
    #[test]
    fn cuda_discovery_finds_the_plugin_package_on_pythons_path() {
        let root = std::env::temp_dir().join(format!("tessera-fake-cuda-{}", std::process::id()));
        let package = root.join("jax_plugins").join("xla_cuda13");
        std::fs::create_dir_all(&package).unwrap();
        std::fs::write(package.join("__init__.py"), "").unwrap();
        assert_eq!(find_cuda_plugin_with(Some(&root)), None, "no library yet");
        std::fs::write(package.join(CUDA_PLUGIN_LIBRARY), "").unwrap();
        let found = find_cuda_plugin_with(Some(&root)).expect("the package on PYTHONPATH");
        assert_eq!(
            found.canonicalize().unwrap(),
            package.join(CUDA_PLUGIN_LIBRARY).canonicalize().unwrap()
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// The query is valid Python (indentation included) and exits cleanly with or without a
    /// CUDA plugin installed (python3 is on every machine Tessera is set up on).
    #[test]
    fn the_python_query_for_the_cuda_plugin_runs() {
        let out = std::process::Command::new("python3")
            .args(["-c", PYTHON_CUDA_PLUGIN_QUERY])
            .output()
            .expect("python3 on PATH");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn explicit_missing_path_is_named_in_the_error() {
        let err = find_plugin(Some(Path::new("/nonexistent/plugin.so"))).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("/nonexistent/plugin.so"), "{text}");
        assert!(text.contains("cargo xtask setup"), "{text}");
    }

    #[test]
    fn an_unknown_name_lists_the_known_ones() {
        let text = resolve_plugin(Some("tpu")).unwrap_err().to_string();
        assert!(text.contains("`tpu`"), "{text}");
        for name in known_plugin_names() {
            assert!(text.contains(name), "{name} missing from: {text}");
        }
    }

    #[test]
    fn known_names_resolve_to_their_cache_folder_and_platform() {
        for name in ["cpu", "zml-cpu", "xla-cpu-pjrt", "jax-0.11-cpu"] {
            match resolve_plugin(Some(name)) {
                Ok(choice) => {
                    assert_eq!(choice.platform, Some(PluginPlatform::Cpu), "{name}");
                    assert!(choice.path.is_file(), "{}", choice.path.display());
                }
                // Not installed here: the error says how to install it.
                Err(err) => assert!(
                    err.to_string().contains("cargo xtask setup --plugin"),
                    "{name}: {err}"
                ),
            }
        }
    }

    /// Gated on the machine: without a GPU `cuda` says so; with one it finds a plugin or says
    /// how to install it.
    #[test]
    fn cuda_without_a_gpu_says_no_gpu_or_driver_was_found() {
        match resolve_plugin(Some("cuda")) {
            Ok(choice) => assert_eq!(choice.platform, Some(PluginPlatform::Cuda)),
            Err(err) if nvidia_driver_present() => {
                assert!(matches!(err, PjrtError::CudaPluginNotInstalled), "{err}");
            }
            Err(err) => {
                let text = err.to_string();
                assert!(text.contains("no usable NVIDIA GPU"), "{text}");
                assert!(text.contains("no NVIDIA driver was found"), "{text}");
            }
        }
    }

    #[test]
    fn platforms_are_guessed_from_plugin_file_names() {
        let guess = |name: &str| platform_from_file_name(Path::new(name));
        assert_eq!(guess("/x/xla_cuda_plugin.so"), Some(PluginPlatform::Cuda));
        assert_eq!(guess("/x/libpjrt_cpu.so"), Some(PluginPlatform::Cpu));
        assert_eq!(guess("/x/xla_cpu_pjrt.so"), Some(PluginPlatform::Cpu));
        assert_eq!(guess("/x/libtpu.so"), None);
    }
}
