//! Helpers shared by the workspace-level integration tests.

use std::path::PathBuf;

/// The repository root (the parent of this package's directory).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// The `shared/` folder beside the repository, holding the JAX oracle files.
pub fn shared_dir() -> PathBuf {
    repo_root().join("..").join("shared")
}

/// The path of the built `tessera` binary (built by `cargo xtask test` before the tests run).
pub fn tessera_bin() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    target.join("debug").join("tessera")
}
