//! Which nested jaxprs the printer pulls out before the program, as JAX 0.10 does: every jaxpr
//! reached more than once in a breadth-first walk of the equations' parameters (counting each
//! visit of its callers too), named after the `name` parameter of the first equation that calls
//! it (`jaxpr` where that equation has none), with a number appended to a name already taken.
//! Jaxprs are compared by value: equal sub-jaxprs are one jaxpr, as JAX's tracing cache makes
//! them.

use std::collections::VecDeque;

use crate::program::jaxpr::Jaxpr;
use crate::program::params::ParamValue;

/// The jaxprs to print before `top`, in print order, with their names.
pub(super) fn shared_jaxprs(top: &Jaxpr) -> Vec<(Jaxpr, String)> {
    // (jaxpr, visits, name) in order of first visit.
    let mut seen: Vec<(Jaxpr, usize, Option<String>)> = Vec::new();
    let mut queue: VecDeque<(Jaxpr, Option<String>)> = VecDeque::from([(top.clone(), None)]);
    let mut is_top = true;
    while let Some((jaxpr, name)) = queue.pop_front() {
        if !is_top {
            match seen.iter_mut().find(|(j, _, _)| *j == jaxpr) {
                Some((_, visits, first_name)) => {
                    *visits += 1;
                    if first_name.is_none() {
                        *first_name = name;
                    }
                }
                None => seen.push((jaxpr.clone(), 1, name)),
            }
        }
        is_top = false;
        for eqn in &jaxpr.eqns {
            let caller = match eqn.params.get("name") {
                Some(ParamValue::Name(n)) => Some(n.trim_matches(['<', '>']).to_owned()),
                _ => None,
            };
            queue.extend(
                eqn.params
                    .jaxprs()
                    .into_iter()
                    .map(|j| (j.jaxpr.clone(), caller.clone())),
            );
        }
    }
    let mut taken: Vec<(String, usize)> = Vec::new();
    seen.into_iter()
        .filter(|(_, visits, _)| *visits > 1)
        .map(|(jaxpr, _, name)| {
            let base = name.unwrap_or_else(|| "jaxpr".to_owned());
            let name = match taken.iter_mut().find(|(n, _)| *n == base) {
                Some((_, count)) => {
                    let numbered = format!("{base}{count}");
                    *count += 1;
                    numbered
                }
                None => {
                    taken.push((base.clone(), 1));
                    base
                }
            };
            (jaxpr, name)
        })
        .collect()
}
