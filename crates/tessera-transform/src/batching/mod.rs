//! Batching: [`vmap`] turns a program into one that maps it over an extra axis of its
//! arguments (JAX's `jax.vmap` with `in_axes`/`out_axes`).
//!
//! Each value of the replayed program is either unbatched (the same for every batch element) or
//! carries its batch dimension at some position. Equations whose operands are all unbatched are
//! copied as they are; the others go through their primitive's batching rule (in `rules`,
//! one exhaustive match), which usually moves the batch dimension to the front and shifts the
//! primitive's axis parameters. Unbatched results are broadcast at the end, so every result has
//! its batch dimension at the requested `out_axes` position. Nested calls are inlined first.
//!
//! [`vmap_named`] is JAX's `vmap(axis_name=...)`: the program may use collectives over the
//! vmapped axis (traced with the axis bound, see `trace::vmap_named_call`), which `named.rs`
//! batches with the batch elements as the axis's devices.

mod attention;
mod callback;
mod conv;
mod flow;
mod indexing;
mod named;
mod parallel;
mod random;
mod rules;
mod sort;
mod window;

use std::collections::HashMap;

use crate::aval::ShapedArray;
use crate::error::{IrError, Result};
use crate::jaxpr::{Atom, ClosedJaxpr, Jaxpr, Var};
use crate::params::{ParamValue, Params};
use crate::passes::{eliminate_dead_code, inline_calls};
use crate::trace::{Tensor, trace};

/// A value of the batched program and where its batch dimension is (`None`: unbatched).
pub(crate) type Batched = (Tensor, Option<usize>);

/// The batched program of `program`: argument `i` gets an extra dimension of size `axis_size`
/// at position `in_axes[i]` (`None`: the argument is shared by every batch element), and result
/// `j` has its batch dimension at position `out_axes[j]`.
pub fn vmap(
    program: &ClosedJaxpr,
    in_axes: &[Option<usize>],
    out_axes: &[usize],
    axis_size: i64,
) -> Result<ClosedJaxpr> {
    check_axes(program, in_axes, out_axes, axis_size)?;
    crate::verify(program)?;
    batch(program, in_axes, out_axes, axis_size, None)
}

/// [`vmap`] with JAX's `spmd_axis_name`: the new batch dimension is split over the mesh axes
/// `spmd_axis_name` (major to minor). Sharding constraints inside the program get those axes at
/// the batch dimension (as JAX's sharding-constraint batcher inserts them), also in the bodies
/// of loops and branches, and an argument with an explicit-sharding type (`f32[8@pp,4]`) gets
/// them on its batch dimension (`f32[4@dp,8@pp,4]`), which the sharding rules carry through the
/// batched program. An argument whose type already splits a dimension over one of the axes is
/// refused (an axis splits one dimension); so is an axis of an enclosing `shard_map` or `vmap`.
/// Empty `spmd_axis_name` is plain [`vmap`].
pub fn vmap_spmd(
    program: &ClosedJaxpr,
    in_axes: &[Option<usize>],
    out_axes: &[usize],
    axis_size: i64,
    spmd_axis_name: &[&str],
) -> Result<ClosedJaxpr> {
    check_axes(program, in_axes, out_axes, axis_size)?;
    crate::verify(program)?;
    let spmd: Vec<String> = spmd_axis_name.iter().map(|&a| a.to_owned()).collect();
    check_spmd(program, in_axes, &spmd)?;
    SPMD_AXES.with(|s| s.borrow_mut().push(spmd));
    let out = batch(program, in_axes, out_axes, axis_size, None);
    SPMD_AXES.with(|s| s.borrow_mut().pop());
    out
}

thread_local! {
    /// The `spmd_axis_name`s of the [`vmap_spmd`]s running, innermost last; the batching rules
    /// of the bodies batched inside one (loops, branches, shard_maps) see its axes.
    static SPMD_AXES: std::cell::RefCell<Vec<Vec<String>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The mesh axes splitting the batch dimension of the innermost running [`vmap_spmd`] (empty:
/// none, JAX's `spmd_axis_name=None`).
pub(crate) fn spmd_axes() -> Vec<String> {
    SPMD_AXES.with(|s| s.borrow().last().cloned().unwrap_or_default())
}

/// Runs `f` with no `spmd_axis_name` in force (for bodies it does not reach).
pub(crate) fn without_spmd<T>(f: impl FnOnce() -> T) -> T {
    SPMD_AXES.with(|s| s.borrow_mut().push(Vec::new()));
    let out = f();
    SPMD_AXES.with(|s| s.borrow_mut().pop());
    out
}

fn check_spmd(program: &ClosedJaxpr, in_axes: &[Option<usize>], spmd: &[String]) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for axis in spmd {
        if !seen.insert(axis) {
            return Err(vmap_error(format!(
                "spmd_axis_name names axis '{axis}' twice; name each mesh axis once"
            )));
        }
        if crate::axis_env::current_mesh().is_some_and(|m| m.axis_size(axis).is_some()) {
            return Err(vmap_error(format!(
                "spmd_axis_name '{axis}' is a manual axis of the enclosing shard_map; vmap \
                 over another mesh axis, or outside the shard_map"
            )));
        }
    }
    for (a, ax) in program.jaxpr.in_avals().iter().zip(in_axes) {
        if ax.is_none() {
            continue;
        }
        let used = a.explicit_dims().into_iter().flatten();
        let reduced = a
            .explicit
            .iter()
            .flat_map(|e| e.reduced.iter().chain(&e.unreduced).cloned());
        if let Some(axis) = used.chain(reduced).find(|x| spmd.contains(x)) {
            return Err(vmap_error(format!(
                "the batched argument {a} already uses mesh axis '{axis}', which \
                 spmd_axis_name splits the batch dimension over; an axis splits one dimension \
                 (reshard the argument first)"
            )));
        }
    }
    Ok(())
}

/// [`vmap`] over an axis named `axis_name`, which the program's collectives may name (JAX's
/// `vmap(axis_name=...)`): the batch elements are that axis's devices, so `psum` over it sums
/// the batch, `axis_index` numbers the elements, and so on. The program is checked with the
/// axis bound (inside any enclosing `shard_map`'s axes); its values that vary over the axis
/// are the batched ones. The batched program names the axis nowhere.
pub fn vmap_named(
    program: &ClosedJaxpr,
    in_axes: &[Option<usize>],
    out_axes: &[usize],
    axis_size: i64,
    axis_name: &str,
) -> Result<ClosedJaxpr> {
    check_axes(program, in_axes, out_axes, axis_size)?;
    let mesh = with_axis(axis_name, axis_size)?;
    crate::axis_env::with_mesh(&mesh, || crate::verify(program))?;
    batch(program, in_axes, out_axes, axis_size, Some(axis_name))
}

/// The enclosing `shard_map`'s mesh (if any) with the axis `name` of `size` added.
pub(crate) fn with_axis(name: &str, size: i64) -> Result<tessera_sharding::AbstractMesh> {
    let outer = crate::axis_env::current_mesh();
    let mut axes: Vec<(&str, i64)> = outer
        .as_ref()
        .map(|m| {
            m.axis_names()
                .iter()
                .map(String::as_str)
                .zip(m.axis_sizes().iter().copied())
                .collect()
        })
        .unwrap_or_default();
    if axes.iter().any(|(n, _)| *n == name) {
        return Err(vmap_error(format!(
            "the axis name '{name}' is already bound by an enclosing shard_map or vmap; pick \
             another name"
        )));
    }
    axes.push((name, size));
    tessera_sharding::AbstractMesh::auto(&axes).map_err(|e| vmap_error(e.to_string()))
}

fn batch(
    program: &ClosedJaxpr,
    in_axes: &[Option<usize>],
    out_axes: &[usize],
    axis_size: i64,
    named: Option<&str>,
) -> Result<ClosedJaxpr> {
    let flat = inline_calls(&crate::passes::unroll_treduce(program)?);
    let jaxpr = &flat.jaxpr;
    let avals: Vec<ShapedArray> = jaxpr
        .in_avals()
        .iter()
        .zip(in_axes)
        .map(|(a, &ax)| {
            let mut batched = a.clone();
            if let Some(ax) = ax {
                // Keep the manual axes the value varies over (inside a shard_map body), its
                // weak type and its reduced and unreduced axes; a known layout is dropped.
                batched.sharding = None;
                batched.weak_type = false;
                batched.shape.insert(ax, axis_size);
                // Keep an explicit sharding, the batch dimension split over the spmd axes
                // (unsplit for JAX's `spmd_axis_name=None`); the sharding rules carry it
                // through the batched program.
                if a.explicit.is_some() {
                    let mut dims = a.explicit_dims();
                    dims.insert(ax, spmd_axes());
                    batched.set_explicit_dims(dims);
                }
            }
            if let Some(name) = named {
                batched.vma.remove(name);
            }
            batched
        })
        .collect();
    let out = trace(&avals, |args| {
        let Some(anchor) = args.first().cloned() else {
            return Vec::new();
        };
        let mut env: HashMap<Var, Batched> = HashMap::new();
        for ((&v, t), &ax) in jaxpr.invars.iter().zip(args).zip(in_axes) {
            env.insert(v, (t.clone(), ax));
        }
        replay(jaxpr, &anchor, axis_size, named, &mut env);
        jaxpr
            .outvars
            .iter()
            .zip(out_axes)
            .map(|(a, &ax)| {
                let (t, bdim) = read_atom(&env, &anchor, a);
                match bdim {
                    Some(d) => move_axis(&t, d, ax),
                    None => broadcast_batch(&t, axis_size, ax),
                }
            })
            .collect()
    })?;
    Ok(eliminate_dead_code(&out))
}

fn vmap_error(message: String) -> IrError {
    IrError::Type {
        prim: "vmap".into(),
        message,
    }
}

fn check_axes(
    program: &ClosedJaxpr,
    in_axes: &[Option<usize>],
    out_axes: &[usize],
    axis_size: i64,
) -> Result<()> {
    let jaxpr = &program.jaxpr;
    if !program.consts.is_empty() {
        return Err(vmap_error(
            "programs with closed-over constants are not supported; pass the constants as arguments".into(),
        ));
    }
    if jaxpr.invars.is_empty() || axis_size < 0 {
        return Err(vmap_error(format!(
            "needs a program with arguments and a non-negative axis size, got {} arguments and size {axis_size}",
            jaxpr.invars.len()
        )));
    }
    if in_axes.len() != jaxpr.invars.len() || out_axes.len() != jaxpr.outvars.len() {
        return Err(vmap_error(format!(
            "in_axes has {} entries for {} arguments and out_axes {} for {} results",
            in_axes.len(),
            jaxpr.invars.len(),
            out_axes.len(),
            jaxpr.outvars.len()
        )));
    }
    for (a, ax) in jaxpr.in_avals().iter().zip(in_axes) {
        if ax.is_some_and(|ax| ax > a.rank()) {
            return Err(vmap_error(format!(
                "in_axis {ax:?} is out of range for {a}"
            )));
        }
    }
    for (a, &ax) in jaxpr.out_avals().iter().zip(out_axes) {
        if ax > a.rank() {
            return Err(vmap_error(format!("out_axis {ax} is out of range for {a}")));
        }
    }
    Ok(())
}

fn read_atom(env: &HashMap<Var, Batched>, anchor: &Tensor, a: &Atom) -> Batched {
    match a {
        Atom::Var(v) => env.get(v).cloned().unwrap_or_else(|| {
            let t = anchor.fail("vmap", format!("variable {} is undefined", v.0));
            (t, None)
        }),
        Atom::Lit(l) => (anchor.literal_exact(l), None),
    }
}

/// Replays `jaxpr`'s equations on batched values; `named` is the vmapped axis's name, whose
/// collectives batch by `named.rs`'s rules.
fn replay(
    jaxpr: &Jaxpr,
    anchor: &Tensor,
    size: i64,
    named: Option<&str>,
    env: &mut HashMap<Var, Batched>,
) {
    for eqn in &jaxpr.eqns {
        let args: Vec<Batched> = eqn
            .inputs
            .iter()
            .map(|a| read_atom(env, anchor, a))
            .collect();
        let out_avals: Vec<ShapedArray> =
            eqn.outputs.iter().map(|&v| jaxpr.aval(v).clone()).collect();
        // The batched program runs a start/done pair as its synchronous collective: a start
        // batches as its collective, a done passes the value through.
        let prim = eqn.prim.synchronous();
        let over_named = named.filter(|axis| named::names_axis(prim, &eqn.params, axis));
        let results: Vec<Batched> = if eqn.prim.is_async_done() {
            args.clone()
        } else if let Some(axis) = over_named {
            let rank = args
                .first()
                .map_or(0, |(t, b)| t.rank() - usize::from(b.is_some()));
            vec![named::collective(
                prim,
                &eqn.params,
                &args,
                anchor,
                axis,
                size,
                rank,
            )]
        } else if args.iter().all(|(_, b)| b.is_none()) {
            let refs: Vec<&Tensor> = args.iter().map(|(t, _)| t).collect();
            let outs = if refs.is_empty() {
                vec![Tensor::bind_nullary(prim, eqn.params.clone(), anchor)]
            } else {
                Tensor::bind_typed(prim, eqn.params.clone(), &refs, out_avals.first().cloned())
            };
            outs.into_iter().map(|t| (t, None)).collect()
        } else {
            rules::batch_rule(prim, &eqn.params, &args, size, &out_avals)
        };
        for (&v, r) in eqn.outputs.iter().zip(results) {
            env.insert(v, r);
        }
    }
}

/// Moves dimension `from` of `t` to position `to`.
pub(crate) fn move_axis(t: &Tensor, from: usize, to: usize) -> Tensor {
    if from == to {
        return t.clone();
    }
    let mut perm: Vec<i64> = (0..t.rank() as i64).filter(|&d| d != from as i64).collect();
    perm.insert(to, from as i64);
    t.transpose(&perm)
}

/// An unbatched value broadcast to `size` copies along a new dimension at `at`.
pub(crate) fn broadcast_batch(t: &Tensor, size: i64, at: usize) -> Tensor {
    let mut shape = t.shape().to_vec();
    shape.insert(at, size);
    let dims: Vec<i64> = (0..t.rank())
        .map(|d| if d < at { d as i64 } else { d as i64 + 1 })
        .collect();
    t.broadcast_in_dim(&shape, &dims)
}

/// The value with its batch dimension first (broadcast when unbatched).
pub(crate) fn to_front(v: &Batched, size: i64) -> Tensor {
    match v.1 {
        Some(d) => move_axis(&v.0, d, 0),
        None => broadcast_batch(&v.0, size, 0),
    }
}

/// `params` with `name` set to `value` (replaced in place, or appended).
pub(crate) fn with_param(params: &Params, name: &str, value: ParamValue) -> Params {
    params.clone().with(name, value)
}

/// Integers shifted by one (for the leading batch dimension), optionally after a leading `0`.
pub(crate) fn shifted(values: &[i64], lead: Option<i64>) -> Vec<i64> {
    lead.into_iter()
        .chain(values.iter().map(|v| v + 1))
        .collect()
}
