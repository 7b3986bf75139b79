//! A persistent compile cache: serialized executables on disk, keyed by the SHA-256 of the
//! plugin's identity, the compile options and the module, so a second run skips XLA's compile.

use std::fs;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::client::Client;
use crate::compile_options::CompileOptions;
use crate::error::Result;
use crate::executable::LoadedExecutable;

/// Serialized executables in a folder (by default `<tessera cache>/executables`).
#[derive(Debug, Clone)]
pub struct CompileCache {
    dir: PathBuf,
}

/// Where an executable came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from the cache.
    Hit,
    /// Compiled now (and stored, when the folder is writable).
    Miss,
}

impl CompileCache {
    /// A cache in `dir` (created on first store).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        CompileCache { dir: dir.into() }
    }

    /// The cache under Tessera's cache folder, if there is one.
    pub fn default_location() -> Option<Self> {
        crate::discovery::cache_dir().map(|d| CompileCache::new(d.join("executables")))
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Loads the executable for `module` and `options` from the cache, or compiles and stores it.
    /// A damaged or incompatible entry is compiled again and overwritten; failing to write the
    /// cache never fails the compile.
    pub fn get_or_compile(
        &self,
        client: &Client,
        module: &[u8],
        options: &CompileOptions,
    ) -> Result<(LoadedExecutable, CacheOutcome)> {
        let path = self
            .dir
            .join(format!("{}.xla", self.key(client, module, options)?));
        let cached = fs::read(&path)
            .ok()
            .and_then(|bytes| client.deserialize_executable(&bytes).ok());
        if let Some(executable) = cached {
            if crate::compile_log::enabled() {
                crate::compile_log::log(format_args!(
                    "cache hit: {}",
                    crate::compile_log::module_name(module)
                ));
            }
            return Ok((executable, CacheOutcome::Hit));
        }
        let executable = client.compile(module, options)?;
        if let Ok(bytes) = executable.serialize() {
            let _ = fs::create_dir_all(&self.dir).and_then(|()| write_atomically(&path, &bytes));
        }
        Ok((executable, CacheOutcome::Miss))
    }

    fn key(&self, client: &Client, module: &[u8], options: &CompileOptions) -> Result<String> {
        let mut hasher = Sha256::new();
        let plugin = client.plugin();
        let (major, minor) = plugin.api_version();
        hasher.update(plugin.path().to_string_lossy().as_bytes());
        hasher.update(format!("{major}.{minor}|{}|", client.platform_version()?).as_bytes());
        hasher.update(options.to_proto_bytes());
        hasher.update(b"|");
        hasher.update(module);
        Ok(hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect())
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    fs::write(&tmp, bytes)?;
    fs::rename(tmp, path)
}
