//! A persistent compile cache: serialized executables on disk, keyed by the SHA-256 of the
//! plugin's identity (its file, size and modification time, PJRT API version, platform name and
//! version, the client's create options and device kind), the host CPU (model and feature flags),
//! the compile options and the module, so a second run skips XLA's compile. Which cache a process uses is `persistent.rs`'s business.
//!
//! A plugin that cannot serialize executables (or load them back) makes every request a compile;
//! the first such failure of the process is said once on stderr.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
        let key = self.key(client, module, options)?;
        let path = self.dir.join(format!("{key}.xla"));
        let cached = match fs::read(&path) {
            Ok(bytes) => match crate::quiet_stderr::without_loader_alarms(|| {
                client.deserialize_executable(&bytes)
            }) {
                Ok(executable) => Some(executable),
                Err(err) => {
                    say_once(&LOAD_FAILED, || {
                        format!(
                            "compile cache: could not load {} ({err}); compiling it again",
                            path.display()
                        )
                    });
                    None
                }
            },
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(err) => {
                say_once(&READ_FAILED, || {
                    format!(
                        "compile cache: could not read {} ({err}); compiling it again (check the \
                         cache folder's permissions, set {} to another folder, or {}=0 to turn \
                         the cache off)",
                        path.display(),
                        crate::persistent::COMPILE_CACHE_DIR_ENV,
                        crate::persistent::COMPILE_CACHE_ENV
                    )
                });
                None
            }
        };
        if let Some(executable) = cached {
            if crate::compile_log::enabled() {
                crate::compile_log::log(format_args!(
                    "cache hit: {}",
                    crate::compile_log::module_name(module)
                ));
            }
            crate::persistent::record(crate::persistent::Event::Load, Some(&key), module);
            return Ok((executable, CacheOutcome::Hit));
        }
        let executable = client.compile_keyed(module, options, Some(&key))?;
        match executable.serialize() {
            Ok(bytes) if !bytes.is_empty() => {
                if let Err(err) =
                    fs::create_dir_all(&self.dir).and_then(|()| write_atomically(&path, &bytes))
                {
                    say_once(&STORE_FAILED, || {
                        format!(
                            "compile cache: could not write {} ({err}); executables are not cached",
                            path.display()
                        )
                    });
                }
            }
            result => say_once(&SERIALIZE_FAILED, || {
                format!(
                    "compile cache: the plugin {} cannot serialize executables ({}); every \
                     program is compiled",
                    client.plugin().path().display(),
                    result
                        .err()
                        .map_or("it gave no bytes".to_owned(), |e| e.to_string())
                )
            }),
        }
        Ok((executable, CacheOutcome::Miss))
    }

    /// The entry's name: the SHA-256 of everything that changes the executable.
    pub fn key(&self, client: &Client, module: &[u8], options: &CompileOptions) -> Result<String> {
        let mut hasher = Sha256::new();
        let plugin = client.plugin();
        let (major, minor) = plugin.api_version();
        let file = fs::metadata(plugin.path()).ok();
        let modified = file
            .as_ref()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let kind = client
            .addressable_devices()?
            .first()
            .map(|d| d.kind())
            .transpose()?
            .unwrap_or_default();
        for part in [
            plugin.path().to_string_lossy().into_owned(),
            format!("{}:{modified}", file.map_or(0, |m| m.len())),
            format!("{major}.{minor}"),
            client.platform_name()?,
            client.platform_version()?,
            client.create_options_text().to_owned(),
            kind,
            host_cpu().to_owned(),
        ] {
            hasher.update(part.as_bytes());
            hasher.update(b"|");
        }
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

/// The host CPU's model and feature flags (`/proc/cpuinfo`'s first `model name` and `flags`),
/// read once: a CPU executable holds machine code for the CPU it was compiled on, and the CPU
/// plugins only warn when they load one built for other features, so the key must tell CPUs
/// apart (a cache folder shared between machines).
fn host_cpu() -> &'static str {
    static CPU: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    CPU.get_or_init(|| {
        let info = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        ["model name", "flags"]
            .iter()
            .filter_map(|field| {
                info.lines()
                    .find(|l| l.split(':').next().is_some_and(|k| k.trim() == *field))
            })
            .collect::<Vec<_>>()
            .join("\n")
    })
}

static SERIALIZE_FAILED: AtomicBool = AtomicBool::new(false);
static LOAD_FAILED: AtomicBool = AtomicBool::new(false);
static STORE_FAILED: AtomicBool = AtomicBool::new(false);
static READ_FAILED: AtomicBool = AtomicBool::new(false);

/// Writes `line()` on stderr the first time `flag` is raised in this process.
fn say_once(flag: &AtomicBool, line: impl FnOnce() -> String) {
    if !flag.swap(true, Ordering::Relaxed) {
        crate::compile_log::log(format_args!("{}", line()));
    }
}

/// Writes `bytes` to a file of its own (per process and call), then renames it to `path`, so
/// a reader (another thread or process) sees the whole entry or none.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let call = WRITES.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}-{call}", std::process::id()));
    fs::write(&tmp, bytes)?;
    fs::rename(tmp, path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use super::*;

    /// An entry that exists but cannot be read (here a folder in its place) is compiled again
    /// and said on stderr once ([`READ_FAILED`]); it read as a plain miss, in silence.
    #[test]
    fn an_unreadable_entry_is_compiled_again_and_said() {
        let client = Client::cpu(1).expect("the PJRT CPU plugin (run `cargo xtask setup`)");
        let dir =
            std::env::temp_dir().join(format!("tessera-cache-unreadable-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let cache = CompileCache::new(&dir);
        let module = b"module @m attributes {mhlo.num_partitions = 1 : i32} {\n  func.func public @main(%a: tensor<f32>) -> tensor<f32> {\n    return %a : tensor<f32>\n  }\n}\n";
        let options = CompileOptions::spmd(&[0]);
        let key = cache.key(&client, module, &options).unwrap();
        fs::create_dir_all(dir.join(format!("{key}.xla"))).unwrap();
        assert!(!READ_FAILED.load(Ordering::Relaxed));
        let (_, outcome) = cache.get_or_compile(&client, module, &options).unwrap();
        assert_eq!(outcome, CacheOutcome::Miss);
        assert!(READ_FAILED.load(Ordering::Relaxed));
        fs::remove_dir_all(&dir).unwrap();
    }
}
