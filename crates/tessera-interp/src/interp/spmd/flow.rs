//! `cond` and `while` on every mesh position at once, so that collectives (and `shard_map`s
//! nested in a `pmap` body) in their branches or bodies exchange between the devices. Each
//! position picks its own branch or stops on its own predicate; a branch or body runs on every
//! position (those that did not pick it discard its results), so each collective has all its
//! participants, and a position's values depend only on those of its replica group, which (in
//! a program XLA can run) pick the same branch as it.

use tessera_sharding::AbstractMesh;

use super::eval_spmd;
use crate::array::Array;
use crate::error::Result;
use crate::params::Params;
use crate::prim::{WhileParams, branch_index, cond_branches};
use crate::rewrite::inline_all;

/// A `cond` on every position: `inputs[p]` is position `p`'s index then operands.
pub(super) fn cond_in_lockstep(
    params: &Params,
    mesh: &AbstractMesh,
    inputs: Vec<Vec<Array>>,
) -> Result<Vec<Vec<Array>>> {
    let branches = cond_branches(params)?;
    let picks: Vec<usize> = inputs
        .iter()
        .map(|i| {
            let index = i
                .first()
                .and_then(|x| x.to_vec().first().copied())
                .unwrap_or(0.0);
            branch_index(index, branches.len())
        })
        .collect();
    let operands: Vec<Vec<Array>> = inputs
        .into_iter()
        .map(|mut i| i.split_off(1.min(i.len())))
        .collect();
    let mut results: Vec<Option<Vec<Array>>> = vec![None; operands.len()];
    for (k, branch) in branches.iter().enumerate() {
        if !picks.contains(&k) {
            continue;
        }
        let outs = eval_spmd(&inline_all(branch), mesh, operands.clone())?;
        for ((slot, out), &pick) in results.iter_mut().zip(outs).zip(&picks) {
            if pick == k {
                *slot = Some(out);
            }
        }
    }
    Ok(results.into_iter().map(Option::unwrap_or_default).collect())
}

/// A `while` on every position: each position stops when its predicate fails; the body runs
/// while any position goes on (the others keep their carry).
pub(super) fn while_in_lockstep(
    params: &Params,
    mesh: &AbstractMesh,
    inputs: Vec<Vec<Array>>,
) -> Result<Vec<Vec<Array>>> {
    let p = WhileParams::read(params)?;
    let (cond, body) = (inline_all(p.cond), inline_all(p.body));
    let split = |i: &Vec<Array>| {
        let cond_consts = i[..p.cond_nconsts.min(i.len())].to_vec();
        let rest = &i[p.cond_nconsts.min(i.len())..];
        let body_consts = rest[..p.body_nconsts.min(rest.len())].to_vec();
        let carry = rest[p.body_nconsts.min(rest.len())..].to_vec();
        (cond_consts, body_consts, carry)
    };
    let parts: Vec<_> = inputs.iter().map(split).collect();
    let mut carries: Vec<Vec<Array>> = parts.iter().map(|(_, _, c)| c.clone()).collect();
    loop {
        let args = parts
            .iter()
            .zip(&carries)
            .map(|((cc, _, _), c)| cc.iter().chain(c).cloned().collect())
            .collect();
        let go: Vec<bool> = eval_spmd(&cond, mesh, args)?
            .iter()
            .map(|o| o.first().and_then(|x| x.to_vec().first().copied()) != Some(0.0))
            .collect();
        if !go.contains(&true) {
            return Ok(carries);
        }
        let args = parts
            .iter()
            .zip(&carries)
            .map(|((_, bc, _), c)| bc.iter().chain(c).cloned().collect())
            .collect();
        let next = eval_spmd(&body, mesh, args)?;
        for ((carry, new), &going) in carries.iter_mut().zip(next).zip(&go) {
            if going {
                *carry = new;
            }
        }
    }
}
