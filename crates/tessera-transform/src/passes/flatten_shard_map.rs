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
//! are invariant over the inner axes again, as the outer body's values are. An inner
//! `shard_map` inside a nested program of the outer body (a `scan`, `cond` or `while` body, a
//! `jit`, a custom-derivative rule) is reached too: that program is traced again, with the
//! stacked mesh's axes bound, with its inner `shard_map`s inlined the same way, and its
//! equation recorded with the new program (the loop or branch keeps its types).
//!
//! Levels with `check_vma=False` (JAX's printed `pmap`) flatten into a `shard_map` with
//! `check_vma=False`; an inner result whose out_spec leaves out an inner axis it may vary over
//! takes the first replica's value (gathered over that axis, index 0), as the interpreter and
//! JAX take it.

use std::collections::HashMap;

use tessera_sharding::{AbstractMesh, PartitionSpec};

use crate::axis_env;
use crate::dtype::DType;
use crate::error::{Result, type_error};
use crate::jaxpr::{ClosedJaxpr, Eqn, Jaxpr, Var};
use crate::params::{ParamValue, Params};
use crate::prim::{Prim, ShardMapParams, block_aval, shard_map_params};
use crate::trace::{Tensor, replay, replay_atom, shard_map, trace};

use crate::rewrite::inline_calls;

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

/// Whether an equation is a `shard_map` whose body holds another, at any depth (in a loop,
/// branch or call of the body too).
fn nests(params: &Params, prim: Prim) -> bool {
    prim == Prim::ShardMap
        && ShardMapParams::read(params).is_ok_and(|p| holds_shard_map(&p.body.jaxpr))
}

/// Whether `jaxpr` or a program nested in its equations has a `shard_map` equation.
fn holds_shard_map(jaxpr: &Jaxpr) -> bool {
    jaxpr.eqns.iter().any(|e| {
        e.prim == Prim::ShardMap || e.params.jaxprs().iter().any(|j| holds_shard_map(&j.jaxpr))
    })
}

/// The stacked mesh of `mesh` and every `shard_map` nested in `body` (at any depth): the
/// axes in order of first appearance. Sibling inner `shard_map`s may share an axis of the
/// same size; every level must have `check_vma` as the outermost (all typed by varying axes,
/// or none, as JAX prints `pmap`).
fn grid(mesh: &AbstractMesh, body: &Jaxpr, check_vma: bool) -> Result<AbstractMesh> {
    let mut mesh = mesh.clone();
    stack_levels(&mut mesh, body, check_vma)?;
    Ok(mesh)
}

/// Adds to `mesh` the axes of every `shard_map` in `body` (in its loops, branches and calls
/// too) and of those nested in them.
fn stack_levels(mesh: &mut AbstractMesh, body: &Jaxpr, check_vma: bool) -> Result<()> {
    for eqn in &body.eqns {
        if eqn.prim != Prim::ShardMap {
            for sub in eqn.params.jaxprs() {
                stack_levels(mesh, &sub.jaxpr, check_vma)?;
            }
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
        *mesh = AbstractMesh::from_parts(names, sizes, types)
            .map_err(|e| type_error(NAME, e.to_string()))?;
    }
    Ok(())
}

/// The outer `shard_map` of `params` as one `shard_map` over its stacked mesh.
fn flattened(params: &Params, inputs: &[Tensor], anchor: &Tensor) -> Vec<Tensor> {
    let p = match ShardMapParams::read(params) {
        Ok(p) => p,
        Err(e) => return vec![anchor.fail(NAME, e.to_string())],
    };
    let body = inline_calls(p.body);
    let stacked = match grid(&p.mesh, &body.jaxpr, p.check_vma) {
        Ok(g) => g,
        Err(e) => return failed(anchor, &body, e.to_string()),
    };
    let refs: Vec<&Tensor> = inputs.iter().collect();
    if !p.check_vma {
        return unchecked(&stacked, &p, &body, &refs, anchor);
    }
    shard_map(&stacked, &p.in_specs, &p.out_specs, &refs, |blocks| {
        run_body(&body, blocks)
    })
}

/// The flattened `shard_map` of levels with `check_vma=False` (JAX's printed `pmap`): its body
/// traced untyped by varying axes, as such a body is, and recorded with `check_vma=False`.
fn unchecked(
    stacked: &AbstractMesh,
    p: &ShardMapParams<'_>,
    body: &ClosedJaxpr,
    inputs: &[&Tensor],
    anchor: &Tensor,
) -> Vec<Tensor> {
    let avals = inputs
        .iter()
        .zip(&p.in_specs)
        .map(|(x, spec)| {
            let mut block = block_aval(x.aval(), spec, stacked)?;
            block.vma.clear();
            Ok(block)
        })
        .collect::<Result<Vec<_>>>();
    let traced = avals.and_then(|avals| {
        axis_env::with_manual(stacked, false, || {
            trace(&avals, |blocks| run_body(body, blocks))
        })
    });
    match traced {
        Ok(flat) => {
            let params = shard_map_params(stacked, &p.in_specs, &p.out_specs, flat)
                .with("check_vma", ParamValue::Bool(false));
            Tensor::bind(Prim::ShardMap, params, inputs)
        }
        Err(e) => failed(anchor, body, e.to_string()),
    }
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
            _ if eqn
                .params
                .jaxprs()
                .iter()
                .any(|j| holds_shard_map(&j.jaxpr)) =>
            {
                holding_level(eqn, jaxpr, &inputs, &anchor)
            }
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

/// An equation of the flattened body (a loop, branch or call) whose nested programs hold inner
/// `shard_map`s: recorded again with each such program traced anew (the stacked mesh's axes
/// bound) with its inner `shard_map`s inlined; the programs keep their types.
fn holding_level(eqn: &Eqn, jaxpr: &Jaxpr, inputs: &[Tensor], anchor: &Tensor) -> Vec<Tensor> {
    let mut failure = None;
    let mut params = eqn.params.clone();
    for (_, value) in params.entries_mut() {
        inline_levels_in(value, &mut failure);
    }
    if let Some(message) = failure {
        let avals: Vec<_> = eqn.outputs.iter().map(|&v| jaxpr.aval(v).clone()).collect();
        return anchor.fail_with(NAME, message, &avals);
    }
    let eqn = Eqn {
        params,
        ..eqn.clone()
    };
    replay(&eqn, jaxpr, inputs, anchor)
}

/// `value` with each nested program that holds a `shard_map` traced again with them inlined;
/// the first failure is kept in `failure`.
fn inline_levels_in(value: &mut ParamValue, failure: &mut Option<String>) {
    match value {
        ParamValue::Jaxpr(j) if holds_shard_map(&j.jaxpr) => {
            let sub = j.as_ref().clone();
            match trace(&sub.jaxpr.in_avals(), |args| run_body(&sub, args)) {
                Ok(flat) => **j = flat,
                Err(e) => {
                    failure.get_or_insert(format!("in a program nested in the shard_map: {e}"));
                }
            }
        }
        ParamValue::Tuple(items) | ParamValue::List(items) | ParamValue::Set(items) => {
            items.iter_mut().for_each(|v| inline_levels_in(v, failure));
        }
        ParamValue::Record(_, fields) => {
            fields
                .iter_mut()
                .for_each(|(_, v)| inline_levels_in(v, failure));
        }
        ParamValue::Jaxpr(_)
        | ParamValue::Str(_)
        | ParamValue::Int(_)
        | ParamValue::NpInt(_)
        | ParamValue::Float(..)
        | ParamValue::Bool(_)
        | ParamValue::Name(_) => {}
    }
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
        .map(|(o, spec)| match p.check_vma {
            true => gathered(o, spec),
            // Unchecked, a result may vary over an inner axis its out_spec leaves out: as the
            // interpreter (and JAX) do, the first replica's value is taken.
            false => p
                .unmentioned(spec)
                .iter()
                .fold(gathered(o, spec), |v, axis| first_replica(&v, axis)),
        })
        .collect()
}

/// The value `o` has at index 0 of mesh axis `axis`, on every index of it.
fn first_replica(o: &Tensor, axis: &str) -> Tensor {
    let all = o.all_gather_invariant(axis, 0, false);
    let first = Tensor::slice_axis(&all, 0, 0, 1);
    first.reshape(o.shape())
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
