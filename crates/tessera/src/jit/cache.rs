//! `JitCache`: compiled executables keyed by everything that changes them, with typed,
//! normalized shardings (JAX's `SemanticallyEqualShardings` in `_cached_compilation`'s key).
//!
//! The key holds the program (its text and a hash of the whole value, constants included), the
//! input and output shardings as [`NamedSharding::normalized`] values (mesh axes and device
//! order, spec without trailing `None`s, memory kind, logical device ids unless the identity),
//! the donated arguments, the partitioner and the arguments and results whose shardings XLA
//! chooses. Equivalent spellings of one layout (`P('x')` and
//! `P('x', None)`) hit the same entry; the [`Compiled`] returned then shares the executable but
//! carries the caller's own shardings, so its outputs are labelled as the caller asked.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use tessera_pjrt::Client;
use tessera_sharding::NamedSharding;
use tessera_stablehlo::Partitioner;

use super::{Compiled, Jit, JitError};

/// Everything that changes the executable of a [`Jit`]. A field that `Jit` gains must join it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CacheKey {
    /// The program as printed.
    text: String,
    /// A hash of the whole program: the values of its constants (nested ones included), which
    /// the text does not show.
    program_hash: u64,
    /// `None` where XLA chooses (the placeholder given to `Jit::new` does not matter).
    in_shardings: Vec<Option<NamedSharding>>,
    /// `None` where XLA chooses (the placeholder given to `Jit::new` does not matter).
    out_shardings: Vec<Option<NamedSharding>>,
    donated: Vec<(usize, usize)>,
    partitioner: Partitioner,
    /// The results whose shardings XLA chooses.
    unspecified: Vec<bool>,
    /// The arguments whose shardings XLA chooses.
    auto_inputs: Vec<bool>,
    /// The arguments taking the shardings of the arrays passed.
    unspecified_inputs: Vec<bool>,
    /// Whether unread arguments stay in the module.
    keep_unused: bool,
    /// The compiler options, as printed (their values have no `Hash`).
    compiler_options: String,
    /// Whether calls check their results for NaNs (the executable is the same, but the
    /// `Compiled` returned carries the check).
    debug_nans: bool,
    /// Whether calls check their results for infinities.
    debug_infs: bool,
}

impl CacheKey {
    fn of(jit: &Jit) -> CacheKey {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        format!("{:?}", jit.program).hash(&mut hasher);
        CacheKey {
            text: tessera_ir::text::print_closed(&jit.program, 0),
            program_hash: hasher.finish(),
            in_shardings: (jit.in_shardings.iter().zip(&jit.auto_inputs))
                .map(|(s, &auto)| (!auto).then(|| s.normalized()))
                .collect(),
            out_shardings: (jit.out_shardings.iter().zip(&jit.unspecified))
                .map(|(s, &open)| (!open).then(|| s.normalized()))
                .collect(),
            donated: jit.donated.clone(),
            partitioner: jit.partitioner,
            unspecified: jit.unspecified.clone(),
            auto_inputs: jit.auto_inputs.clone(),
            unspecified_inputs: jit.unspecified_inputs.clone(),
            keep_unused: jit.keep_unused,
            compiler_options: format!("{:?}", jit.compiler_options),
            debug_nans: jit.debug_nans,
            debug_infs: jit.debug_infs,
        }
    }
}

/// Compiled executables by everything that changes them, so a program is compiled once per
/// layout.
#[derive(Default)]
pub struct JitCache {
    entries: Mutex<HashMap<CacheKey, Arc<Compiled>>>,
}

impl JitCache {
    /// Compiles `jit` on `client`, or returns the executable compiled before for the same
    /// program and equivalent shardings (the same `Arc` when the shardings are spelled the
    /// same; a [`Compiled`] sharing the executable with `jit`'s own shardings otherwise).
    pub fn get_or_compile(&self, client: &Client, jit: &Jit) -> Result<Arc<Compiled>, JitError> {
        let key = CacheKey::of(jit);
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(hit) = entries.get(&key) {
            if hit.jit.in_shardings == jit.in_shardings
                && hit.jit.out_shardings == jit.out_shardings
            {
                return Ok(hit.clone());
            }
            return Ok(Arc::new(hit.with_jit(jit.clone())));
        }
        let compiled = Arc::new(jit.lower()?.compile(client)?);
        entries.insert(key, compiled.clone());
        Ok(compiled)
    }

    /// Calls `jit` on `args`, its unspecified inputs ([`Jit::with_unspecified_inputs`]) taking
    /// the shardings of the arrays passed, as JAX's `jit` does for arguments without
    /// `in_shardings`: compiled once per layout of those arguments and kept here.
    pub fn call(
        &self,
        client: &Client,
        jit: &Jit,
        args: &[&tessera_pjrt::Array],
    ) -> Result<Vec<tessera_pjrt::Array>, JitError> {
        let jit = jit.specialized_to(args)?;
        self.get_or_compile(client, &jit)?.call(args)
    }

    /// How many executables are cached.
    pub fn len(&self) -> usize {
        self.entries.lock().map(|e| e.len()).unwrap_or(0)
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
