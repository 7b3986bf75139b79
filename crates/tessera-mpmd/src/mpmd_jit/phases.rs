//! An update that mixes groups, cut so that only small values cross them (how clipping by the
//! global gradient norm runs in JAXPP: a reduction across groups, then each group's own update).
//!
//! Walking the update in order, a variable's groups are those of the inputs it depends on, where
//! a *hoisted* variable counts as belonging to none. An equation whose result would depend on
//! several groups, or that reads a hoisted variable, is hoisted when its results are small (at
//! most [`SMALL`] elements): it runs on the host, from *seeds* (the small single-group values it reads, computed on their groups) and
//! from host values. Then every result of the update depends on one group at most and runs
//! there. Three phases: `seeds` (on the groups), `hoisted` (on the host), `update` (the step's
//! results, on the groups of the parameters they update). A mixing equation with a large result,
//! or a large seed, leaves the update as it was (the mixing piece runs on the lowest group).

use std::collections::{BTreeSet, HashMap};

use tessera_ir::passes::eliminate_dead_code;
use tessera_ir::trace::{Tensor, replay_atom, replay_into, trace};
use tessera_ir::{Atom, ClosedJaxpr, Jaxpr, Var};

use crate::driver::DriverError;

/// The most elements a value crossing groups in a cut update may have.
pub(super) const SMALL: usize = 4096;

/// A cut update. Values are numbered in one table: the update's inputs, then the seeds, then the
/// hoisted values.
#[derive(Debug)]
pub(super) struct Phases {
    /// Update inputs → seeds; its inputs are all the update's inputs.
    pub seeds: ClosedJaxpr,
    /// Table slots → hoisted values the last phase reads.
    pub hoisted: ClosedJaxpr,
    /// The table slots `hoisted` takes.
    pub hoisted_inputs: Vec<usize>,
    /// The update's inputs, then the hoisted values it reads → the step's results.
    pub update: ClosedJaxpr,
    /// The group of each seed (its slot is the update's input count plus its position).
    pub seed_groups: Vec<usize>,
}

/// Cuts `update` if it mixes groups and the values crossing them are small; `None` when it does
/// not mix groups or cannot be cut.
pub(super) fn cut(
    update: &ClosedJaxpr,
    place_of_input: &[Option<usize>],
) -> Result<Option<Phases>, DriverError> {
    let jaxpr = &update.jaxpr;
    let Some(walk) = walk(jaxpr, place_of_input) else {
        return Ok(None);
    };
    if walk.hoisted.is_empty() {
        return Ok(None);
    }
    let n = jaxpr.invars.len();
    // The hoisted values that the last phase reads: by a kept equation or as a result.
    let mut needed: Vec<Var> = Vec::new();
    let mut need = |v: Var| {
        if walk.hoisted.contains(&v) && !needed.contains(&v) {
            needed.push(v);
        }
    };
    for (i, eqn) in jaxpr.eqns.iter().enumerate() {
        if !walk.hoisted_eqns.contains(&i) {
            eqn.inputs.iter().filter_map(var).for_each(&mut need);
        }
    }
    jaxpr.outvars.iter().filter_map(var).for_each(&mut need);
    let seed_atoms: Vec<Atom> = walk.seeds.iter().map(|&(v, _)| Atom::Var(v)).collect();
    let seeds = slice(jaxpr, &jaxpr.invars, &seed_atoms)?;
    // The host phase: from the seeds and the update's inputs that no group holds (only those
    // it reads: the others, e.g. optimizer state, stay where they are).
    let needed_atoms: Vec<Atom> = needed.iter().map(|&v| Atom::Var(v)).collect();
    let host_phase = |free: &[usize]| {
        let mut vars: Vec<Var> = free.iter().map(|&i| jaxpr.invars[i]).collect();
        vars.extend(walk.seeds.iter().map(|&(v, _)| v));
        slice(jaxpr, &vars, &needed_atoms)
    };
    let free: Vec<usize> = (0..n).filter(|&i| place_of_input[i].is_none()).collect();
    let all_free = host_phase(&free)?;
    let read = |v: &Var| {
        let atom = Atom::Var(*v);
        all_free.jaxpr.outvars.contains(&atom)
            || all_free.jaxpr.eqns.iter().any(|e| e.inputs.contains(&atom))
    };
    let free: Vec<usize> = free
        .iter()
        .zip(&all_free.jaxpr.invars)
        .filter(|(_, v)| read(v))
        .map(|(&i, _)| i)
        .collect();
    let hoisted = host_phase(&free)?;
    let mut hoisted_inputs = free;
    hoisted_inputs.extend(n..n + walk.seeds.len());
    // The last phase: the update's inputs and the hoisted values it needs.
    let mut update_vars = jaxpr.invars.clone();
    update_vars.extend(&needed);
    let last = slice(jaxpr, &update_vars, &jaxpr.outvars)?;
    Ok(Some(Phases {
        seeds,
        hoisted,
        hoisted_inputs,
        update: last,
        seed_groups: walk.seeds.iter().map(|&(_, g)| g).collect(),
    }))
}

fn var(a: &Atom) -> Option<Var> {
    match a {
        Atom::Var(v) => Some(*v),
        Atom::Lit(_) => None,
    }
}

/// What the walk found: the hoisted variables and equations, and the seeds with their groups.
struct Walk {
    hoisted: BTreeSet<Var>,
    hoisted_eqns: BTreeSet<usize>,
    seeds: Vec<(Var, usize)>,
}

/// The walk's state: each variable's groups (hoisted ones have none) and whether it depends on a
/// hoisted value (then it cannot be a seed: seeds are computed before the host phase).
struct State<'a> {
    jaxpr: &'a Jaxpr,
    groups: HashMap<Var, BTreeSet<usize>>,
    tainted: BTreeSet<Var>,
    producer: HashMap<Var, usize>,
    found: Walk,
}

impl State<'_> {
    fn small(&self, v: Var) -> bool {
        self.jaxpr.aval(v).size() <= SMALL
    }

    /// Moves equation `i` to the host phase: its results must be small; each small value of a
    /// group it reads becomes a seed, or, when it depends on hoisted values itself, is moved to
    /// the host phase too. `false` when that cannot be done.
    fn hoist(&mut self, i: usize) -> bool {
        if self.found.hoisted_eqns.contains(&i) {
            return true;
        }
        let eqn = &self.jaxpr.eqns[i];
        if !eqn.outputs.iter().all(|&o| self.small(o)) {
            return false;
        }
        self.found.hoisted_eqns.insert(i);
        for &o in &eqn.outputs {
            self.found.hoisted.insert(o);
            self.groups.insert(o, BTreeSet::new());
            self.tainted.insert(o);
        }
        for v in eqn.inputs.iter().filter_map(var) {
            let Some(&g) = self.groups.get(&v).and_then(|s| s.first()) else {
                continue;
            };
            if self.tainted.contains(&v) {
                let producer = self.producer.get(&v).copied();
                if !producer.is_some_and(|p| self.hoist(p)) {
                    return false;
                }
            } else if !self.small(v) {
                return false;
            } else if !self.found.seeds.iter().any(|&(s, _)| s == v) {
                self.found.seeds.push((v, g));
            }
        }
        true
    }
}

impl State<'_> {
    /// For an equation with a large result mixing groups: the small operands of the groups other
    /// than that of its large operands become host values (hoisted when they depend on hoisted
    /// values, else passed through the host as seeds). Its groups then, or `None`.
    fn bring_to_one_group(&mut self, eqn: &tessera_ir::Eqn) -> Option<BTreeSet<usize>> {
        let ins: Vec<Var> = eqn.inputs.iter().filter_map(var).collect();
        let held = |state: &Self, v: &Var| state.groups.get(v).cloned().unwrap_or_default();
        let mut home: BTreeSet<usize> = ins
            .iter()
            .filter(|&&v| !self.small(v))
            .flat_map(|v| held(self, v))
            .collect();
        if home.is_empty() {
            home = ins.iter().flat_map(|v| held(self, v)).take(1).collect();
        }
        if home.len() > 1 {
            return None;
        }
        for &v in &ins {
            let groups = held(self, &v);
            let Some(&g) = groups.first() else { continue };
            if groups == home {
                continue;
            }
            if !self.small(v) {
                return None;
            }
            if self.tainted.contains(&v) {
                let producer = self.producer.get(&v).copied();
                if !producer.is_some_and(|p| self.hoist(p)) {
                    return None;
                }
            } else {
                self.found.hoisted.insert(v);
                self.groups.insert(v, BTreeSet::new());
                self.tainted.insert(v);
                if !self.found.seeds.iter().any(|&(s, _)| s == v) {
                    self.found.seeds.push((v, g));
                }
            }
        }
        Some(home)
    }
}

/// Walks the update (see the module docs); `None` when it cannot be cut.
fn walk(jaxpr: &Jaxpr, place_of_input: &[Option<usize>]) -> Option<Walk> {
    let mut state = State {
        jaxpr,
        groups: HashMap::new(),
        tainted: BTreeSet::new(),
        producer: HashMap::new(),
        found: Walk {
            hoisted: BTreeSet::new(),
            hoisted_eqns: BTreeSet::new(),
            seeds: Vec::new(),
        },
    };
    for (i, &v) in jaxpr.invars.iter().enumerate() {
        state
            .groups
            .insert(v, place_of_input[i].into_iter().collect());
    }
    for (i, eqn) in jaxpr.eqns.iter().enumerate() {
        let mut all = BTreeSet::new();
        let mut tainted = false;
        for v in eqn.inputs.iter().filter_map(var) {
            all.extend(state.groups.get(&v).into_iter().flatten().copied());
            tainted |= state.tainted.contains(&v);
        }
        for &o in &eqn.outputs {
            state.producer.insert(o, i);
        }
        if all.len() > 1 {
            let small_results = eqn.outputs.iter().all(|&o| state.small(o));
            if small_results && state.hoist(i) {
                continue;
            }
            // A large result stays on the group of its large operands; its small operands from
            // other groups come through the host.
            all = state.bring_to_one_group(eqn)?;
            tainted = true;
        }
        for &o in &eqn.outputs {
            state.groups.insert(o, all.clone());
            if tainted {
                state.tainted.insert(o);
            }
        }
    }
    Some(state.found)
}

/// The part of `jaxpr` computing `outputs` from `inputs` (any variables of it): the equations
/// whose results are not inputs, replayed where their operands are known.
fn slice(jaxpr: &Jaxpr, inputs: &[Var], outputs: &[Atom]) -> Result<ClosedJaxpr, DriverError> {
    let avals: Vec<_> = inputs.iter().map(|&v| jaxpr.aval(v).clone()).collect();
    let program = trace(&avals, |args| {
        let mut env: HashMap<Var, Tensor> =
            inputs.iter().copied().zip(args.iter().cloned()).collect();
        let Some(anchor) = args.first().cloned() else {
            return Vec::new();
        };
        for eqn in &jaxpr.eqns {
            let known = eqn
                .inputs
                .iter()
                .all(|a| var(a).is_none_or(|v| env.contains_key(&v)));
            if known && !eqn.outputs.iter().any(|o| env.contains_key(o)) {
                replay_into(&mut env, jaxpr, eqn, &anchor);
            }
        }
        outputs
            .iter()
            .map(|a| replay_atom(&env, &anchor, a))
            .collect()
    })
    .map_err(|e| DriverError::Config(format!("cutting the update: {e}")))?;
    Ok(eliminate_dead_code(&program))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;
    use tessera_ir::{DType, ShapedArray};

    fn program(shape: &[i64], f: impl FnOnce(&[Tensor]) -> Vec<Tensor>) -> ClosedJaxpr {
        let aval = ShapedArray::new(DType::F32, shape);
        trace(&[aval.clone(), aval], f).unwrap()
    }

    #[test]
    fn a_norm_over_two_groups_is_cut_at_its_parts() {
        // Each group's part of the squared norm is a seed; the norm runs on the host; each
        // result on the group of its operand.
        let update = program(&[8, 8], |a| {
            let parts: Vec<Tensor> = a.iter().map(|x| x.integer_pow(2).sum(&[0, 1])).collect();
            let norm = (&parts[0] + &parts[1]).sqrt();
            vec![&a[0] * &norm, &a[1] * &norm, norm]
        });
        let cut = cut(&update, &[Some(0), Some(1)]).unwrap().unwrap();
        assert_eq!(cut.seed_groups, vec![0, 1]);
        assert_eq!(cut.hoisted_inputs, vec![2, 3]);
        // The last phase takes the two inputs and the norm.
        assert_eq!(cut.update.jaxpr.invars.len(), 3);
    }

    #[test]
    fn a_large_value_mixing_groups_is_not_cut() {
        let update = program(&[64, 128], |a| vec![&a[0] + &a[1]]);
        assert!(cut(&update, &[Some(0), Some(1)]).unwrap().is_none());
        // Nor is an update that mixes no groups.
        let apart = program(&[8, 8], |a| vec![a[0].sin(), a[1].cos()]);
        assert!(cut(&apart, &[Some(0), Some(1)]).unwrap().is_none());
    }
}
