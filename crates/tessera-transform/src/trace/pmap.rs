//! JAX's `pmap` as sugar over a one-axis `shard_map`: [`pmap`] maps over the leading dimension
//! of every argument; [`pmap_with`] takes JAX's `in_axes` (any dimension, or `None` for an
//! argument every device sees whole), `out_axes` (any dimension, or `None` for a result that
//! is the same on every device) and `axis_size` (needed when no argument is mapped).
//!
//! The mapped dimension of an argument is moved to the front and split over the axis; the body
//! sees each device's slice without it. A mapped result gets the axis back at its `out_axes`
//! position; an unmapped one must not vary over the axis (as `shard_map`'s `P()` out_spec).
//!
//! A `pmap` inside a `pmap` (JAX's `pmap(pmap(f, axis_name='j'), axis_name='i')`) is a
//! `shard_map` nested in a `shard_map`: the inner body sees both axes bound (the axis
//! environment stacks, [`crate::axis_env`]), so its collectives may name `'i'`, `'j'` or both,
//! and each level maps its leading dimension away. The inner `pmap` must name a new axis.

use tessera_sharding::{AbstractMesh, DimSpec, PartitionSpec};

use super::collectives::shard_map_with;
use super::{Tensor, trace_counted};
use crate::aval::ShapedArray;

/// Where `pmap_with` maps each argument and result (JAX's `in_axes`, `out_axes`, `axis_size`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PmapAxes {
    /// For each argument, the dimension mapped over the devices (`None`: the argument is
    /// passed whole to every device). Empty means dimension 0 of every argument.
    pub in_axes: Vec<Option<usize>>,
    /// For each result, the dimension the devices' results are stacked at (`None`: the result
    /// is the same on every device and returned once). Empty means dimension 0 of every result.
    pub out_axes: Vec<Option<usize>>,
    /// The number of devices, needed when no argument is mapped; else checked against them.
    pub axis_size: Option<i64>,
}

/// JAX's `pmap` as sugar: maps `f` over the leading dimension of every argument, one index per
/// device of a one-axis mesh named `axis_name`; `f` sees each argument without that dimension,
/// and its results are stacked along a new leading dimension.
pub fn pmap(
    axis_name: &str,
    args: &[&Tensor],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    pmap_with(axis_name, args, &PmapAxes::default(), f)
}

/// [`pmap`] with JAX's `in_axes`, `out_axes` and `axis_size` ([`PmapAxes`]).
pub fn pmap_with(
    axis_name: &str,
    args: &[&Tensor],
    axes: &PmapAxes,
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    let Some(first) = args.first() else {
        return Vec::new();
    };
    let in_axes: Vec<Option<usize>> = match axes.in_axes.is_empty() {
        true => vec![Some(0); args.len()],
        false => axes.in_axes.clone(),
    };
    let rebound = crate::axis_env::current_mesh().filter(|m| m.axis_index(axis_name).is_some());
    let checked = match rebound {
        Some(_) => Err(crate::axis_env::reused_axis("pmap", axis_name).to_string()),
        None => check_in_axes(args, &in_axes, axes.axis_size),
    }
    .and_then(|n| AbstractMesh::auto(&[(axis_name, n)]).map_err(|e| e.to_string()));
    let mesh = match checked {
        Ok(mesh) => mesh,
        Err(e) => {
            // Traced anyway, only to stand in for as many results as the function gives.
            let avals: Vec<ShapedArray> = args.iter().map(|a| a.aval().clone()).collect();
            let (_, outs) = trace_counted(&avals, |a| f(a));
            return first.fail_with("pmap", e, &outs);
        }
    };
    let mapped = PartitionSpec::new(vec![DimSpec::from_axes(&[axis_name])]);
    let whole = PartitionSpec::replicated();
    let fronted: Vec<Tensor> = args
        .iter()
        .zip(&in_axes)
        .map(|(a, ax)| match ax {
            Some(k) => move_axis(a, *k, 0),
            None => (*a).clone(),
        })
        .collect();
    let in_specs: Vec<PartitionSpec> = in_axes
        .iter()
        .map(|ax| match ax {
            Some(_) => mapped.clone(),
            None => whole.clone(),
        })
        .collect();
    let out_axes = |k: usize| -> Vec<Option<usize>> {
        match axes.out_axes.is_empty() {
            true => vec![Some(0); k],
            false => axes.out_axes.clone(),
        }
    };
    let out_specs = |k: usize| -> Vec<PartitionSpec> {
        out_axes(k)
            .iter()
            .map(|ax| match ax {
                Some(_) => mapped.clone(),
                None => whole.clone(),
            })
            .collect()
    };
    let refs: Vec<&Tensor> = fronted.iter().collect();
    let mut result_axes = Vec::new();
    let outs = shard_map_with(&mesh, &in_specs, &out_specs, &refs, |blocks| {
        let seen: Vec<Tensor> = blocks
            .iter()
            .zip(&in_axes)
            .map(|(b, ax)| match ax {
                Some(_) => b.reshape(&b.shape()[1..]),
                None => b.clone(),
            })
            .collect();
        let results = f(&seen);
        result_axes = out_axes(results.len());
        if result_axes.len() != results.len() {
            let msg = format!(
                "out_axes names {} results but the function returns {}",
                result_axes.len(),
                results.len()
            );
            return results
                .iter()
                .map(|r| r.fail("pmap", msg.clone()))
                .collect();
        }
        results
            .iter()
            .zip(&result_axes)
            .map(|(o, ax)| match ax {
                Some(_) => {
                    let mut shape = vec![1];
                    shape.extend_from_slice(o.shape());
                    o.reshape(&shape)
                }
                None => o.clone(),
            })
            .collect()
    });
    outs.iter()
        .zip(result_axes.iter().chain(std::iter::repeat(&None)))
        .map(|(o, ax)| match ax {
            Some(k) if *k <= o.rank().saturating_sub(1) => move_axis(o, 0, *k),
            Some(k) => o.fail(
                "pmap",
                format!(
                    "out_axes {k} is past the last dimension of a result of rank {}",
                    o.rank()
                ),
            ),
            None => o.clone(),
        })
        .collect()
}

/// The number of devices: the size of every mapped dimension, which must agree with each
/// other and with `axis_size`.
fn check_in_axes(
    args: &[&Tensor],
    in_axes: &[Option<usize>],
    axis_size: Option<i64>,
) -> Result<i64, String> {
    if in_axes.len() != args.len() {
        return Err(format!(
            "in_axes names {} arguments but pmap got {}",
            in_axes.len(),
            args.len()
        ));
    }
    let mut size = axis_size;
    for (i, (a, ax)) in args.iter().zip(in_axes).enumerate() {
        let Some(k) = ax else { continue };
        let Some(&n) = a.shape().get(*k) else {
            return Err(format!(
                "in_axes maps dimension {k} of argument {i}, which has rank {}",
                a.rank()
            ));
        };
        match size {
            Some(m) if m != n => {
                return Err(format!(
                    "argument {i} has {n} entries along its mapped dimension {k}, but the \
                     mapped size is {m} (every mapped dimension and axis_size must agree)"
                ));
            }
            _ => size = Some(n),
        }
    }
    size.ok_or_else(|| {
        "no argument is mapped (every in_axes is None): give axis_size, the number of devices"
            .to_owned()
    })
}

/// `x` with dimension `from` moved to position `to`.
fn move_axis(x: &Tensor, from: usize, to: usize) -> Tensor {
    if from == to {
        return x.clone();
    }
    let mut order: Vec<i64> = (0..x.rank() as i64).filter(|&d| d != from as i64).collect();
    order.insert(to, from as i64);
    x.transpose(&order)
}
