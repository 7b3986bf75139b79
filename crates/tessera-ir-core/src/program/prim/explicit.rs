//! Sharding rules of explicit types (JAX's "sharding in types" on an `Explicit` mesh): which
//! mesh axes split each dimension of a primitive's result (`f32[8@pp,4]`), derived from its
//! operands' as JAX's `*_sharding_rule`s derive them (`lax.py`, `slicing.py`):
//!
//! - elementwise operations broadcast: along each dimension the operands split over the same
//!   axes, or some are not split (a scalar, a replicated operand) and adopt the others';
//!   operands split over different axes are refused (reshard one). `select_n` is checked so
//!   too (JAX, stricter, wants its cases split exactly alike). Unary operations and
//!   `convert_element_type` keep the operand's sharding, `clamp` its middle operand's;
//! - `broadcast_in_dim`, `transpose`, `squeeze`, `expand_dims` move the dimensions' axes with
//!   the dimensions; reductions drop the reduced dimensions;
//! - `dot_general`: batch dimensions split alike; contracting dimensions split on both sides
//!   are refused (the result's sharding would be ambiguous: JAX asks for `out_sharding`);
//!   the result is split as the batch, then the free dimensions of each side;
//! - `reshape`: the cases JAX allows (size-1 dimensions added or removed, one dimension split
//!   or several merged, see `explicit_reshape.rs`), others refused;
//! - `slice`, `dynamic_slice`, `pad` keep the operand's sharding (a split dimension whose size
//!   changes must stay divisible by its axes, where the mesh is known); `concatenate` and
//!   `dynamic_update_slice` need operands sharded alike;
//! - `reshard` gives its result the type written for it (the destination JAX does not print).
//!
//! A primitive without a rule here (gathers, windows, sorts, loops, random bits) takes the
//! explicit type written for its result, if any. The mesh's axis sizes, where a rule needs
//! them, come from `trace::use_mesh` (a `jit`'s `ctx_mesh` while verifying). Values without
//! explicit types never meet a refusal: every rule keeps unsplit dimensions unsplit.

use super::explicit_reshape::reshape_dims;
use super::{
    ControlOp, DotDims, ElementwiseOp, Family, NumericOp, Prim, ReductionOp, ReductionParams,
    StructuralOp, StructuralParams,
};
use crate::aval::ShapedArray;
use crate::error::{IrError, Result};
use crate::program::params::Params;

/// Per dimension, the mesh axes splitting it (empty: not split).
pub(super) type Dims = Vec<Vec<String>>;

/// What a sharding rule derives.
pub(super) enum Derived {
    /// The single result is split so.
    Dims(Dims),
    /// The shape rule's results already carry their types (identities, nested calls).
    Kept,
    /// No rule: the results take the explicit types written for them, where given.
    Written,
    /// The rule needs what is unknown (the mesh's axis sizes): the written result types, or
    /// this error where none are given.
    WrittenOr(IrError),
}

/// A refusal of `prim`'s sharding rule.
pub(super) fn refuse(prim: Prim, message: impl Into<String>) -> IrError {
    IrError::Sharding {
        prim: prim.name().to_owned(),
        message: message.into(),
    }
}

/// The size of mesh axis `axis` in the context mesh, where one is set.
pub(super) fn axis_size(axis: &str) -> Option<i64> {
    crate::axis_env::context_mesh().and_then(|m| m.axis_size(axis))
}

/// Whether parameter `key` is given (present and not `None`): an explicit result sharding.
fn given(params: &Params, key: &str) -> bool {
    params.get(key).is_some_and(|v| !v.is_none())
}

/// Sets the explicit dimensions of `outs` by `prim`'s sharding rule; `written` are the result
/// types written in the program (or given by the tracer), if any.
pub(super) fn apply(
    prim: Prim,
    params: &Params,
    inputs: &[ShapedArray],
    written: Option<&[ShapedArray]>,
    outs: &mut [ShapedArray],
) -> Result<()> {
    if written.is_none() && !inputs.iter().any(ShapedArray::is_explicitly_sharded) {
        // Nothing split and no result type given: every rule leaves the results unsplit.
        return Ok(());
    }
    let derived = derive(prim, params, inputs, outs)?;
    match derived {
        Derived::Dims(dims) => {
            if let Some(out) = outs.first_mut() {
                out.set_explicit_dims(dims);
            }
        }
        Derived::Kept => {}
        Derived::WrittenOr(e) if written.is_none() => return Err(e),
        Derived::Written | Derived::WrittenOr(_) => {
            for (out, w) in outs.iter_mut().zip(written.unwrap_or(&[])) {
                if out.rank() == w.rank() {
                    out.set_explicit_dims(w.explicit_dims());
                }
            }
        }
    }
    Ok(())
}

fn derive(
    prim: Prim,
    params: &Params,
    inputs: &[ShapedArray],
    outs: &[ShapedArray],
) -> Result<Derived> {
    let first = || {
        inputs
            .first()
            .map(ShapedArray::explicit_dims)
            .unwrap_or_default()
    };
    let out_shape = || outs.first().map(|o| o.shape.clone()).unwrap_or_default();
    let dims = match prim.family() {
        Family::Elementwise(op) => match op {
            ElementwiseOp::Unary(_) => first(),
            ElementwiseOp::Convert if given(params, "sharding") => return Ok(Derived::Written),
            ElementwiseOp::Convert => first(),
            ElementwiseOp::Clamp => inputs
                .get(1)
                .map(ShapedArray::explicit_dims)
                .unwrap_or_default(),
            ElementwiseOp::Binary(_) | ElementwiseOp::Compare(_) | ElementwiseOp::SelectN => {
                broadcasting(prim, inputs)?
            }
        },
        Family::Numeric(op) => match op {
            NumericOp::Atan2
            | NumericOp::ShiftLeft
            | NumericOp::ShiftRightLogical
            | NumericOp::ShiftRightArithmetic
            | NumericOp::Polygamma => broadcasting(prim, inputs)?,
            NumericOp::BitcastConvertType => {
                // A wider or narrower dtype adds or drops a minor, unsplit dimension.
                let mut d = first();
                d.resize(out_shape().len(), Vec::new());
                d
            }
            NumericOp::Erf
            | NumericOp::Erfc
            | NumericOp::ErfInv
            | NumericOp::Lgamma
            | NumericOp::Digamma
            | NumericOp::Tan
            | NumericOp::Asin
            | NumericOp::Acos
            | NumericOp::Atan
            | NumericOp::Sinh
            | NumericOp::Cosh
            | NumericOp::Asinh
            | NumericOp::Acosh
            | NumericOp::Atanh
            | NumericOp::Cbrt
            | NumericOp::Square
            | NumericOp::IsFinite
            | NumericOp::PopulationCount => first(),
        },
        Family::Structural(op) => return structural(prim, op, params, inputs, &out_shape()),
        Family::Reduce(op) => {
            let x = inputs
                .first()
                .ok_or_else(|| refuse(prim, "takes an operand"))?;
            match op {
                ReductionOp::Reduce(_) if given(params, "out_sharding") => {
                    return Ok(Derived::Written);
                }
                ReductionOp::Reduce(_) | ReductionOp::Argmax | ReductionOp::Argmin => {
                    let axes = match ReductionParams::read(prim, params, x.rank())? {
                        ReductionParams::Axes(axes) => axes,
                        ReductionParams::Index { axis, .. } => vec![axis],
                        ReductionParams::Scan { .. } => Vec::new(),
                    };
                    first()
                        .into_iter()
                        .enumerate()
                        .filter(|(d, _)| !axes.contains(d))
                        .map(|(_, a)| a)
                        .collect()
                }
                ReductionOp::Cumsum | ReductionOp::Cumulative(_) => first(),
            }
        }
        Family::Linalg => {
            if given(params, "out_sharding") {
                return Ok(Derived::Written);
            }
            dot_general(prim, &super::dot_dims(params)?, inputs)?
        }
        Family::Control(op) => match op {
            ControlOp::Jit
            | ControlOp::Checkpoint
            | ControlOp::StopGradient
            | ControlOp::Copy
            | ControlOp::OptimizationBarrier
            | ControlOp::AsyncDone
            | ControlOp::PipelineEnterStage => return Ok(Derived::Kept),
            ControlOp::Reshard | ControlOp::ShardingConstraint => return Ok(Derived::Written),
        },
        Family::Collective(_) | Family::ShardMap => return Ok(Derived::Kept),
        Family::Indexing(_)
        | Family::Treduce
        | Family::Random(_)
        | Family::Sort(_)
        | Family::Window(_)
        | Family::Flow(_)
        | Family::Callback(_)
        | Family::Attention(_) => return Ok(Derived::Written),
    };
    unique_axes(prim, &dims)?;
    Ok(Derived::Dims(dims))
}

/// A result may name a mesh axis on one dimension only.
fn unique_axes(prim: Prim, dims: &Dims) -> Result<()> {
    for (i, a) in dims.iter().enumerate() {
        for (j, b) in dims.iter().enumerate().skip(i + 1) {
            if let Some(axis) = a.iter().find(|x| b.contains(x)) {
                return Err(refuse(
                    prim,
                    format!(
                        "the result would be split over mesh axis '{axis}' along dimensions {i} \
                         and {j}; reshard an operand so that only one of them is"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// JAX's `broadcasting_sharding_rule`: along each dimension, the operands' axes (scalars left
/// out) agree, or are absent on some.
fn broadcasting(prim: Prim, inputs: &[ShapedArray]) -> Result<Dims> {
    let shaped: Vec<&ShapedArray> = inputs.iter().filter(|a| a.rank() > 0).collect();
    let Some(rank) = shaped.first().map(|a| a.rank()) else {
        return Ok(Vec::new());
    };
    let mut out: Dims = vec![Vec::new(); rank];
    for (d, slot) in out.iter_mut().enumerate() {
        let mut from: Option<&ShapedArray> = None;
        for &a in &shaped {
            let axes = a.explicit_dims().get(d).cloned().unwrap_or_default();
            if axes.is_empty() {
                continue;
            }
            match from {
                None => {
                    *slot = axes;
                    from = Some(a);
                }
                Some(b) if *slot != axes => {
                    return Err(refuse(
                        prim,
                        format!(
                            "operands of types {b} and {a} are split differently along \
                             dimension {d} ({} and {}); reshard one of them to the other's \
                             sharding first",
                            b.explicit_spec(),
                            a.explicit_spec()
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
    }
    Ok(out)
}

/// JAX's `_dot_general_sharding_rule`.
fn dot_general(prim: Prim, dd: &DotDims, inputs: &[ShapedArray]) -> Result<Dims> {
    let [l, r] = inputs else {
        return Err(refuse(prim, "takes two operands"));
    };
    let (ld, rd) = (l.explicit_dims(), r.explicit_dims());
    let at = |dims: &Dims, i: usize| dims.get(i).cloned().unwrap_or_default();
    for (&a, &b) in dd.lhs_batch.iter().zip(&dd.rhs_batch) {
        if at(&ld, a) != at(&rd, b) {
            return Err(refuse(
                prim,
                format!(
                    "batch dimension {a} of {l} and batch dimension {b} of {r} must be split \
                     alike ({} and {}); reshard one operand to the other's sharding",
                    l.explicit_spec(),
                    r.explicit_spec()
                ),
            ));
        }
    }
    for (&a, &b) in dd.lhs_contract.iter().zip(&dd.rhs_contract) {
        if !at(&ld, a).is_empty() && !at(&rd, b).is_empty() {
            return Err(refuse(
                prim,
                format!(
                    "contracting dimension {a} of {l} and contracting dimension {b} of {r} are \
                     both split ({} and {}), so the result's sharding is ambiguous; reshard \
                     one operand so that its contracting dimension is not split, or give the \
                     result's sharding (`out_sharding`)",
                    l.explicit_spec(),
                    r.explicit_spec()
                ),
            ));
        }
    }
    let mut out: Dims = dd.lhs_batch.iter().map(|&a| at(&ld, a)).collect();
    out.extend(dd.lhs_free(l.rank()).into_iter().map(|a| at(&ld, a)));
    out.extend(dd.rhs_free(r.rank()).into_iter().map(|b| at(&rd, b)));
    Ok(out)
}

/// The shape-changing primitives.
fn structural(
    prim: Prim,
    op: StructuralOp,
    params: &Params,
    inputs: &[ShapedArray],
    out_shape: &[i64],
) -> Result<Derived> {
    let x = inputs.first();
    let xd = x.map(ShapedArray::explicit_dims).unwrap_or_default();
    let dims = match StructuralParams::read(op, params)? {
        StructuralParams::Iota { .. } if given(params, "sharding") => return Ok(Derived::Written),
        StructuralParams::Iota { .. } => Vec::new(),
        StructuralParams::BroadcastInDim { .. } if given(params, "sharding") => {
            return Ok(Derived::Written);
        }
        StructuralParams::BroadcastInDim {
            broadcast_dimensions,
            ..
        } => {
            let mut out = vec![Vec::new(); out_shape.len()];
            for (k, &bd) in broadcast_dimensions.iter().enumerate() {
                if let (Some(slot), Some(axes)) = (out.get_mut(bd as usize), xd.get(k)) {
                    slot.clone_from(axes);
                }
            }
            out
        }
        StructuralParams::Reshape { .. } if given(params, "sharding") => {
            return Ok(Derived::Written);
        }
        StructuralParams::Reshape { .. } => match x {
            Some(x) => match reshape_dims(prim, x, out_shape)? {
                Some(d) => d,
                None => {
                    return Ok(Derived::WrittenOr(refuse(
                        prim,
                        format!(
                            "reshaping {x} to {out_shape:?} splits or merges a split dimension, \
                             which needs the mesh's axis sizes: trace inside \
                             tessera_ir::trace::use_mesh(mesh, ..)"
                        ),
                    )));
                }
            },
            None => Vec::new(),
        },
        StructuralParams::Squeeze { dimensions } => {
            let rank = xd.len() as i64;
            let dropped: Vec<usize> = dimensions
                .iter()
                .map(|&d| if d < 0 { d + rank } else { d } as usize)
                .collect();
            xd.into_iter()
                .enumerate()
                .filter(|(d, _)| !dropped.contains(d))
                .map(|(_, a)| a)
                .collect()
        }
        StructuralParams::ExpandDims { dimensions } => {
            let rank = out_shape.len() as i64;
            let mut added: Vec<usize> = dimensions
                .iter()
                .map(|&d| if d < 0 { d + rank } else { d } as usize)
                .collect();
            added.sort_unstable();
            let mut out = xd;
            for d in added {
                out.insert(d.min(out.len()), Vec::new());
            }
            out
        }
        StructuralParams::Transpose { permutation } => permutation
            .iter()
            .map(|&p| xd.get(p as usize).cloned().unwrap_or_default())
            .collect(),
        StructuralParams::Slice { .. }
        | StructuralParams::DynamicSlice { .. }
        | StructuralParams::Pad { .. } => match x {
            Some(x) => varying_out_shape(prim, x, out_shape)?,
            None => Vec::new(),
        },
        StructuralParams::DynamicUpdateSlice => {
            same_sharding(prim, inputs.get(..2).unwrap_or(inputs))?
        }
        StructuralParams::Concatenate { .. } => same_sharding(prim, inputs)?,
    };
    unique_axes(prim, &dims)?;
    Ok(Derived::Dims(dims))
}

/// JAX's `_get_sharding_for_varying_out_shape`: the operand's sharding, where each split
/// dimension whose size changes stays divisible by its axes (checked where the mesh is known).
fn varying_out_shape(prim: Prim, x: &ShapedArray, out_shape: &[i64]) -> Result<Dims> {
    if out_shape.iter().all(|&s| s == 1) {
        return Ok(Vec::new());
    }
    let dims = x.explicit_dims();
    for (d, axes) in dims.iter().enumerate() {
        let (before, after) = (x.shape.get(d).copied(), out_shape.get(d).copied());
        let Some(after) = after else { continue };
        if axes.is_empty() || before == Some(after) {
            continue;
        }
        let size: Option<i64> = axes.iter().map(|a| axis_size(a)).product();
        if let Some(size) = size
            && after % size != 0
        {
            return Err(refuse(
                prim,
                format!(
                    "dimension {d} of {x} is split over {} devices and would have size \
                     {after}, which they do not divide; reshard the operand so that \
                     dimension {d} is not split first",
                    size
                ),
            ));
        }
    }
    Ok(dims)
}

/// `concatenate`, `dynamic_update_slice`: the operands (scalars left out) are split alike.
fn same_sharding(prim: Prim, inputs: &[ShapedArray]) -> Result<Dims> {
    let shaped: Vec<&ShapedArray> = inputs.iter().filter(|a| a.rank() > 0).collect();
    let Some(first) = shaped.first() else {
        return Ok(Vec::new());
    };
    if let Some(other) = shaped
        .iter()
        .find(|a| a.explicit_dims() != first.explicit_dims())
    {
        return Err(refuse(
            prim,
            format!(
                "operands of types {first} and {other} must be split alike ({} and {}); \
                 reshard one of them to the other's sharding first",
                first.explicit_spec(),
                other.explicit_spec()
            ),
        ));
    }
    Ok(first.explicit_dims())
}
