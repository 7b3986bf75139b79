//! Flattening nested `shard_map`s (a `pmap` inside a `pmap`) into one `shard_map` over the
//! stacked mesh of every level (the outer axes, then each inner mesh's), which is what the
//! StableHLO lowering and PJRT run: the collectives of the inner body, over outer axes, inner
//! axes or both, then name axes of one mesh and lower to replica groups of the flattened device
//! grid.
//!
//! Each top-level `shard_map` whose body holds another becomes one `shard_map` over the stacked
//! mesh with the outer in_specs and out_specs (its blocks are the same on every position of the
//! inner axes). In its body, each inner `shard_map` equation is replaced by its body applied to
//! this position's block of each operand (a `dynamic_slice` at `axis_index` of the axes that
//! split each dimension, as the inner in_specs say), its results gathered back along the
//! dimensions the inner out_specs split (`all_gather_invariant`, innermost axis first), so they
//! are invariant over the inner axes again, as the outer body's values are.

use std::collections::HashMap;

use tessera_sharding::{AbstractMesh, PartitionSpec};

use crate::dtype::DType;
use crate::error::{Result, type_error};
use crate::jaxpr::{ClosedJaxpr, Jaxpr, Var};
use crate::params::{ParamValue, Params};
use crate::prim::{Prim, ShardMapParams};
use crate::trace::{Tensor, replay, replay_atom, shard_map, trace};

use super::inline_calls;

const NAME: &str = "shard_map";

/// `closed` with every top-level `shard_map` that nests another (after inlining calls) made one
/// `shard_map` over the stacked mesh of all its levels; a program without nesting is returned
/// as it is.
pub fn flatten_nested_shard_maps(closed: &ClosedJaxpr) -> Result<ClosedJaxpr> {
    let flat = inline_calls(closed);
    if !flat.jaxpr.eqns.iter().any(|e| nests(&e.params, e.prim)) {
        return Ok(closed.clone());
    }
    if !flat.consts.is_empty() {
        return Err(type_error(
            NAME,
            "flattening nested shard_maps of a program with closed-over constants is not \
             supported; pass them as arguments",
        ));
    }
    let jaxpr = &flat.jaxpr;
    trace(&jaxpr.in_avals(), |args| {
        let Some(anchor) = args.first().cloned() else {
            return Vec::new();
        };
        let mut env: HashMap<Var, Tensor> = jaxpr
            .invars
            .iter()
            .copied()
            .zip(args.iter().cloned())
            .collect();
        for eqn in &jaxpr.eqns {
            let inputs: Vec<Tensor> = eqn
                .inputs
                .iter()
                .map(|a| replay_atom(&env, &anchor, a))
                .collect();
            let outs = match nests(&eqn.params, eqn.prim) {
                true => flattened(&eqn.params, &inputs, &anchor),
                false => replay(eqn, jaxpr, &inputs, &anchor),
            };
            env.extend(eqn.outputs.iter().copied().zip(outs));
        }
        jaxpr
            .outvars
            .iter()
            .map(|a| replay_atom(&env, &anchor, a))
            .collect()
    })
}

/// Whether an equation is a `shard_map` whose body (calls inlined) holds another.
fn nests(params: &Params, prim: Prim) -> bool {
    prim == Prim::ShardMap
        && ShardMapParams::read(params).is_ok_and(|p| {
            inline_calls(p.body)
                .jaxpr
                .eqns
                .iter()
                .any(|e| e.prim == Prim::ShardMap)
        })
}

/// The stacked mesh of `mesh` and every `shard_map` nested in `body` (at any depth): the
/// axes in order of first appearance. Sibling inner `shard_map`s may share an axis of the
/// same size; every level must have `check_vma` as the outermost.
fn grid(mesh: &AbstractMesh, body: &Jaxpr, check_vma: bool) -> Result<AbstractMesh> {
    let mut mesh = mesh.clone();
    for eqn in &body.eqns {
        if eqn.prim != Prim::ShardMap {
            continue;
        }
        let p = ShardMapParams::read(&eqn.params)?;
        if p.check_vma != check_vma {
            return Err(type_error(
                NAME,
                "nested shard_maps with different check_vma are not flattened; give every level \
                 the same check_vma",
            ));
        }
        let inner = grid(&p.mesh, &inline_calls(p.body).jaxpr, check_vma)?;
        let mut names = mesh.axis_names().to_vec();
        let mut sizes = mesh.axis_sizes().to_vec();
        let mut types = mesh.axis_types().to_vec();
        for (k, name) in inner.axis_names().iter().enumerate() {
            let size = inner.axis_sizes()[k];
            match mesh.axis_size(name) {
                Some(s) if s == size => {}
                Some(s) => {
                    return Err(type_error(
                        NAME,
                        format!(
                            "nested shard_maps give axis '{name}' sizes {s} and {size}; name \
                             axes of different sizes differently"
                        ),
                    ));
                }
                None => {
                    names.push(name.clone());
                    sizes.push(size);
                    types.push(inner.axis_types()[k]);
                }
            }
        }
        mesh = AbstractMesh::from_parts(names, sizes, types)
            .map_err(|e| type_error(NAME, e.to_string()))?;
    }
    Ok(mesh)
}

/// The outer `shard_map` of `params` as one `shard_map` over its stacked mesh.
fn flattened(params: &Params, inputs: &[Tensor], anchor: &Tensor) -> Vec<Tensor> {
    let p = match ShardMapParams::read(params) {
        Ok(p) => p,
        Err(e) => return vec![anchor.fail(NAME, e.to_string())],
    };
    let body = inline_calls(p.body);
    let stacked = match (p.check_vma, grid(&p.mesh, &body.jaxpr, p.check_vma)) {
        (true, Ok(g)) => g,
        (false, Ok(_)) => {
            let msg = "nested shard_maps with check_vma=False are not flattened (an unmentioned \
                       inner axis would need its first replica chosen); use check_vma=True";
            return failed(anchor, &body, msg.into());
        }
        (_, Err(e)) => return failed(anchor, &body, e.to_string()),
    };
    let refs: Vec<&Tensor> = inputs.iter().collect();
    shard_map(&stacked, &p.in_specs, &p.out_specs, &refs, |blocks| {
        run_body(&body, blocks)
    })
}

/// Placeholders for the results of a `shard_map` that could not be flattened, with the error.
fn failed(anchor: &Tensor, body: &ClosedJaxpr, message: String) -> Vec<Tensor> {
    let avals = body.jaxpr.out_avals();
    anchor.fail_with(NAME, message, &avals)
}

/// `body` replayed on `args` inside the flattened `shard_map`, its nested `shard_map`s inlined.
fn run_body(body: &ClosedJaxpr, args: &[Tensor]) -> Vec<Tensor> {
    let jaxpr = &body.jaxpr;
    let Some(anchor) = args.first().cloned() else {
        return Vec::new();
    };
    if !body.consts.is_empty() {
        let msg = "a nested shard_map body with closed-over constants is not flattened; pass \
                   them as arguments";
        return failed(&anchor, body, msg.into());
    }
    let mut env: HashMap<Var, Tensor> = jaxpr
        .invars
        .iter()
        .copied()
        .zip(args.iter().cloned())
        .collect();
    for eqn in &jaxpr.eqns {
        let inputs: Vec<Tensor> = eqn
            .inputs
            .iter()
            .map(|a| replay_atom(&env, &anchor, a))
            .collect();
        let outs = match eqn.prim {
            Prim::ShardMap => inner_level(&eqn.params, &inputs, &anchor),
            _ => replay(eqn, jaxpr, &inputs, &anchor),
        };
        env.extend(eqn.outputs.iter().copied().zip(outs));
    }
    jaxpr
        .outvars
        .iter()
        .map(|a| replay_atom(&env, &anchor, a))
        .collect()
}

/// An inner `shard_map` inside the flattened body: its body on this position's blocks of the
/// operands, the results gathered back over the inner axes.
fn inner_level(params: &Params, inputs: &[Tensor], anchor: &Tensor) -> Vec<Tensor> {
    let p = match ShardMapParams::read(params) {
        Ok(p) => p,
        Err(e) => return vec![anchor.fail(NAME, e.to_string())],
    };
    let blocks: Vec<Tensor> = inputs
        .iter()
        .zip(&p.in_specs)
        .map(|(x, spec)| block(x, spec, &p.mesh))
        .collect();
    let body = inline_calls(p.body);
    run_body(&body, &blocks)
        .iter()
        .zip(&p.out_specs)
        .map(|(o, spec)| gathered(o, spec))
        .collect()
}

/// This position's block of `x` laid out by `spec` on `mesh`: along each dimension `spec`
/// splits, the slice at the row-major `axis_index` of its axes.
fn block(x: &Tensor, spec: &PartitionSpec, mesh: &AbstractMesh) -> Tensor {
    if spec.used_axes().next().is_none() {
        return x.clone();
    }
    let factors = match crate::prim::split_factors(spec, mesh, x.rank()) {
        Ok(f) => f,
        Err(e) => return x.fail(NAME, e.to_string()),
    };
    let sizes: Vec<i64> = x.shape().iter().zip(&factors).map(|(s, f)| s / f).collect();
    let starts: Vec<Tensor> = (0..x.rank())
        .map(|d| {
            let axes: Vec<&str> = spec
                .dims()
                .get(d)
                .map(|dim| dim.axes().iter().map(String::as_str).collect())
                .unwrap_or_default();
            match axes.is_empty() {
                true => x.literal_strong(0.0, DType::I32),
                false => &Tensor::axis_index_over(x, &axes) * sizes[d],
            }
        })
        .collect();
    let mut operands = vec![x];
    operands.extend(starts.iter());
    let params = Params::new().with("slice_sizes", ParamValue::ints(&sizes));
    Tensor::bind1(Prim::DynamicSlice, params, &operands)
}

/// The global value of the blocks `o` laid out by `spec`: gathered (tiled) along each dimension
/// `spec` splits, over its axes innermost first; invariant over them.
fn gathered(o: &Tensor, spec: &PartitionSpec) -> Tensor {
    let mut out = o.clone();
    for (d, dim) in spec.dims().iter().enumerate() {
        for axis in dim.axes().iter().rev() {
            out = out.all_gather_invariant(axis, d as i64, true);
        }
    }
    out
}
