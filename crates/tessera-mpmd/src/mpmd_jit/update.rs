//! The code of a step outside its `treduce` (the optimizer update): one program from the step's
//! arguments and the loop's results to the step's results, split by where each result can run.
//! A result that reads a parameter or a gradient runs on the group holding it; one that reads
//! neither (the mean loss) runs on the host; one that mixes groups (e.g. clipping by the global
//! gradient norm) runs on the lowest of them, the other groups' values copied there (under MPI
//! sent there by the processes holding them, `update_across.rs`).

use std::collections::{BTreeSet, HashMap};

use tessera_ir::passes::eliminate_dead_code;
use tessera_ir::trace::{Tensor, replay_atom, replay_into, trace};
use tessera_ir::{Atom, ClosedJaxpr, Jaxpr, ShapedArray, Var};

use crate::driver::DriverError;

/// Where a result of the update runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Place {
    /// On an MPMD group.
    Group(usize),
    /// On the host (reference interpreter).
    Host,
}

/// The update restricted to some results: the program, which update inputs it reads, and which
/// results it computes.
#[derive(Debug)]
pub(super) struct Piece {
    pub place: Place,
    pub program: ClosedJaxpr,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
}

/// The inputs each variable of `jaxpr` depends on (indices into its invars).
fn dependencies(jaxpr: &Jaxpr) -> HashMap<Var, BTreeSet<usize>> {
    let mut deps: HashMap<Var, BTreeSet<usize>> = HashMap::new();
    for (i, &v) in jaxpr.invars.iter().enumerate() {
        deps.insert(v, BTreeSet::from([i]));
    }
    for eqn in &jaxpr.eqns {
        let mut set = BTreeSet::new();
        for a in &eqn.inputs {
            if let Atom::Var(v) = a {
                set.extend(deps.get(v).into_iter().flatten().copied());
            }
        }
        for &o in &eqn.outputs {
            deps.insert(o, set.clone());
        }
    }
    deps
}

fn atom_deps(deps: &HashMap<Var, BTreeSet<usize>>, a: &Atom) -> BTreeSet<usize> {
    match a {
        Atom::Var(v) => deps.get(v).cloned().unwrap_or_default(),
        Atom::Lit(_) => BTreeSet::new(),
    }
}

/// Splits `update` by place; `place_of_input[i]` is where input `i` lives (`None`: anywhere).
pub(super) fn split(
    update: &ClosedJaxpr,
    place_of_input: &[Option<usize>],
) -> Result<Vec<Piece>, DriverError> {
    let jaxpr = &update.jaxpr;
    let deps = dependencies(jaxpr);
    let mut by_place: std::collections::BTreeMap<Place, Vec<usize>> = Default::default();
    for (k, out) in jaxpr.outvars.iter().enumerate() {
        let groups: BTreeSet<usize> = atom_deps(&deps, out)
            .iter()
            .filter_map(|&i| place_of_input[i])
            .collect();
        let place = match groups.first() {
            None => Place::Host,
            Some(&lowest) => Place::Group(lowest),
        };
        by_place.entry(place).or_default().push(k);
    }
    by_place
        .into_iter()
        .map(|(place, outputs)| {
            let (program, inputs) = restrict(update, &deps, &outputs)?;
            Ok(Piece {
                place,
                program,
                inputs,
                outputs,
            })
        })
        .collect()
}

/// The program computing only `outputs` of `update`, taking only the inputs they read.
fn restrict(
    update: &ClosedJaxpr,
    deps: &HashMap<Var, BTreeSet<usize>>,
    outputs: &[usize],
) -> Result<(ClosedJaxpr, Vec<usize>), DriverError> {
    let jaxpr = &update.jaxpr;
    let used: BTreeSet<usize> = outputs
        .iter()
        .flat_map(|&k| atom_deps(deps, &jaxpr.outvars[k]))
        .collect();
    let inputs: Vec<usize> = used.iter().copied().collect();
    let avals: Vec<ShapedArray> = inputs
        .iter()
        .map(|&i| jaxpr.aval(jaxpr.invars[i]).clone())
        .collect();
    let program = trace(&avals, |args| {
        let mut env: HashMap<Var, Tensor> = inputs
            .iter()
            .zip(args)
            .map(|(&i, t)| (jaxpr.invars[i], t.clone()))
            .collect();
        let anchor = args.first().cloned();
        for eqn in &jaxpr.eqns {
            let needs = eqn
                .outputs
                .first()
                .and_then(|o| deps.get(o))
                .is_some_and(|d| d.is_subset(&used));
            if !needs {
                continue;
            }
            let Some(anchor) = &anchor else { break };
            replay_into(&mut env, jaxpr, eqn, anchor);
        }
        outputs
            .iter()
            .filter_map(|&k| {
                let anchor = anchor.as_ref()?;
                Some(replay_atom(&env, anchor, &jaxpr.outvars[k]))
            })
            .collect()
    })
    .map_err(|e| DriverError::Config(format!("splitting the update: {e}")))?;
    Ok((eliminate_dead_code(&program), inputs))
}
