//! Splitting a program in two by its results: the first part computes the chosen results with
//! only the equations they need, and hands on every value the rest of the program reads from it
//! (or from the arguments); the second part computes the other results from those values alone,
//! without recomputing anything. Pipelines use it to split a stage's backward pass into the
//! input-gradient task (`BwdI`) and the weight-gradient task (`BwdW`).

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::error::Result;
use crate::jaxpr::{Atom, ClosedJaxpr, Jaxpr, Var};
use crate::trace::{Tensor, replay_atom, replay_into, trace};

use crate::rewrite::{eliminate_dead_code, inline_calls};

/// The two parts of a split program.
#[derive(Debug, Clone)]
pub struct OutputSplit {
    /// The program's arguments to `(the chosen results..., handed-on values...)`.
    pub first: ClosedJaxpr,
    /// `(handed-on values...)` to the other results, in their order.
    pub second: ClosedJaxpr,
    /// How many values the first part hands on.
    pub handed_on: usize,
}

/// The equations (indices) the atoms `roots` depend on.
fn needed(jaxpr: &Jaxpr, roots: &[&Atom]) -> HashSet<usize> {
    let producer: HashMap<Var, usize> = jaxpr
        .eqns
        .iter()
        .enumerate()
        .flat_map(|(i, e)| e.outputs.iter().map(move |&v| (v, i)))
        .collect();
    let mut stack: Vec<Var> = roots
        .iter()
        .filter_map(|a| match a {
            Atom::Var(v) => Some(*v),
            Atom::Lit(_) => None,
        })
        .collect();
    let mut out = HashSet::new();
    while let Some(v) = stack.pop() {
        if let Some(&i) = producer.get(&v)
            && out.insert(i)
        {
            stack.extend(jaxpr.eqns[i].inputs.iter().filter_map(|a| match a {
                Atom::Var(v) => Some(*v),
                Atom::Lit(_) => None,
            }));
        }
    }
    out
}

/// Splits `program` (nested calls are inlined first): results `first` go to the first part.
pub fn split_outputs(program: &ClosedJaxpr, first: &[usize]) -> Result<OutputSplit> {
    let flat = inline_calls(program);
    let jaxpr = &flat.jaxpr;
    let outs = &jaxpr.outvars;
    let rest: Vec<usize> = (0..outs.len()).filter(|k| !first.contains(k)).collect();
    let in_first = needed(jaxpr, &first.iter().map(|&k| &outs[k]).collect::<Vec<_>>());
    let mut in_second: Vec<usize> =
        needed(jaxpr, &rest.iter().map(|&k| &outs[k]).collect::<Vec<_>>())
            .into_iter()
            .filter(|i| !in_first.contains(i))
            .collect();
    in_second.sort_unstable();
    // Values the second part reads but does not compute, in program order.
    let computed: HashSet<Var> = in_second
        .iter()
        .flat_map(|&i| jaxpr.eqns[i].outputs.iter().copied())
        .collect();
    let mut handed: BTreeSet<Var> = BTreeSet::new();
    let reads = in_second
        .iter()
        .flat_map(|&i| jaxpr.eqns[i].inputs.iter())
        .chain(rest.iter().map(|&k| &outs[k]));
    for a in reads {
        if let Atom::Var(v) = a
            && !computed.contains(v)
        {
            handed.insert(*v);
        }
    }
    let handed: Vec<Var> = handed.into_iter().collect();
    if (handed.is_empty() && !rest.is_empty()) || jaxpr.invars.is_empty() {
        return Err(crate::error::type_error(
            "split_outputs",
            "both parts need arguments to compute from; this program has nothing to split",
        ));
    }
    let mut in_first_sorted: Vec<usize> = in_first.into_iter().collect();
    in_first_sorted.sort_unstable();
    let first_part = trace(&jaxpr.in_avals(), |args| {
        let env: HashMap<Var, Tensor> = jaxpr
            .invars
            .iter()
            .copied()
            .zip(args.iter().cloned())
            .collect();
        let Some(anchor) = args.first().cloned() else {
            return Vec::new();
        };
        let env = run(jaxpr, &in_first_sorted, env, &anchor);
        let mut results: Vec<Tensor> = first
            .iter()
            .map(|&k| replay_atom(&env, &anchor, &outs[k]))
            .collect();
        results.extend(
            handed
                .iter()
                .map(|&v| replay_atom(&env, &anchor, &Atom::Var(v))),
        );
        results
    })?;
    let handed_avals: Vec<_> = handed.iter().map(|&v| jaxpr.aval(v).clone()).collect();
    let second_part = trace(&handed_avals, |args| {
        let env: HashMap<Var, Tensor> = handed.iter().copied().zip(args.iter().cloned()).collect();
        let Some(anchor) = args.first().cloned() else {
            return Vec::new();
        };
        let env = run(jaxpr, &in_second, env, &anchor);
        rest.iter()
            .map(|&k| replay_atom(&env, &anchor, &outs[k]))
            .collect()
    })?;
    Ok(OutputSplit {
        first: eliminate_dead_code(&first_part),
        second: eliminate_dead_code(&second_part),
        handed_on: handed.len(),
    })
}

/// Replays equations `eqns` (indices, in order) of `jaxpr` into `anchor`'s trace.
fn run(
    jaxpr: &Jaxpr,
    eqns: &[usize],
    mut env: HashMap<Var, Tensor>,
    anchor: &Tensor,
) -> HashMap<Var, Tensor> {
    for &i in eqns {
        replay_into(&mut env, jaxpr, &jaxpr.eqns[i], anchor);
    }
    env
}
