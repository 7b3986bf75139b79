//! Getting the CUDA plugin ready to load. JAX's CUDA plugin does not link the CUDA libraries it
//! needs: in Python, `jax_plugins.xla_cuda12` preloads them from the NVIDIA wheels installed
//! beside it (`site-packages/nvidia/*/lib`). Tessera does the same before loading the plugin,
//! whether it came from `cargo xtask setup --cuda` (a `pip install --target` folder of the same
//! layout) or from a Python installation, and points XLA at the wheel's `ptxas` and libdevice.

use std::path::{Path, PathBuf};

/// Preloads the NVIDIA libraries found beside the plugin at `plugin` (globally, so the plugin's
/// own `dlopen`s find them) and sets `--xla_gpu_cuda_data_dir` when the `nvidia-cuda-nvcc`
/// wheel is there. Does nothing where there are none (a system CUDA installation is then used).
pub(crate) fn prepare(plugin: &Path) {
    // `<site>/jax_plugins/xla_cuda12/xla_cuda_plugin.so`
    let Some(site) = plugin
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
    else {
        return;
    };
    let nvidia = site.join("nvidia");
    preload(&libraries_under(&nvidia));
    let nvcc = nvidia.join("cuda_nvcc");
    if nvcc.is_dir() {
        point_xla_at(&nvcc);
    }
}

/// Every `lib*.so*` in `nvidia/*/lib`.
fn libraries_under(nvidia: &Path) -> Vec<PathBuf> {
    let Ok(packages) = std::fs::read_dir(nvidia) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = packages
        .flatten()
        .filter_map(|package| std::fs::read_dir(package.path().join("lib")).ok())
        .flat_map(|lib| lib.flatten().map(|entry| entry.path()))
        .filter(|path| {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            name.is_some_and(|n| n.starts_with("lib") && n.contains(".so"))
        })
        .collect();
    found.sort();
    found
}

/// Loads the libraries with `RTLD_GLOBAL`, retrying those whose dependencies were not loaded yet
/// until a round makes no progress. They stay loaded for the life of the process.
fn preload(libraries: &[PathBuf]) {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    let mut pending: Vec<&PathBuf> = libraries.iter().collect();
    loop {
        let before = pending.len();
        pending.retain(|path| {
            // SAFETY: loading NVIDIA's libraries runs their initialisers, which are benign.
            match unsafe { Library::open(Some(path.as_os_str()), RTLD_NOW | RTLD_GLOBAL) } {
                Ok(library) => {
                    std::mem::forget(library);
                    false
                }
                Err(_) => true,
            }
        });
        if pending.is_empty() || pending.len() == before {
            return;
        }
    }
}

/// Adds `--xla_gpu_cuda_data_dir=DIR` to `XLA_FLAGS` unless the user set one.
fn point_xla_at(dir: &Path) {
    let flags = std::env::var("XLA_FLAGS").unwrap_or_default();
    if flags.contains("xla_gpu_cuda_data_dir") {
        return;
    }
    let flags = format!("{flags} --xla_gpu_cuda_data_dir={}", dir.display());
    // SAFETY: called before the plugin is loaded, from the thread creating the client; XLA reads
    // XLA_FLAGS when its client is created.
    unsafe { std::env::set_var("XLA_FLAGS", flags.trim()) };
}
