//! The batching rule of every primitive: given operands with their batch dimensions (at least
//! one batched), the batched results and their batch dimensions. One exhaustive `match`, so a
//! primitive without a rule does not compile. Most rules move the batch dimension to the front
//! and shift the primitive's axis parameters by one.

use super::indexing;
use super::{Batched, move_axis, shifted, to_front, with_param};
use crate::aval::ShapedArray;
use crate::params::{ParamValue, Params};
use crate::prim::{Prim, ReductionParams, StructuralParams};
use crate::trace::Tensor;

/// Batches one equation. `out` are the unbatched result types.
pub(super) fn batch_rule(
    prim: Prim,
    params: &Params,
    args: &[Batched],
    size: i64,
    out: &[ShapedArray],
) -> Vec<Batched> {
    use Prim::*;
    let one = |t: Tensor| vec![(t, Some(0))];
    let rank = out.first().map_or(0, ShapedArray::rank);
    let in_rank = args[0]
        .0
        .rank()
        .saturating_sub(usize::from(args[0].1.is_some()));
    match prim {
        DotProductAttention | DotProductAttentionBwd => {
            super::attention::batch(prim, params, args, size)
        }
        Neg | Abs | Sign | Exp | Exp2 | Log | Log1p | Expm1 | Tanh | Logistic | Sin | Cos
        | Sqrt | Rsqrt | Floor | Ceil | Round | Not | IntegerPow | ConvertElementType
        | StopGradient | Copy | OptimizationBarrier | Reshard | PipelineEnterStage => {
            same_dims(prim, params, args)
        }
        ShardingConstraint => vec![sharding_constraint(params, &args[0])],
        Add | Sub | Mul | Div | Rem | Pow | Max | Min | And | Or | Xor | Eq | Ne | Lt | Le | Gt
        | Ge | AddAny | SelectN | Clamp => one(elementwise(prim, params, args, size, rank)),
        Iota => vec![(unsupported(args, prim, "an iota with operands"), None)],
        BroadcastInDim => one(broadcast_in_dim(params, args, size, out)),
        Reshape => one(reshape(params, args, size, out)),
        Squeeze | ExpandDims => match StructuralParams::of(prim, params) {
            Ok(StructuralParams::Squeeze { dimensions }) => one(shift_dimensions(
                prim,
                params,
                args,
                size,
                norm_axes(dimensions, in_rank),
            )),
            Ok(StructuralParams::ExpandDims { dimensions }) => one(shift_dimensions(
                prim,
                params,
                args,
                size,
                norm_axes(dimensions, rank),
            )),
            Ok(other) => one(args[0].0.fail(prim.name(), format!("read as {other:?}"))),
            Err(e) => one(malformed(args, prim, &e)),
        },
        Transpose => match StructuralParams::of(prim, params) {
            Ok(StructuralParams::Transpose { permutation }) => {
                one(to_front(&args[0], size).transpose(&shifted(&permutation, Some(0))))
            }
            Ok(other) => one(args[0].0.fail(prim.name(), format!("read as {other:?}"))),
            Err(e) => one(malformed(args, prim, &e)),
        },
        Slice => one(slice(params, &to_front(&args[0], size), size)),
        ReduceSum | ReduceMax | ReduceMin | ReduceProd | ReduceAnd | ReduceOr | Argmax | Argmin
        | Cumsum | Cumprod | Cummax | Cummin | Cumlogsumexp => {
            one(shift_reduction(prim, params, args, size, in_rank))
        }
        Concatenate => one(concatenate(params, args, size, rank)),
        Pad => one(pad(params, args, size)),
        DotGeneral => vec![dot_general(params, args)],
        DynamicSlice => one(indexing::dynamic_slice(params, args, size)),
        DynamicUpdateSlice => one(indexing::dynamic_update_slice(params, args, size)),
        Gather => one(indexing::gather(params, args, size)),
        ScatterAdd | Scatter | ScatterMul | ScatterMin | ScatterMax => {
            one(indexing::scatter(prim, params, args, size))
        }
        Checkpoint => super::parallel::checkpoint(params, args, size, out.len()),
        Treduce => out
            .iter()
            .map(|_| {
                (
                    unsupported(
                        args,
                        prim,
                        "treduce here; vmap unrolls loops at its entry point",
                    ),
                    None,
                )
            })
            .collect(),
        Jit => out
            .iter()
            .map(|_| {
                (
                    unsupported(args, prim, "a nested call with constants"),
                    None,
                )
            })
            .collect(),
        Psum
        | Pmax
        | Pmin
        | AllGather
        | ReduceScatter
        | Ppermute
        | AllToAll
        | AxisIndex
        | Pvary
        | Pbroadcast
        | PsumInvariant
        | AllGatherInvariant
        | Preduced
        | VaryUnreducedCast
        | UnreducedPsum
        | ReducedVaryCast
        | AllGatherReduced
        | UnreducedReduceScatter
        | RaggedAllToAll
        | Psend
        | Precv => super::parallel::collective(prim, params, args, size),
        // A start batches as its collective (the batched program runs the synchronous one);
        // a done passes the batched value through.
        PsumStart
        | AllGatherStart
        | ReduceScatterStart
        | AllToAllStart
        | PbroadcastStart
        | PpermuteStart
        | PsumInvariantStart
        | UnreducedPsumStart
        | UnreducedReduceScatterStart
        | AllGatherReducedStart => {
            super::parallel::collective(prim.synchronous(), params, args, size)
        }
        PsumDone | AllGatherDone | ReduceScatterDone | AllToAllDone | PbroadcastDone
        | PpermuteDone => args.to_vec(),
        ShardMap => super::parallel::shard_map(params, args, size, out.len()),
        // Special functions, bit operations, random numbers, sorting.
        Erf | Erfc | ErfInv | Lgamma | Digamma | Tan | Asin | Acos | Atan | Sinh | Cosh | Asinh
        | Acosh | Atanh | Cbrt | Square | IsFinite | BitcastConvertType | PopulationCount => {
            same_dims(prim, params, args)
        }
        Polygamma | Atan2 | ShiftLeft | ShiftRightLogical | ShiftRightArithmetic => {
            one(elementwise(prim, params, args, size, rank))
        }
        RandomSeed | RandomWrap | RandomUnwrap | RandomBits | RandomSplit | RandomFoldIn
        | Threefry2x32 => super::random::random(prim, params, args, size, rank),
        Sort | TopK => super::sort::sort(prim, params, args, size),
        // Cumulative ops, scatters, windows, convolution.
        ReduceWindowSum | ReduceWindowMax | ReduceWindowMin | ReduceWindow
        | SelectAndScatterAdd | ConvGeneralDilated => {
            vec![super::window::window(prim, params, args, size)]
        }
        CustomJvpCall | CustomVjpCall => {
            super::flow::custom_call(prim, params, args, size, out.len())
        }
        Scan => super::flow::scan(params, args, size, out.len()),
        Cond => super::flow::cond(params, args, size, out.len()),
        While => super::flow::while_loop(params, args, size, out.len()),
        PureCallback | IoCallback | DebugCallback => {
            super::callback::callback(prim, params, args, size, out)
        }
    }
}

/// Primitives that act on each element or pass values through: the same equation on the
/// batched operands, each result keeping its operand's batch dimension.
/// The constraint on a batched operand: the batch dimension is split over the running
/// `vmap_spmd`'s axes (JAX's `spmd_axis_name`), or left unsplit.
fn sharding_constraint(params: &Params, arg: &Batched) -> Batched {
    let bdim = arg.1.unwrap_or(0);
    match crate::prim::ConstraintParams::read(params) {
        Ok(p) => (
            Tensor::bind1(
                Prim::ShardingConstraint,
                p.batched_over(bdim, &super::spmd_axes()).to_params(),
                &[&arg.0],
            ),
            arg.1,
        ),
        Err(e) => (
            malformed(std::slice::from_ref(arg), Prim::ShardingConstraint, &e),
            arg.1,
        ),
    }
}

fn same_dims(prim: Prim, params: &Params, args: &[Batched]) -> Vec<Batched> {
    let refs: Vec<&Tensor> = args.iter().map(|(t, _)| t).collect();
    let outs = Tensor::bind(prim, params.clone(), &refs);
    outs.into_iter()
        .zip(args)
        .map(|(t, (_, d))| (t, *d))
        .collect()
}

fn broadcast_in_dim(params: &Params, args: &[Batched], size: i64, out: &[ShapedArray]) -> Tensor {
    let prim = Prim::BroadcastInDim;
    let bdims = match StructuralParams::of(prim, params) {
        Ok(StructuralParams::BroadcastInDim {
            broadcast_dimensions,
            ..
        }) => broadcast_dimensions,
        Ok(other) => return args[0].0.fail(prim.name(), format!("read as {other:?}")),
        Err(e) => return malformed(args, prim, &e),
    };
    let x = to_front(&args[0], size);
    x.broadcast_in_dim(&shifted_shape(size, out), &shifted(&bdims, Some(0)))
}

fn reshape(params: &Params, args: &[Batched], size: i64, out: &[ShapedArray]) -> Tensor {
    // The typed reader refuses `dimensions` other than None (JAX's transposing reshape).
    if let Err(e) = StructuralParams::of(Prim::Reshape, params) {
        return malformed(args, Prim::Reshape, &e);
    }
    let sizes = ParamValue::ints(&shifted_shape(size, out));
    let p = with_param(params, "new_sizes", sizes);
    Tensor::bind1(Prim::Reshape, p, &[&to_front(&args[0], size)])
}

/// `squeeze` / `expand_dims` with the batch dimension in front and their (normalised)
/// `dimensions` shifted past it.
fn shift_dimensions(
    prim: Prim,
    params: &Params,
    args: &[Batched],
    size: i64,
    dimensions: Vec<i64>,
) -> Tensor {
    let p = with_param(
        params,
        "dimensions",
        ParamValue::ints(&shifted(&dimensions, None)),
    );
    Tensor::bind1(prim, p, &[&to_front(&args[0], size)])
}

/// A reduction with the batch dimension in front: its typed axes (or scanned axis) shifted by
/// one, written back as JAX prints them.
fn shift_reduction(
    prim: Prim,
    params: &Params,
    args: &[Batched],
    size: i64,
    rank: usize,
) -> Tensor {
    let typed = match ReductionParams::read(prim, params, rank) {
        Ok(typed) => typed,
        Err(e) => return malformed(args, prim, &e),
    };
    let p = match typed {
        ReductionParams::Scan { axis, .. } => {
            with_param(params, "axis", ParamValue::Int(axis as i64 + 1))
        }
        ReductionParams::Axes(_) | ReductionParams::Index { .. } => with_param(
            params,
            "axes",
            ParamValue::ints(&shifted(&typed.axes_i64(), None)),
        ),
    };
    Tensor::bind1(prim, p, &[&to_front(&args[0], size)])
}

/// `concatenate` of operands with the batch dimension in front, along its typed dimension
/// shifted past it.
fn concatenate(params: &Params, args: &[Batched], size: i64, rank: usize) -> Tensor {
    let prim = Prim::Concatenate;
    let dimension = match StructuralParams::of(prim, params) {
        Ok(StructuralParams::Concatenate { dimension }) => norm_axes(vec![dimension], rank)[0],
        Ok(other) => return args[0].0.fail(prim.name(), format!("read as {other:?}")),
        Err(e) => return malformed(args, prim, &e),
    };
    let ops: Vec<Tensor> = args.iter().map(|a| to_front(a, size)).collect();
    let refs: Vec<&Tensor> = ops.iter().collect();
    let p = with_param(params, "dimension", ParamValue::Int(dimension + 1));
    Tensor::bind1(prim, p, &refs)
}

/// Records a malformed parameter of `prim` (the trace returns it as an error).
pub(super) fn malformed(args: &[Batched], prim: Prim, e: &crate::error::IrError) -> Tensor {
    args[0].0.fail(prim.name(), e.to_string())
}

/// Records that `prim` cannot be batched in `case` (the trace returns it as an error).
pub(super) fn unsupported(args: &[Batched], prim: Prim, case: &str) -> Tensor {
    let first = &args[0].0;
    first.fail(prim.name(), format!("vmap does not support {case} yet"))
}

/// The unbatched result shape with the batch dimension in front.
fn shifted_shape(size: i64, out: &[ShapedArray]) -> Vec<i64> {
    let shape = out.first().map(|a| a.shape.clone()).unwrap_or_default();
    std::iter::once(size).chain(shape).collect()
}

/// Axes normalised against `rank` (negative ones count from the end).
pub(super) fn norm_axes(axes: Vec<i64>, rank: usize) -> Vec<i64> {
    axes.into_iter()
        .map(|a| if a < 0 { a + rank as i64 } else { a })
        .collect()
}

/// Elementwise primitives: batched operands get their batch dimension in front (a batched
/// scalar becomes `[B, 1, ..]`); unbatched operands keep their values, lifted by a leading
/// size-1 dimension unless scalar, so size-1 broadcasting lines everything up.
fn elementwise(prim: Prim, params: &Params, args: &[Batched], size: i64, rank: usize) -> Tensor {
    let ops: Vec<Tensor> = args
        .iter()
        .map(|(t, d)| match d {
            Some(d) => {
                let front = move_axis(t, *d, 0);
                if t.rank() - 1 == rank {
                    front
                } else {
                    let mut shape = vec![size];
                    shape.extend(std::iter::repeat_n(1, rank));
                    front.reshape(&shape)
                }
            }
            None if t.rank() == 0 || rank == 0 => t.clone(),
            None => {
                let mut shape = vec![1];
                shape.extend_from_slice(t.shape());
                t.reshape(&shape)
            }
        })
        .collect();
    let refs: Vec<&Tensor> = ops.iter().collect();
    Tensor::bind1(prim, params.clone(), &refs)
}

fn slice(params: &Params, x: &Tensor, size: i64) -> Tensor {
    let name = "slice";
    let (start, limit, strides) = match StructuralParams::of(Prim::Slice, params) {
        Ok(StructuralParams::Slice {
            start_indices,
            limit_indices,
            strides,
        }) => (start_indices, limit_indices, strides),
        Ok(other) => return x.fail(name, format!("read as {other:?}")),
        Err(e) => return x.fail(name, e.to_string()),
    };
    let start: Vec<i64> = std::iter::once(0).chain(start).collect();
    let mut p = with_param(params, "start_indices", ParamValue::ints(&start));
    p = with_param(&p, "limit_indices", {
        let v: Vec<i64> = std::iter::once(size).chain(limit).collect();
        ParamValue::ints(&v)
    });
    // Printed strides (not `None`) get the batch dimension's unit step in front.
    if params.get("strides").is_some_and(|s| !s.is_none()) {
        let v: Vec<i64> = std::iter::once(1).chain(strides).collect();
        p = with_param(&p, "strides", ParamValue::ints(&v));
    }
    Tensor::bind1(Prim::Slice, p, &[x])
}

/// `pad(x, v)` with a batched padding value `v` is `pad(x, 0) + v * pad(zeros, 1)`: the second
/// term marks the padding (edges and interior).
fn pad(params: &Params, args: &[Batched], size: i64) -> Tensor {
    let config = match StructuralParams::of(Prim::Pad, params) {
        Ok(StructuralParams::Pad { padding_config }) => padding_config,
        Ok(other) => return args[0].0.fail("pad", format!("read as {other:?}")),
        Err(e) => return malformed(args, Prim::Pad, &e),
    };
    let triples: Vec<ParamValue> = config
        .iter()
        .map(|&(lo, hi, int)| ParamValue::ints(&[lo, hi, int]))
        .collect();
    let mut batched = vec![ParamValue::ints(&[0, 0, 0])];
    batched.extend(triples.iter().cloned());
    let p = with_param(params, "padding_config", ParamValue::Tuple(batched));
    let x = to_front(&args[0], size);
    let (v, vdim) = &args[1];
    if vdim.is_none() {
        return Tensor::bind1(Prim::Pad, p, &[&x, v]);
    }
    let dtype = x.dtype();
    if dtype == crate::dtype::DType::Bool {
        return unsupported(args, Prim::Pad, "a batched boolean padding value");
    }
    let zero = x.literal_strong(0.0, dtype);
    let padded = Tensor::bind1(Prim::Pad, p, &[&x, &zero]);
    let x0 = &args[0].0;
    let unbatched_shape = match args[0].1 {
        Some(d) => {
            let mut s = x0.shape().to_vec();
            s.remove(d);
            s
        }
        None => x0.shape().to_vec(),
    };
    let zeros = zero.broadcast_in_dim(&unbatched_shape, &[]);
    let one = x.literal_strong(1.0, dtype);
    let marks = Tensor::bind1(
        Prim::Pad,
        Params::new().with("padding_config", ParamValue::Tuple(triples)),
        &[&zeros, &one],
    );
    let mut vshape = vec![size];
    vshape.extend(std::iter::repeat_n(1, marks.rank()));
    let v = v.reshape(&vshape);
    let mut mshape = vec![1];
    mshape.extend_from_slice(marks.shape());
    let marks = marks.reshape(&mshape);
    let fill = Tensor::bind1(Prim::Mul, Params::new(), &[&v, &marks]);
    Tensor::bind1(Prim::Add, Params::new(), &[&padded, &fill])
}

/// `dot_general`: a batch dimension on both sides, or a free dimension on the batched side.
fn dot_general(params: &Params, args: &[Batched]) -> Batched {
    let Ok(dd) = crate::prim::dot_dims(params) else {
        return (
            unsupported(args, Prim::DotGeneral, "unreadable dimension numbers"),
            None,
        );
    };
    let i = |v: &[usize]| v.iter().map(|&d| d as i64).collect::<Vec<_>>();
    let (mut lc, mut rc, mut lb, mut rb) = (
        i(&dd.lhs_contract),
        i(&dd.rhs_contract),
        i(&dd.lhs_batch),
        i(&dd.rhs_batch),
    );
    let nb = lb.len();
    let (l, ld) = &args[0];
    let (r, rd) = &args[1];
    let (lhs, rhs, bdim) = match (ld, rd) {
        (Some(a), Some(b)) => {
            (lc, rc, lb, rb) = (
                shifted(&lc, None),
                shifted(&rc, None),
                shifted(&lb, Some(0)),
                shifted(&rb, Some(0)),
            );
            (move_axis(l, *a, 0), move_axis(r, *b, 0), 0)
        }
        (Some(a), None) => {
            (lc, lb) = (shifted(&lc, None), shifted(&lb, None));
            (move_axis(l, *a, 0), r.clone(), nb)
        }
        (None, Some(b)) => {
            let lhs_free = l.rank() - lc.len() - nb;
            (rc, rb) = (shifted(&rc, None), shifted(&rb, None));
            (l.clone(), move_axis(r, *b, 0), nb + lhs_free)
        }
        (None, None) => (l.clone(), r.clone(), 0),
    };
    let list = |v: &[i64]| ParamValue::List(v.iter().map(|&x| ParamValue::Int(x)).collect());
    let dims = ParamValue::Tuple(vec![
        ParamValue::Tuple(vec![list(&lc), list(&rc)]),
        ParamValue::Tuple(vec![list(&lb), list(&rb)]),
    ]);
    let p = with_param(params, "dimension_numbers", dims);
    let batched = ld.is_some() || rd.is_some();
    (
        Tensor::bind1(Prim::DotGeneral, p, &[&lhs, &rhs]),
        batched.then_some(bdim),
    )
}
