//! The rewrites of closed jaxprs that only copy, drop or splice equations: they need neither a
//! tracer nor an interpreter, so the parser (positional axes) and the SPMD interpreter
//! (inlining) use them from here. One per file, each a free function from a jaxpr to a new one
//! that keeps the verifier's invariants and the program's meaning. `tessera-transform`'s
//! `passes` re-exports them next to the passes that trace or evaluate.

mod cse;
mod dce;
mod inline;
mod partial_sums;
mod positional;
mod split_stages;

pub use cse::eliminate_common_subexpressions;
pub use dce::{eliminate_dead_code, has_effects};
pub use inline::{inline_all, inline_calls};
pub use partial_sums::keep_partial_sums;
pub use positional::desugar_positional_axes;
pub use split_stages::{StageInput, StageProgram, StageSplit, split_stages};

use std::collections::HashMap;

use crate::program::jaxpr::{Atom, Eqn, Jaxpr, Var};

/// Copies equations into a fresh jaxpr, renaming variables as it goes.
pub struct Rebuild<'a> {
    /// The jaxpr being copied.
    pub old: &'a Jaxpr,
    /// The copy.
    pub new: Jaxpr,
    /// What each of `old`'s variables stands for in `new`.
    pub map: HashMap<Var, Atom>,
}

impl<'a> Rebuild<'a> {
    /// Starts a copy of `old` with the same constvars and invars.
    pub fn new(old: &'a Jaxpr) -> Self {
        let mut rb = Rebuild {
            old,
            new: Jaxpr::default(),
            map: HashMap::new(),
        };
        for &v in &old.constvars {
            let nv = rb.fresh(v);
            rb.new.constvars.push(nv);
        }
        for &v in &old.invars {
            let nv = rb.fresh(v);
            rb.new.invars.push(nv);
        }
        rb
    }

    /// A new variable standing for `old`'s `v`.
    pub fn fresh(&mut self, v: Var) -> Var {
        let nv = self.new.new_var(self.old.aval(v).clone());
        self.map.insert(v, Atom::Var(nv));
        nv
    }

    /// An operand of the old program, renamed.
    pub fn atom(&self, atom: &Atom) -> Atom {
        match atom {
            Atom::Var(v) => self.map.get(v).cloned().unwrap_or(Atom::Var(*v)),
            lit => lit.clone(),
        }
    }

    /// Copies an equation with renamed operands and fresh results.
    pub fn copy(&mut self, eqn: &Eqn) {
        let inputs = eqn.inputs.iter().map(|a| self.atom(a)).collect();
        let outputs = eqn.outputs.iter().map(|&v| self.fresh(v)).collect();
        self.new.eqns.push(Eqn {
            prim: eqn.prim,
            params: eqn.params.clone(),
            inputs,
            outputs,
        });
    }

    /// Finishes with the old results, renamed.
    pub fn finish(mut self) -> Jaxpr {
        self.new.outvars = self.old.outvars.iter().map(|a| self.atom(a)).collect();
        self.new
    }
}
