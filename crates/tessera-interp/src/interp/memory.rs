//! The interpreter's memory limit. Before an equation runs, the bytes its results take and the
//! views its rule decodes them through are compared with a limit, and an equation over it is an
//! [`IrError::InterpMemory`] naming it, instead of an allocation that fails and aborts the
//! process (a valid program may hold a 40 GB intermediate, which only a device should run).
//!
//! The limit ([`MemoryLimit`]) is, in order: the one a caller gives
//! ([`super::eval_closed_with_limit`]); the environment variable [`LIMIT_VAR`]
//! (`TESSERA_INTERP_MAX_BYTES`: whole bytes, or with a `K`, `M`, `G` or `T` suffix, powers of
//! 1024); three quarters of the memory Linux reports available (`MemAvailable` in
//! `/proc/meminfo`); else 4 GiB. The variable and `/proc/meminfo` are read once, the first time
//! the interpreter runs in the process.
//!
//! An equation that needs more than [`RESERVE_FROM`] bytes is also reserved fallibly
//! (`Vec::try_reserve_exact`) before its rule runs, so an allocator that cannot give that much
//! now is an [`IrError::HostAlloc`], not an abort.

use std::cell::Cell;
use std::fmt;
use std::sync::OnceLock;

use crate::array::element_count;
use crate::error::{IrError, Result};
use crate::jaxpr::Jaxpr;

/// The environment variable that sets the interpreter's memory limit.
pub const LIMIT_VAR: &str = "TESSERA_INTERP_MAX_BYTES";

/// The limit where neither the variable nor `/proc/meminfo` gives one.
const FALLBACK_BYTES: u64 = 4 << 30;

/// Bytes a rule holds per result element besides the result's own: its elements decoded to an
/// exact integer or `f64` view (up to 16 bytes) and the `Elem`s being encoded (8 bytes).
pub const VIEW_BYTES_PER_ELEMENT: u64 = 24;

/// Equations needing at least this many bytes are reserved fallibly before they run.
pub const RESERVE_FROM: u64 = 64 << 20;

/// Where a limit came from (for the error message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Caller,
    Variable,
    /// `MemAvailable`, in bytes.
    Available(u64),
    Fallback,
}

/// How many bytes one equation of the interpreter may need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimit {
    bytes: u64,
    source: Source,
}

impl MemoryLimit {
    /// A limit of `bytes`, given by the caller.
    pub fn bytes(bytes: u64) -> MemoryLimit {
        MemoryLimit {
            bytes,
            source: Source::Caller,
        }
    }

    /// The limit in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.bytes
    }

    /// The limit from [`LIMIT_VAR`]'s value `variable` if set, else from the text of
    /// `/proc/meminfo` (three quarters of `MemAvailable`), else 4 GiB. A value of the variable
    /// that is not a byte count is an [`IrError::MemoryLimitSetting`].
    pub fn from_settings(variable: Option<&str>, meminfo: Option<&str>) -> Result<MemoryLimit> {
        if let Some(value) = variable {
            let bytes = parse_bytes(value).ok_or_else(|| IrError::MemoryLimitSetting {
                value: value.to_owned(),
            })?;
            return Ok(MemoryLimit {
                bytes,
                source: Source::Variable,
            });
        }
        Ok(match meminfo.and_then(mem_available) {
            Some(available) => MemoryLimit {
                bytes: available / 4 * 3,
                source: Source::Available(available),
            },
            None => MemoryLimit {
                bytes: FALLBACK_BYTES,
                source: Source::Fallback,
            },
        })
    }

    /// The process's limit: [`LIMIT_VAR`] and `/proc/meminfo`, read once.
    pub fn from_environment() -> Result<MemoryLimit> {
        static LIMIT: OnceLock<Result<MemoryLimit>> = OnceLock::new();
        LIMIT
            .get_or_init(|| {
                let variable = std::env::var(LIMIT_VAR).ok();
                let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
                MemoryLimit::from_settings(variable.as_deref(), meminfo.as_deref())
            })
            .clone()
    }
}

/// Says where the limit came from.
impl fmt::Display for MemoryLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.source {
            Source::Caller => write!(f, "{} bytes, given by the caller", self.bytes),
            Source::Variable => write!(f, "{} bytes, set by {LIMIT_VAR}", self.bytes),
            Source::Available(available) => write!(
                f,
                "{} bytes, three quarters of the {available} bytes MemAvailable in /proc/meminfo",
                self.bytes
            ),
            Source::Fallback => write!(
                f,
                "{} bytes, the default where /proc/meminfo gives no MemAvailable",
                self.bytes
            ),
        }
    }
}

/// `123`, `8K`, `3M`, `16G`, `2T` (powers of 1024, either case) as bytes.
fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, shift) = match text.char_indices().last()? {
        (i, 'k' | 'K') => (&text[..i], 10),
        (i, 'm' | 'M') => (&text[..i], 20),
        (i, 'g' | 'G') => (&text[..i], 30),
        (i, 't' | 'T') => (&text[..i], 40),
        _ => (text, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// The memory Linux reports available to new allocations now (`MemAvailable` of
/// `/proc/meminfo`, read afresh), in bytes; `None` where it is not known.
pub fn available_now() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .as_deref()
        .and_then(mem_available)
}

/// `MemAvailable` of `/proc/meminfo`'s text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kib = line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
    kib.checked_mul(1024)
}

thread_local! {
    /// The limit a caller set for the evaluation running on this thread.
    static GIVEN: Cell<Option<MemoryLimit>> = const { Cell::new(None) };
}

/// The limit in force on this thread: a caller's, else the process's.
pub(crate) fn current() -> Result<MemoryLimit> {
    match GIVEN.with(Cell::get) {
        Some(limit) => Ok(limit),
        None => MemoryLimit::from_environment(),
    }
}

/// Runs `f` with `limit` in force on this thread (nested jaxprs included), then restores the
/// limit there was.
pub(crate) fn with_limit<T>(limit: MemoryLimit, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<MemoryLimit>);
    impl Drop for Restore {
        fn drop(&mut self) {
            GIVEN.with(|g| g.set(self.0));
        }
    }
    let _restore = Restore(GIVEN.with(|g| g.replace(Some(limit))));
    f()
}

/// Checks that equation `index` of `jaxpr`, run `copies` times at once (one per simulated
/// device), fits `limit`, and reserves what it needs when that is large.
pub(crate) fn check_equation(
    jaxpr: &Jaxpr,
    index: usize,
    copies: usize,
    limit: &MemoryLimit,
) -> Result<()> {
    let eqn = &jaxpr.eqns[index];
    let copies = u64::try_from(copies).unwrap_or(u64::MAX);
    let (mut results, mut needed) = (0u64, 0u64);
    for &v in &eqn.outputs {
        let aval = jaxpr.aval(v);
        let count = u64::try_from(element_count(&aval.shape)).unwrap_or(u64::MAX);
        let size = u64::try_from(aval.dtype.size_in_bytes()).unwrap_or(u64::MAX);
        let bytes = count.saturating_mul(size).saturating_mul(copies);
        results = results.saturating_add(bytes);
        needed = needed.saturating_add(bytes).saturating_add(
            count
                .saturating_mul(VIEW_BYTES_PER_ELEMENT)
                .saturating_mul(copies),
        );
    }
    let describe = || {
        let mut line = crate::text::print_eqn_lines(jaxpr)
            .get(index)
            .cloned()
            .unwrap_or_else(|| eqn.prim.name().to_owned());
        if let Some((cut, _)) = line.char_indices().nth(160) {
            line.truncate(cut);
            line.push_str(" ...");
        }
        line
    };
    if needed > limit.bytes {
        return Err(IrError::InterpMemory {
            index,
            eqn: describe(),
            results,
            needed,
            limit: limit.bytes,
            limit_from: limit.to_string(),
        });
    }
    if needed >= RESERVE_FROM {
        let mut probe = Vec::<u8>::new();
        let refused = usize::try_from(needed)
            .map_err(|_| ())
            .and_then(|n| probe.try_reserve_exact(n).map_err(|_| ()));
        // Kept opaque so that the reservation is not optimised away; freed here.
        drop(std::hint::black_box(probe));
        if refused.is_err() {
            return Err(IrError::HostAlloc {
                bytes: needed,
                what: format!("equation {index} (`{}`)", describe()),
            });
        }
    }
    Ok(())
}
