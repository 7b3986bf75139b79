//! Asynchronous collectives (JAX's `psum_start`/`psum_done` and the like): a collective split
//! into a start, which launches it, and a done, which waits for its result, so that work
//! placed between the two can overlap the communication.
//!
//! Representation: one primitive per start and one per done, named as JAX names them
//! (`psum_start`, `all_gather_start`, `reduce_scatter_start`, `all_to_all_start`,
//! `pbroadcast_start`, `ppermute_start`, the starts of the `check_vma` and reduced/unreduced
//! collectives `psum_invariant_start`, `unreduced_psum_start`,
//! `unreduced_reduce_scatter_start` and `all_gather_reduced_start`, and `psum_done`,
//! `all_gather_done`, `reduce_scatter_done`, `all_to_all_done`, `pbroadcast_done`,
//! `ppermute_done`). As in JAX, the four later starts have no done of their own: `psum_done`
//! ends `psum_invariant_start` and `unreduced_psum_start` (JAX's `psum_start` binds either,
//! by the operand's type), `reduce_scatter_done` ends `unreduced_reduce_scatter_start` and
//! `all_gather_done` ends `all_gather_reduced_start`. A start
//! belongs to the collective family with its synchronous collective's `CollectiveOp`, so it
//! takes the same parameters (printed the same way), has the same shape and `vma` rule and is
//! simulated by the same code; a done takes no parameters and is the identity on values.
//! Separate primitives (rather than a flag on the collective's parameters) keep JAX's printed
//! form, in which the pair shows as two equations.
//!
//! The pending value: JAX types a start's result as `AbstractTodo` wrapping the collective's
//! type. Tessera gives the start's result the collective's own type and makes pendingness a
//! property of the variable: a variable a start defines is pending, and [`pending_misuse`]
//! (run by the verifier) requires that a done take a start's result (of its own collective),
//! that a pending variable be used by exactly that one done and nowhere else (not by another
//! equation, not as a result of the jaxpr, not by a second done), and that every start be
//! ended (its `async_start` would otherwise lower without an `async_done`; dead-code
//! elimination removes an unused pair whole). The tracing API prevents all but the last
//! (`Pending` is not a `Tensor` and `Pending::done` consumes it); a `Pending` dropped without
//! its done leaves a start the verifier refuses.
//!
//! Lowering (in `tessera-stablehlo`): a start becomes `stablehlo.async_start` around its
//! collective, a done `stablehlo.async_done`, as JAX lowers them.
//!
//! Transformations treat a start/done pair as its collective: the JVP and transpose of a start
//! are its collective's (the tangent and cotangent programs use the synchronous collective),
//! a done passes tangents and cotangents through; `vmap` batches a start by its collective's
//! rule (the batched program uses the synchronous collective) and a done passes the batched
//! value through.

use super::Prim;
use crate::program::jaxpr::{Atom, Jaxpr};

/// The starts, their synchronous collectives and their dones.
const PAIRS: [(Prim, Prim, Prim); 10] = [
    (Prim::PsumStart, Prim::Psum, Prim::PsumDone),
    (Prim::AllGatherStart, Prim::AllGather, Prim::AllGatherDone),
    (
        Prim::ReduceScatterStart,
        Prim::ReduceScatter,
        Prim::ReduceScatterDone,
    ),
    (Prim::AllToAllStart, Prim::AllToAll, Prim::AllToAllDone),
    (
        Prim::PbroadcastStart,
        Prim::Pbroadcast,
        Prim::PbroadcastDone,
    ),
    (Prim::PpermuteStart, Prim::Ppermute, Prim::PpermuteDone),
    // JAX ends these with the done of the collective they share a wrapper with.
    (
        Prim::PsumInvariantStart,
        Prim::PsumInvariant,
        Prim::PsumDone,
    ),
    (
        Prim::UnreducedPsumStart,
        Prim::UnreducedPsum,
        Prim::PsumDone,
    ),
    (
        Prim::UnreducedReduceScatterStart,
        Prim::UnreducedReduceScatter,
        Prim::ReduceScatterDone,
    ),
    (
        Prim::AllGatherReducedStart,
        Prim::AllGatherReduced,
        Prim::AllGatherDone,
    ),
];

impl Prim {
    /// The synchronous collective a start launches (the primitive itself for all others).
    pub fn synchronous(self) -> Prim {
        PAIRS
            .iter()
            .find(|(start, _, _)| *start == self)
            .map_or(self, |&(_, sync, _)| sync)
    }

    /// The start of the asynchronous form of a collective that has one.
    pub fn async_start(self) -> Option<Prim> {
        PAIRS
            .iter()
            .find(|(_, sync, _)| *sync == self)
            .map(|&(start, _, _)| start)
    }

    /// The done that ends a start (`None` for the other primitives).
    pub fn async_done(self) -> Option<Prim> {
        PAIRS
            .iter()
            .find(|(start, _, _)| *start == self)
            .map(|&(_, _, done)| done)
    }

    /// Whether this is the start of an asynchronous collective.
    pub fn is_async_start(self) -> bool {
        self.async_done().is_some()
    }

    /// Whether this is the done of an asynchronous collective.
    pub fn is_async_done(self) -> bool {
        PAIRS.iter().any(|(_, _, done)| *done == self)
    }
}

/// The first misuse of a pending value in `jaxpr` (not its nested jaxprs): the index of the
/// offending equation (the number of equations for the jaxpr's results) and what is wrong.
pub fn pending_misuse(jaxpr: &Jaxpr) -> Option<(usize, String)> {
    // For each variable a start defines: that start, whether a done has taken it, and the
    // start's equation.
    let mut pending: Vec<Option<(Prim, bool, usize)>> = vec![None; jaxpr.vars.len()];
    let of = |atom: &Atom| match atom {
        Atom::Var(v) => Some(v.index()),
        Atom::Lit(..) => None,
    };
    for (i, eqn) in jaxpr.eqns.iter().enumerate() {
        if eqn.prim.is_async_done() {
            let taken = eqn.inputs.first().and_then(of);
            let Some(k) = taken.filter(|&k| matches!(pending.get(k), Some(Some(_)))) else {
                return Some((
                    i,
                    format!(
                        "equation {i}: {} takes a value no start computed; pass it the \
                         result of the matching *_start",
                        eqn.prim.name()
                    ),
                ));
            };
            let Some(Some((start, done, _))) = pending.get_mut(k) else {
                continue;
            };
            if start.async_done() != Some(eqn.prim) {
                return Some((
                    i,
                    format!(
                        "equation {i}: {} ends a {}; end it with {}",
                        eqn.prim.name(),
                        start.name(),
                        start.async_done().map_or("its done", Prim::name)
                    ),
                ));
            }
            if std::mem::replace(done, true) {
                return Some((
                    i,
                    format!(
                        "equation {i}: the {} was already ended by an earlier {}; a start is \
                         ended once (use the first done's result)",
                        start.name(),
                        eqn.prim.name()
                    ),
                ));
            }
        } else if let Some((start, _, _)) = eqn
            .inputs
            .iter()
            .filter_map(of)
            .find_map(|k| pending.get(k).copied().flatten())
        {
            return Some((
                i,
                format!(
                    "equation {i}: {} uses the pending result of a {}; only its {} may take \
                     it (use the done's result)",
                    eqn.prim.name(),
                    start.name(),
                    start.async_done().map_or("done", Prim::name)
                ),
            ));
        }
        if eqn.prim.is_async_start() {
            for v in &eqn.outputs {
                if let Some(slot) = pending.get_mut(v.index()) {
                    *slot = Some((eqn.prim, false, i));
                }
            }
        }
    }
    let returned = jaxpr.outvars.iter().filter_map(of).find_map(|k| {
        pending.get(k).copied().flatten().map(|(start, _, _)| {
            (
                jaxpr.eqns.len(),
                format!(
                    "the jaxpr returns the pending result of a {}; return its {}'s result",
                    start.name(),
                    start.async_done().map_or("done", Prim::name)
                ),
            )
        })
    });
    // A start never ended would lower to an `async_start` without its `async_done`.
    returned.or_else(|| {
        pending
            .iter()
            .flatten()
            .find(|(_, done, _)| !done)
            .map(|&(start, _, i)| {
                (
                    i,
                    format!(
                        "equation {i}: the {} is never ended; pass its result to {} (with the \
                     tracing API, call `done()` on the `Pending`), or remove the start",
                        start.name(),
                        start.async_done().map_or("its done", Prim::name)
                    ),
                )
            })
    })
}
