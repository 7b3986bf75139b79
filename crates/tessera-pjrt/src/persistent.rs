//! The process-wide side of compiling: which persistent compile cache every Tessera compile goes
//! through ([`Client::compile_cached`]), how the environment chooses it, and honest counts of
//! XLA compiles and cache loads.
//!
//! - `TESSERA_COMPILE_CACHE=0` (or `off`, `false`, `no`) turns the cache off; `1`/`on`/`true`/`yes`
//!   or unset leaves it on; any other value is a [`PjrtError::BadEnvironment`].
//! - `TESSERA_COMPILE_CACHE_DIR=DIR` puts it in `DIR` (default `<tessera cache>/executables`).
//! - [`set_compile_cache`] overrides both for the process (a program's own option).
//! - [`compile_counts`] says how many programs this process compiled with XLA and how many it
//!   loaded from the cache; every compile counts, cached or not.
//! - `TESSERA_COMPILE_EVENTS=FILE` appends one line per compile (`compile KEY @NAME`) or load
//!   (`load KEY @NAME`) to `FILE`, so a driver of several processes (`cargo xtask demo`) counts
//!   them all; KEY is the cache key, `-` for a compile outside the cache.

use std::io::Write;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cache::CompileCache;
use crate::client::Client;
use crate::compile_options::CompileOptions;
use crate::error::{PjrtError, Result};
use crate::executable::LoadedExecutable;

/// Turns the persistent compile cache off (`0`, `off`, `false`, `no`).
pub const COMPILE_CACHE_ENV: &str = "TESSERA_COMPILE_CACHE";
/// The persistent compile cache's folder.
pub const COMPILE_CACHE_DIR_ENV: &str = "TESSERA_COMPILE_CACHE_DIR";
/// A file to which each compile and cache load appends a line.
pub const COMPILE_EVENTS_ENV: &str = "TESSERA_COMPILE_EVENTS";

/// How many programs this process compiled with XLA and loaded from the persistent cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompileCounts {
    /// XLA compiles (each `PJRT_Client_Compile` that succeeded).
    pub compiled: u64,
    /// Executables loaded from the persistent compile cache instead of compiled.
    pub loaded: u64,
}

static COMPILED: AtomicU64 = AtomicU64::new(0);
static LOADED: AtomicU64 = AtomicU64::new(0);

/// The compiles and cache loads of this process so far.
pub fn compile_counts() -> CompileCounts {
    CompileCounts {
        compiled: COMPILED.load(Ordering::Relaxed),
        loaded: LOADED.load(Ordering::Relaxed),
    }
}

/// What one compile request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    Compile,
    Load,
}

/// Counts `event` for `module` (cache key `key`) and appends it to `$TESSERA_COMPILE_EVENTS`.
pub(crate) fn record(event: Event, key: Option<&str>, module: &[u8]) {
    let (counter, word) = match event {
        Event::Compile => (&COMPILED, "compile"),
        Event::Load => (&LOADED, "load"),
    };
    counter.fetch_add(1, Ordering::Relaxed);
    let Some(path) = std::env::var_os(COMPILE_EVENTS_ENV).filter(|p| !p.is_empty()) else {
        return;
    };
    let line = format!(
        "{word} {} {}\n",
        key.unwrap_or("-"),
        crate::compile_log::module_name(module)
    );
    // One short write with O_APPEND: lines of concurrent processes do not interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(err) = written
        && !EVENTS_WRITE_FAILED.swap(true, Ordering::Relaxed)
    {
        crate::compile_log::log(format_args!(
            "warning: could not append to the compile-events log {} ({COMPILE_EVENTS_ENV}): {err}; \
             its count of compiles and cache loads is incomplete",
            std::path::Path::new(&path).display()
        ));
    }
}

/// Raised once the compile-events log could not be written (said once per process).
static EVENTS_WRITE_FAILED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// `None`: follow the environment; `Some(setting)`: [`set_compile_cache`]'s.
static OVERRIDE: RwLock<Option<Option<CompileCache>>> = RwLock::new(None);

/// Sets the persistent compile cache of this process (`None`: off), overriding the environment.
pub fn set_compile_cache(cache: Option<CompileCache>) {
    *OVERRIDE.write().unwrap_or_else(|e| e.into_inner()) = Some(cache);
}

/// The persistent compile cache compiles go through: [`set_compile_cache`]'s, else the
/// environment's (see the module docs), else `<tessera cache>/executables`; `None` when it is
/// off or there is no cache folder.
pub fn compile_cache() -> Result<Option<CompileCache>> {
    if let Some(setting) = OVERRIDE.read().unwrap_or_else(|e| e.into_inner()).clone() {
        return Ok(setting);
    }
    compile_cache_from(
        std::env::var(COMPILE_CACHE_ENV).ok().as_deref(),
        std::env::var_os(COMPILE_CACHE_DIR_ENV).as_deref(),
    )
}

/// The cache the two variables' values choose.
fn compile_cache_from(
    switch: Option<&str>,
    dir: Option<&std::ffi::OsStr>,
) -> Result<Option<CompileCache>> {
    let value = switch.unwrap_or("").trim().to_ascii_lowercase();
    match value.as_str() {
        "0" | "off" | "false" | "no" => return Ok(None),
        "" | "1" | "on" | "true" | "yes" => {}
        _ => {
            return Err(PjrtError::BadEnvironment {
                variable: COMPILE_CACHE_ENV.to_owned(),
                value: switch.unwrap_or_default().to_owned(),
                reason: "give 0 (or off) to turn the persistent compile cache off, 1 (or on) \
                         to keep it; its folder is TESSERA_COMPILE_CACHE_DIR"
                    .to_owned(),
            });
        }
    }
    Ok(match dir.filter(|d| !d.is_empty()) {
        Some(dir) => Some(CompileCache::new(dir)),
        None => CompileCache::default_location(),
    })
}

impl Client {
    /// Compiles `module` through the process's persistent compile cache ([`compile_cache`]):
    /// loaded from it when an executable for the same module, options, plugin and plugin version
    /// is there, else compiled (and stored). With the cache off, the same as [`Client::compile`].
    pub fn compile_cached(
        &self,
        module: &[u8],
        options: &CompileOptions,
    ) -> Result<LoadedExecutable> {
        match compile_cache()? {
            Some(cache) => Ok(cache.get_or_compile(self, module, options)?.0),
            None => self.compile(module, options),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_environment_chooses_the_cache() {
        assert!(compile_cache_from(Some("0"), None).unwrap().is_none());
        assert!(
            compile_cache_from(Some("OFF"), Some(OsStr::new("/x")))
                .unwrap()
                .is_none()
        );
        let chosen = compile_cache_from(Some("1"), Some(OsStr::new("/tmp/c"))).unwrap();
        assert_eq!(chosen.unwrap().dir(), std::path::Path::new("/tmp/c"));
        let chosen = compile_cache_from(None, Some(OsStr::new("/tmp/d"))).unwrap();
        assert_eq!(chosen.unwrap().dir(), std::path::Path::new("/tmp/d"));
        assert!(matches!(
            compile_cache_from(Some("maybe"), None),
            Err(PjrtError::BadEnvironment { .. })
        ));
    }
}
