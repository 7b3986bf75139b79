//! The SPMD interpreter: runs a `shard_map` body on simulated devices. Each mesh position gets
//! its block of every operand; all positions step through the body's equations together, local
//! equations on each position's own values and collectives across positions (through
//! [`crate::prim::simulate`], with the same replica groups the lowering emits). The blocks of the
//! results are assembled into global arrays as the out_specs say, which is what a real
//! multi-device run returns. A `shard_map` nested in the body runs on the stacked mesh of both
//! levels (outer axes, then inner), so the outer axes stay manual inside it. `scan`, `cond` and
//! `while` run on all positions together too (`flow.rs`), so collectives and nested
//! `shard_map`s in their bodies do.

mod flow;

use tessera_sharding::{AbstractMesh, PartitionSpec};

use crate::array::Array;
use crate::aval::ShapedArray;
use crate::error::{IrError, Result};
use crate::interp::rules::PrimEval;
use crate::jaxpr::{Atom, ClosedJaxpr};
use crate::prim::{Prim, ShardMapParams, simulate, split_factors};
use crate::rewrite::inline_all;

/// Evaluates a `shard_map` on global operands, returning global results.
pub fn eval_shard_map(p: &ShardMapParams<'_>, inputs: &[Array]) -> Result<Vec<Array>> {
    let size = p.mesh.size();
    let mut per_device: Vec<Vec<Array>> = vec![Vec::with_capacity(inputs.len()); size as usize];
    for (x, spec) in inputs.iter().zip(&p.in_specs) {
        for (pos, args) in per_device.iter_mut().enumerate() {
            args.push(block_of(x, spec, &p.mesh, pos as i64)?);
        }
    }
    let body = inline_all(p.body);
    let outs = p.in_body(|| eval_spmd(&body, &p.mesh, per_device))?;
    p.out_specs
        .iter()
        .enumerate()
        .map(|(k, spec)| {
            let blocks: Vec<&Array> = outs.iter().map(|d| &d[k]).collect();
            assemble(&blocks, spec, &p.mesh)
        })
        .collect()
}

/// Runs `closed` on every mesh position at once; `args[p]` are position `p`'s arguments.
pub fn eval_spmd(
    closed: &ClosedJaxpr,
    mesh: &AbstractMesh,
    args: Vec<Vec<Array>>,
) -> Result<Vec<Vec<Array>>> {
    let jaxpr = &closed.jaxpr;
    let mut envs: Vec<Vec<Option<Array>>> = Vec::with_capacity(args.len());
    for device_args in args {
        let mut env = vec![None; jaxpr.vars.len()];
        for (&v, c) in jaxpr.constvars.iter().zip(&closed.consts) {
            env[v.index()] = Some(c.clone());
        }
        for (&v, a) in jaxpr.invars.iter().zip(device_args) {
            env[v.index()] = Some(a);
        }
        envs.push(env);
    }
    let limit = crate::interp::memory::current()?;
    for (index, eqn) in jaxpr.eqns.iter().enumerate() {
        // Every simulated device holds its own results.
        crate::interp::memory::check_equation(jaxpr, index, envs.len(), &limit)?;
        let out_avals: Vec<_> = eqn.outputs.iter().map(|&v| jaxpr.aval(v).clone()).collect();
        let inputs: Vec<Vec<Array>> = envs
            .iter()
            .map(|env| eqn.inputs.iter().map(|a| read(env, a)).collect())
            .collect::<Result<_>>()?;
        let results: Vec<Vec<Array>> = if eqn.prim.is_collective() {
            simulate(eqn.prim, &eqn.params, mesh, &inputs, &out_avals[0])?
                .into_iter()
                .map(|a| vec![a])
                .collect()
        } else if eqn.prim == Prim::Scan {
            scan_in_lockstep(&eqn.params, mesh, inputs, &out_avals)?
        } else if eqn.prim == Prim::Cond {
            flow::cond_in_lockstep(&eqn.params, mesh, inputs)?
        } else if eqn.prim == Prim::While {
            flow::while_in_lockstep(&eqn.params, mesh, inputs)?
        } else if eqn.prim == Prim::ShardMap {
            nested_shard_map(&eqn.params, mesh, &inputs)?
        } else {
            inputs
                .iter()
                .map(|i| eqn.prim.eval(&eqn.params, i, &out_avals))
                .collect::<Result<_>>()?
        };
        for (env, outs) in envs.iter_mut().zip(results) {
            for (&v, value) in eqn.outputs.iter().zip(outs) {
                env[v.index()] = Some(value);
            }
        }
    }
    envs.iter()
        .map(|env| jaxpr.outvars.iter().map(|a| read(env, a)).collect())
        .collect()
}

/// A `shard_map` nested in the body being run (`pmap` inside `pmap`); `inputs[o]` are outer
/// position `o`'s operands. Every outer position splits its operands over the inner mesh, and
/// the inner body runs once on the stacked mesh (the outer axes, then the inner ones: position
/// `o * inner + q`), so that its collectives over outer axes, inner axes or both exchange between
/// the right positions; each outer position's results are assembled from its inner positions'
/// blocks as the inner out_specs say.
fn nested_shard_map(
    params: &crate::params::Params,
    outer: &AbstractMesh,
    inputs: &[Vec<Array>],
) -> Result<Vec<Vec<Array>>> {
    let p = ShardMapParams::read(params)?;
    let grid = crate::axis_env::stacked(outer, &p.mesh)?;
    let n = p.mesh.size().max(1) as usize;
    let mut per_device = Vec::with_capacity(inputs.len() * n);
    for operands in inputs {
        for q in 0..n {
            let blocks = operands
                .iter()
                .zip(&p.in_specs)
                .map(|(x, spec)| block_of(x, spec, &p.mesh, q as i64))
                .collect::<Result<Vec<_>>>()?;
            per_device.push(blocks);
        }
    }
    let body = inline_all(p.body);
    let outs = p.in_body(|| eval_spmd(&body, &grid, per_device))?;
    outs.chunks(n)
        .map(|inner| {
            p.out_specs
                .iter()
                .enumerate()
                .map(|(k, spec)| {
                    let blocks: Vec<&Array> = inner.iter().map(|d| &d[k]).collect();
                    assemble(&blocks, spec, &p.mesh)
                })
                .collect()
        })
        .collect()
}

/// A `scan` on every mesh position at once, step by step, so that collectives in its body (a
/// `ppermute` around a ring in a `fori_loop`) exchange between the devices at each step;
/// `inputs[p]` are position `p`'s operands.
fn scan_in_lockstep(
    params: &crate::params::Params,
    mesh: &AbstractMesh,
    inputs: Vec<Vec<Array>>,
    outputs: &[ShapedArray],
) -> Result<Vec<Vec<Array>>> {
    let p = crate::prim::ScanParams::read(params)?;
    let body = inline_all(p.body);
    let fixed = p.num_consts + p.num_carry;
    let mut carries: Vec<Vec<Array>> = inputs
        .iter()
        .map(|i| i[p.num_consts..fixed].to_vec())
        .collect();
    let n_ys = outputs.len().saturating_sub(p.num_carry);
    // ys[device][result][step]
    let mut ys: Vec<Vec<Vec<Option<Array>>>> =
        vec![vec![vec![None; p.length.max(0) as usize]; n_ys]; inputs.len()];
    for i in 0..p.length {
        let k = p.index(i) as usize;
        let args = inputs
            .iter()
            .zip(carries)
            .map(|(operands, carry)| {
                let mut args = operands[..p.num_consts].to_vec();
                args.extend(carry);
                for x in &operands[fixed..] {
                    args.push(x.row(k)?);
                }
                Ok(args)
            })
            .collect::<Result<Vec<_>>>()?;
        let outs = eval_spmd(&body, mesh, args)?;
        carries = Vec::with_capacity(outs.len());
        for (device, mut out) in outs.into_iter().enumerate() {
            let y = out.split_off(p.num_carry.min(out.len()));
            carries.push(out);
            for (slot, value) in ys[device].iter_mut().zip(y) {
                slot[k] = Some(value);
            }
        }
    }
    carries
        .into_iter()
        .zip(ys)
        .map(|(carry, ys)| {
            let stacked = crate::prim::scan::stack_ys(ys, &outputs[p.num_carry..]);
            carry.into_iter().map(Ok).chain(stacked).collect()
        })
        .collect()
}

fn read(env: &[Option<Array>], atom: &Atom) -> Result<Array> {
    match atom {
        Atom::Var(v) => env[v.index()]
            .clone()
            .ok_or_else(|| IrError::Eval(format!("variable {} is used before it is defined", v.0))),
        Atom::Lit(l) => Ok(l.to_array()),
    }
}

/// For each dimension, the block index of mesh position `pos` under `spec` (row-major over the
/// axes that split the dimension) and whether `pos` is the first replica (coordinate 0 on every
/// axis the spec does not name).
fn block_index(
    spec: &PartitionSpec,
    mesh: &AbstractMesh,
    rank: usize,
    pos: i64,
) -> (Vec<i64>, bool) {
    let coords = mesh.coords(pos);
    let mut index = vec![0i64; rank];
    for (d, dim) in spec.dims().iter().enumerate() {
        for axis in dim.axes() {
            if let (Some(a), Some(size)) = (mesh.axis_index(axis), mesh.axis_size(axis)) {
                index[d] = index[d] * size + coords[a];
            }
        }
    }
    let named: Vec<&str> = spec.used_axes().collect();
    let first = mesh
        .axis_names()
        .iter()
        .zip(&coords)
        .all(|(n, &c)| c == 0 || named.contains(&n.as_str()));
    (index, first)
}

/// The block `index` of blocks of extents `block`: `[start, stop)` per dimension.
fn block_range(index: &[i64], block: &[i64]) -> Vec<(i64, i64)> {
    index
        .iter()
        .zip(block)
        .map(|(&i, &b)| (i * b, (i + 1) * b))
        .collect()
}

/// Position `pos`'s block of the global array `x` laid out by `spec`.
fn block_of(x: &Array, spec: &PartitionSpec, mesh: &AbstractMesh, pos: i64) -> Result<Array> {
    let rank = x.dims().len();
    let factors = split_factors(spec, mesh, rank)?;
    let block: Vec<i64> = x
        .dims()
        .iter()
        .zip(&factors)
        .map(|(&s, &f)| s / f)
        .collect();
    let (index, _) = block_index(spec, mesh, rank, pos);
    x.block(&block_range(&index, &block))
}

/// The global array whose blocks (one per mesh position) are `blocks`, laid out by `spec`.
fn assemble(blocks: &[&Array], spec: &PartitionSpec, mesh: &AbstractMesh) -> Result<Array> {
    let first = blocks
        .first()
        .ok_or_else(|| IrError::Eval("shard_map over an empty mesh".into()))?;
    let rank = first.dims().len();
    let factors = split_factors(spec, mesh, rank)?;
    let block = first.dims();
    let global: Vec<i64> = block.iter().zip(&factors).map(|(&b, &f)| b * f).collect();
    let mut out = Array::zeros(&ShapedArray::new(first.dtype(), &global));
    for (pos, b) in blocks.iter().enumerate() {
        let (index, first_replica) = block_index(spec, mesh, rank, pos as i64);
        if first_replica {
            out.write_block(&block_range(&index, block), b)?;
        }
    }
    Ok(out)
}
