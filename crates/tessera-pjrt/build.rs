//! Generates Rust bindings for the PJRT C API from the header that ships in the `xla-cpu-pjrt`
//! wheel, which `cargo xtask setup` unpacks into the Tessera cache.

use std::env;
use std::path::PathBuf;

/// The table of plugins `cargo xtask setup` installs (the header comes from `XLA_CPU_PJRT`).
#[allow(dead_code)]
#[path = "src/known_plugins.rs"]
mod known_plugins;

fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = env::var_os("TESSERA_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(dir).join("tessera"));
    }
    env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache").join("tessera"))
}

fn header_path() -> PathBuf {
    if let Some(path) = env::var_os("TESSERA_PJRT_HEADER") {
        return PathBuf::from(path);
    }
    cache_dir()
        .map(|dir| {
            dir.join(known_plugins::XLA_CPU_PJRT.cache_subdir())
                .join("include")
                .join("pjrt_c_api.h")
        })
        .unwrap_or_else(|| PathBuf::from("pjrt_c_api.h"))
}

fn main() {
    println!("cargo::rerun-if-env-changed=TESSERA_PJRT_HEADER");
    println!("cargo::rerun-if-env-changed=TESSERA_CACHE_DIR");
    println!("cargo::rerun-if-env-changed=XDG_CACHE_HOME");
    let header = header_path();
    if !header.is_file() {
        println!(
            "cargo::error=the PJRT C API header is missing: {} does not exist. \
             Fix: run `cargo xtask setup` (it downloads the xla-cpu-pjrt wheel and unpacks the \
             header), or set TESSERA_PJRT_HEADER to a pjrt_c_api.h of API version 0.81 or newer.",
            header.display()
        );
        return;
    }
    println!("cargo::rerun-if-changed={}", header.display());
    let bindings = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .allowlist_type("PJRT_.*")
        .allowlist_var("PJRT_.*")
        .allowlist_function("GetPjrtApi")
        .default_enum_style(bindgen::EnumVariation::NewType {
            is_bitfield: false,
            is_global: false,
        })
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .generate();
    let bindings = match bindings {
        Ok(bindings) => bindings,
        Err(err) => {
            println!(
                "cargo::error=bindgen could not read {}: {err}. Fix: check that libclang is installed \
                 (`cargo xtask setup` installs libclang-22-dev) and that LIBCLANG_PATH points at it.",
                header.display()
            );
            return;
        }
    };
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default()).join("pjrt_c_api.rs");
    if let Err(err) = bindings.write_to_file(&out) {
        println!("cargo::error=could not write {}: {err}", out.display());
    }
}
