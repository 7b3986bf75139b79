//! Passes over jaxprs: one file each, a verb-phrase free function each, taking a jaxpr and
//! returning a new one. The pipeline a caller runs is a readable list of these calls; tests run
//! the verifier after every one.

mod cse;
mod dce;
mod fold;
mod inline;

pub use cse::eliminate_common_subexpressions;
pub use dce::eliminate_dead_code;
pub use fold::fold_constants;
pub use inline::inline_calls;

use crate::ir::{Atom, Var};
use hashbrown::HashMap;

/// A substitution of variables by atoms, applied to the uses that follow.
#[derive(Default)]
pub(crate) struct Subst(HashMap<Var, Atom>);

impl Subst {
    pub(crate) fn insert(&mut self, v: Var, a: Atom) {
        self.0.insert(v, a);
    }

    pub(crate) fn apply(&self, a: &Atom) -> Atom {
        match a {
            Atom::Var(v) => self.0.get(v).cloned().unwrap_or_else(|| a.clone()),
            Atom::Lit(_) => a.clone(),
        }
    }

    pub(crate) fn apply_all(&self, atoms: &mut [Atom]) {
        for a in atoms {
            *a = self.apply(a);
        }
    }
}
