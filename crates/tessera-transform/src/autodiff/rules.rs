//! The VJP rule of every primitive: given the operands, the results and the cotangents of the
//! results, the cotangents of the operands (`None` where an operand gets none). One exhaustive
//! `match`, so a primitive without a rule does not compile.

use crate::dtype::DType;
use crate::params::{ParamValue, Params};
use crate::prim::{
    GatherDims, GatherParams, Prim, ReductionParams, ScatterDims, ScatterParams, StructuralParams,
    UnaryOp, UnaryParams,
};
use crate::trace::Tensor;

/// `a + b` of two cotangents of the same type.
pub(super) fn add_any(a: &Tensor, b: &Tensor) -> Tensor {
    Tensor::bind1(Prim::AddAny, Params::new(), &[a, b])
}

/// The cotangent of each result, zeros of the result's type where it has none.
pub(super) fn cotangents_or_zeros(gs: &[Option<Tensor>], y: &[Tensor]) -> Vec<Tensor> {
    gs.iter()
        .zip(y)
        .map(|(g, y)| g.clone().unwrap_or_else(|| zeros_like(y)))
        .collect()
}

/// Zeros of `x`'s type.
pub(crate) fn zeros_like(x: &Tensor) -> Tensor {
    let zero = x.literal_strong(0.0, x.dtype());
    if x.rank() == 0 {
        Tensor::bind1(
            Prim::ConvertElementType,
            convert_params(x.dtype()),
            &[&zero],
        )
    } else {
        zero.broadcast_in_dim(x.shape(), &[])
    }
}

/// Which operand `clamp(lo, x, hi) = min(max(x, lo), hi)` returns, as 0/1 masks of `dtype`:
/// `[lo, x, hi]` (`hi` wins where it is below `max(x, lo)`, then `lo` where it is above `x`).
pub(super) fn clamp_masks(x: &[Tensor], dtype: DType) -> [Tensor; 3] {
    let raised = x[1].maximum(&x[0]);
    let above = x[2].lt(&raised).astype(dtype);
    let not_above = 1.0 - &above;
    let below = &x[1].lt(&x[0]).astype(dtype) * &not_above;
    let inside = &x[1].ge(&x[0]).astype(dtype) * &not_above;
    [below, inside, above]
}

fn convert_params(dtype: DType) -> Params {
    Params::new()
        .with("new_dtype", ParamValue::Name(dtype.numpy_name().into()))
        .with("weak_type", ParamValue::Bool(false))
}

/// Sums `g` down to `shape` (undoing scalar and size-1 broadcasting of elementwise operands).
pub(super) fn unbroadcast(g: &Tensor, shape: &[i64]) -> Tensor {
    if g.shape() == shape {
        return g.clone();
    }
    if shape.is_empty() {
        let axes: Vec<i64> = (0..g.rank() as i64).collect();
        return g.sum(&axes);
    }
    let axes: Vec<i64> = (0..shape.len())
        .filter(|&d| shape[d] == 1 && g.shape()[d] != 1)
        .map(|d| d as i64)
        .collect();
    g.sum(&axes).reshape(shape)
}

fn int_list(v: &[i64]) -> ParamValue {
    ParamValue::Tuple(v.iter().map(|&x| ParamValue::Int(x)).collect())
}

/// Computes the cotangents of an equation's operands.
pub(super) fn vjp_rule(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    gs: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    use Prim::*;
    let Some(g) = gs
        .first()
        .cloned()
        .flatten()
        .or_else(|| gs.iter().flatten().next().cloned())
    else {
        return vec![None; x.len()];
    };
    // A parameter the rule reads; a malformed one fails the trace, never a default.
    macro_rules! read {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(e) => return vec![Some(g.fail(prim.name(), e.to_string())); x.len()],
            }
        };
    }
    // A shape-changing primitive's typed parameters, as the pattern `$variant` binds them.
    macro_rules! structural {
        ($variant:pat) => {
            let $variant = read!(StructuralParams::of(prim, params)) else {
                let e = format!("read another primitive's parameters: {params:?}");
                return vec![Some(g.fail(prim.name(), e)); x.len()];
            };
        };
    }
    let shape_of = |i: usize| x[i].shape().to_vec();
    let float = |i: usize| x[i].dtype().is_float();
    let keep = |i: usize, t: Tensor| float(i).then(|| unbroadcast(&t, &shape_of(i)));
    match prim {
        DotProductAttention | DotProductAttentionBwd => {
            super::attention::vjp(prim, params, x, y, gs)
        }
        Add | AddAny => vec![keep(0, g.clone()), keep(1, g)],
        Sub => vec![keep(0, g.clone()), keep(1, -&g)],
        Mul => vec![keep(0, &g * &x[1]), keep(1, &g * &x[0])],
        Div => vec![keep(0, &g / &x[1]), keep(1, -(&g * &y[0]) / &x[1])],
        Max | Min => {
            let pick = |a: &Tensor, b: &Tensor| {
                let ours = a.eq(&y[0]).astype(g.dtype());
                let theirs = b.eq(&y[0]).astype(g.dtype());
                &g * &(&ours * &(1.0 - &theirs * 0.5))
            };
            vec![keep(0, pick(&x[0], &x[1])), keep(1, pick(&x[1], &x[0]))]
        }
        Pow => {
            let dx = &(&g * &x[1]) * &x[0].binary(Pow, &(&x[1] - 1.0));
            let dy = &(&g * &x[0].log()) * &y[0];
            vec![keep(0, dx), keep(1, dy)]
        }
        Rem => {
            let q = &x[0] / &x[1];
            vec![
                keep(0, g.clone()),
                keep(1, -(&g * &(&q.sign() * &q.abs().floor_()))),
            ]
        }
        Neg => vec![Some(-&g)],
        Exp => vec![Some(&g * &y[0])],
        Exp2 => vec![Some(&(&g * &y[0]) * std::f64::consts::LN_2)],
        Log => vec![Some(&g / &x[0])],
        Log1p => vec![Some(&g / &(&x[0] + 1.0))],
        Expm1 => vec![Some(&g * &(&y[0] + 1.0))],
        // JAX's JVP (t + t y)(1 - y) transposed: u = g (1 - y), then u + u y (no cancellation
        // in 1 - y² where |y| is near 1, and JAX's rounding).
        Tanh => {
            let u = &g * &(1.0 - &y[0]);
            vec![Some(&u + &(&u * &y[0]))]
        }
        Logistic => vec![Some(&(&g * &y[0]) * &(1.0 - &y[0]))],
        Sin => vec![Some(&g * &x[0].cos())],
        Cos => vec![Some(-(&g * &x[0].sin()))],
        Sqrt => vec![Some(&g / &(&y[0] * 2.0))],
        Rsqrt => vec![Some(&(&g * &y[0]) * &(-0.5 / &x[0]))],
        Abs => vec![Some(&g * &x[0].sign())],
        IntegerPow => {
            let n = read!(UnaryParams::read(UnaryOp::IntegerPow, params)).y;
            let d = if n == 1 {
                x[0].full_like_scalar(1.0)
            } else {
                x[0].integer_pow(n - 1) * n as f64
            };
            vec![Some(&g * &d)]
        }
        Sign | Floor | Ceil | Round => vec![Some(zeros_like(&x[0]))],
        Not | And | Or | Xor | Eq | Ne | Lt | Le | Gt | Ge | Iota | Argmax | Argmin => {
            vec![None; x.len()]
        }
        StopGradient => vec![None],
        Copy | PipelineEnterStage | OptimizationBarrier => gs.to_vec(),
        // The cotangent goes back to the operand's explicit sharding (as in JAX).
        Reshard => vec![Some(resharded_like(&g, &x[0]))],
        // The cotangent is laid out as the primal was (as in JAX).
        ShardingConstraint => vec![Some(Tensor::bind1(prim, params.clone(), &[&g]))],
        ConvertElementType => vec![float(0).then(|| g.astype(x[0].dtype()))],
        SelectN => {
            let mut out = vec![None];
            for k in 1..x.len() {
                let cases: Vec<Tensor> = (1..x.len())
                    .map(|j| if j == k { g.clone() } else { zeros_like(&g) })
                    .collect();
                let mut operands: Vec<&Tensor> = vec![&x[0]];
                operands.extend(cases.iter());
                out.push(keep(k, Tensor::bind1(SelectN, Params::new(), &operands)));
            }
            out
        }
        Clamp => {
            let [below, inside, above] = clamp_masks(x, g.dtype());
            vec![
                keep(0, &g * &below),
                Some(&g * &inside),
                keep(2, &g * &above),
            ]
        }
        BroadcastInDim => {
            structural!(StructuralParams::BroadcastInDim {
                broadcast_dimensions,
                ..
            });
            vec![Some(unbroadcast_in_dim(&g, &x[0], &broadcast_dimensions))]
        }
        Reshape | Squeeze | ExpandDims => vec![Some(g.reshape(x[0].shape()))],
        Transpose => {
            structural!(StructuralParams::Transpose { permutation: perm });
            let mut inv = vec![0i64; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p as usize] = i as i64;
            }
            vec![Some(g.transpose(&inv))]
        }
        ReduceSum => {
            let axes = read!(ReductionParams::read(prim, params, x[0].rank())).axes_i64();
            vec![Some(
                g.keep_dims(&axes, x[0].rank()).broadcast_to(x[0].shape()),
            )]
        }
        ReduceMax | ReduceMin => {
            let axes = read!(ReductionParams::read(prim, params, x[0].rank())).axes_i64();
            let rank = x[0].rank();
            let full = |t: &Tensor| t.keep_dims(&axes, rank).broadcast_to(x[0].shape());
            let mask = x[0].eq(&full(&y[0])).astype(g.dtype());
            let count = full(&mask.sum(&axes));
            vec![Some(&(&full(&g) * &mask) / &count)]
        }
        ReduceProd => {
            let axes = read!(ReductionParams::read(prim, params, x[0].rank())).axes_i64();
            let rank = x[0].rank();
            let full = |t: &Tensor| t.keep_dims(&axes, rank).broadcast_to(x[0].shape());
            vec![Some(&(&full(&g) * &full(&y[0])) / &x[0])]
        }
        ReduceAnd | ReduceOr => vec![None],
        Cumsum => {
            // The transpose of a running sum is the running sum in the other direction.
            let typed = read!(ReductionParams::read(prim, params, x[0].rank()));
            let ReductionParams::Scan { axis, reverse } = typed else {
                return vec![Some(
                    g.fail(prim.name(), "read another primitive's parameters".into()),
                )];
            };
            let p = ReductionParams::scan_params(axis, !reverse);
            vec![Some(Tensor::bind1(Cumsum, p, &[&g]))]
        }
        DotGeneral => dot_general_vjp(params, &g, &x[0], &x[1]),
        Slice => {
            structural!(StructuralParams::Slice {
                start_indices: start,
                strides,
                ..
            });
            let dims = x[0].shape();
            let config: Vec<(i64, i64, i64)> = (0..dims.len())
                .map(|d| {
                    let n = g.shape()[d];
                    let end = start[d] + if n == 0 { 0 } else { (n - 1) * strides[d] + 1 };
                    (start[d], dims[d] - end, strides[d] - 1)
                })
                .collect();
            vec![Some(pad(&g, &config))]
        }
        Pad => {
            structural!(StructuralParams::Pad {
                padding_config: config
            });
            let unpad: Vec<(i64, i64, i64)> =
                config.iter().map(|&(lo, hi, _)| (-lo, -hi, 0)).collect();
            let cropped = pad(&g, &unpad);
            let strides: Vec<i64> = config.iter().map(|&(_, _, i)| i + 1).collect();
            let limit = cropped.shape().to_vec();
            let operand = slice(&cropped, &vec![0; limit.len()], &limit, &strides);
            let axes: Vec<i64> = (0..g.rank() as i64).collect();
            let pad_value = &g.sum(&axes) - &operand.sum(&axes);
            vec![Some(operand), Some(pad_value)]
        }
        Concatenate => {
            structural!(StructuralParams::Concatenate { dimension: dim });
            let dim = if dim < 0 { dim + g.rank() as i64 } else { dim } as usize;
            let mut offset = 0;
            x.iter()
                .map(|xi| {
                    let mut start = vec![0i64; g.rank()];
                    let mut limit = g.shape().to_vec();
                    start[dim] = offset;
                    limit[dim] = offset + xi.shape()[dim];
                    offset = limit[dim];
                    xi.dtype()
                        .is_float()
                        .then(|| slice(&g, &start, &limit, &vec![1; g.rank()]))
                })
                .collect()
        }
        DynamicSlice => {
            let zeros = zeros_like(&x[0]);
            let mut operands: Vec<&Tensor> = vec![&zeros, &g];
            operands.extend(x[1..].iter());
            let mut out = vec![Some(Tensor::bind1(
                DynamicUpdateSlice,
                Params::new(),
                &operands,
            ))];
            out.extend(std::iter::repeat_n(None, x.len() - 1));
            out
        }
        DynamicUpdateSlice => {
            let zeros = zeros_like(&x[1]);
            let mut operands: Vec<&Tensor> = vec![&g, &zeros];
            operands.extend(x[2..].iter());
            let operand = Tensor::bind1(DynamicUpdateSlice, Params::new(), &operands);
            let mut idx: Vec<&Tensor> = vec![&g];
            idx.extend(x[2..].iter());
            let sizes = Params::new().with("slice_sizes", int_list(x[1].shape()));
            let update = Tensor::bind1(DynamicSlice, sizes, &idx);
            let mut out = vec![Some(operand), Some(update)];
            out.extend(std::iter::repeat_n(None, x.len() - 2));
            out
        }
        Gather => vec![Some(gather_vjp(params, &g, &x[0], &x[1])), None],
        ScatterAdd => vec![
            Some(g.clone()),
            None,
            Some(scatter_add_vjp(params, &g, &x[1], &x[2])),
        ],
        // `inline_calls` keeps only calls with constants; they are differentiated whole.
        Jit => super::remat::call_vjp(prim, params, x, y, gs),
        Checkpoint => super::remat::checkpoint_vjp(params, x, y, gs),
        Treduce => super::loops::treduce_vjp(params, x, y, gs),
        CustomJvpCall | CustomVjpCall => super::custom::custom_vjp(prim, params, x, y, gs),
        Scan => super::scan::scan_vjp(params, x, y, gs),
        Cond => super::branch::cond_vjp(params, x, y, gs),
        While => super::branch::while_vjp(x, y),
        // `debug_callback` has no results, so no cotangents reach it.
        DebugCallback => vec![None; x.len()],
        // A host callback has no derivative (`prim/callback.rs`).
        PureCallback | IoCallback => {
            vec![Some(g.fail(prim.name(), crate::prim::differentiation_refusal(prim))); x.len()]
        }
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
        | UnreducedReduceScatter => super::parallel::collective_vjp(prim, params, x, &g),
        RaggedAllToAll => super::parallel::ragged_vjp(params, x, &g),
        Psend | Precv => super::parallel::p2p_vjp(prim, gs),
        // A start/done pair transposes as its collective: the done passes the cotangent to
        // the start, whose cotangent is the synchronous collective's.
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
            super::parallel::collective_vjp(prim.synchronous(), params, x, &g)
        }
        PsumDone | AllGatherDone | ReduceScatterDone | AllToAllDone | PbroadcastDone
        | PpermuteDone => gs.to_vec(),
        ShardMap => super::parallel::shard_map_vjp(params, x, y, gs),
        // Special functions, bit operations, random numbers, sorting.
        Erf | Erfc | ErfInv | Lgamma | Digamma | Polygamma | Tan | Asin | Acos | Atan | Sinh
        | Cosh | Asinh | Acosh | Atanh | Cbrt | Square | IsFinite | Atan2 | ShiftLeft
        | ShiftRightLogical | ShiftRightArithmetic | BitcastConvertType | PopulationCount => {
            super::numeric::vjp(prim, x, y, &g)
        }
        // Keys and bits carry no cotangent.
        RandomSeed | RandomWrap | RandomUnwrap | RandomBits | RandomSplit | RandomFoldIn
        | Threefry2x32 => vec![None; x.len()],
        Sort | TopK => super::sort::vjp(prim, params, x, gs),
        // Cumulative ops, scatters, windows, convolution.
        Cumprod | Cummax | Cummin | Cumlogsumexp => {
            super::windowed::cumulative_vjp(prim, params, x, y, gs)
        }
        Scatter | ScatterMul | ScatterMin | ScatterMax => {
            super::scatter::scatter_vjp(prim, params, x, y, &g)
        }
        ReduceWindowSum | ReduceWindowMax | ReduceWindowMin | ReduceWindow
        | SelectAndScatterAdd => super::window::window_vjp(prim, params, x, y, gs, &g),
        ConvGeneralDilated => super::conv::conv_vjp(params, x, &g),
    }
}

/// Gather's cotangent: scatter-add the output cotangent into zeros at the gathered places, with
/// the gather's mode and index hints (clamped places get the cotangent of every index clamped
/// there; dropped ones, nothing), as JAX's transpose rule does.
fn gather_vjp(params: &Params, g: &Tensor, operand: &Tensor, indices: &Tensor) -> Tensor {
    let p = match GatherParams::read(params) {
        Ok(p) => p,
        Err(e) => return g.fail("gather", format!("in its VJP: {e}")),
    };
    let scatter = ScatterParams {
        dims: ScatterDims {
            update_window_dims: p.dims.offset_dims,
            inserted_window_dims: p.dims.collapsed_slice_dims,
            scatter_dims_to_operand_dims: p.dims.start_index_map,
            operand_batching_dims: p.dims.operand_batching_dims,
            scatter_indices_batching_dims: p.dims.start_indices_batching_dims,
        },
        mode: p.mode,
        indices_are_sorted: p.indices_are_sorted,
        unique_indices: p.unique_indices,
    };
    let zeros = zeros_like(operand);
    Tensor::bind1(Prim::ScatterAdd, scatter.to_params(), &[&zeros, indices, g])
}

/// Scatter-add's cotangent for the updates: gather the output cotangent at the scattered places
/// with the scatter's mode, zeros for dropped windows (JAX's `fill_value=0`).
fn scatter_add_vjp(params: &Params, g: &Tensor, indices: &Tensor, updates: &Tensor) -> Tensor {
    let p = match ScatterParams::read(params) {
        Ok(p) => p,
        Err(e) => return g.fail("scatter-add", format!("in its VJP: {e}")),
    };
    let slice_sizes = crate::prim::scatter_window_sizes(&p.dims, updates.shape(), g.rank());
    let gather = GatherParams {
        dims: GatherDims {
            offset_dims: p.dims.update_window_dims,
            collapsed_slice_dims: p.dims.inserted_window_dims,
            start_index_map: p.dims.scatter_dims_to_operand_dims,
            operand_batching_dims: p.dims.operand_batching_dims,
            start_indices_batching_dims: p.dims.scatter_indices_batching_dims,
        },
        slice_sizes,
        mode: p.mode,
        fill_value: Some(0.0),
        indices_are_sorted: p.indices_are_sorted,
        unique_indices: p.unique_indices,
    };
    Tensor::bind1(Prim::Gather, gather.to_params(), &[g, indices])
}

fn pad(g: &Tensor, config: &[(i64, i64, i64)]) -> Tensor {
    let zero = g.literal_strong(0.0, g.dtype());
    let cfg = ParamValue::Tuple(
        config
            .iter()
            .map(|&(a, b, c)| int_list(&[a, b, c]))
            .collect(),
    );
    Tensor::bind1(
        Prim::Pad,
        Params::new().with("padding_config", cfg),
        &[g, &zero],
    )
}

fn slice(g: &Tensor, start: &[i64], limit: &[i64], strides: &[i64]) -> Tensor {
    let params = Params::new()
        .with("limit_indices", int_list(limit))
        .with("start_indices", int_list(start))
        .with(
            "strides",
            if strides.iter().all(|&s| s == 1) {
                ParamValue::Name("None".into())
            } else {
                int_list(strides)
            },
        );
    Tensor::bind1(Prim::Slice, params, &[g])
}

/// The cotangent of `broadcast_in_dim`'s operand: sum over the dimensions it broadcast into.
fn unbroadcast_in_dim(g: &Tensor, x: &Tensor, bdims: &[i64]) -> Tensor {
    let mut axes: Vec<i64> = (0..g.rank() as i64)
        .filter(|d| !bdims.contains(d))
        .collect();
    for (i, &d) in bdims.iter().enumerate() {
        if x.shape()[i] == 1 && g.shape()[d as usize] != 1 {
            axes.push(d);
        }
    }
    axes.sort_unstable();
    let summed = if axes.is_empty() {
        g.clone()
    } else {
        g.sum(&axes)
    };
    if summed.shape() == x.shape() {
        summed
    } else {
        summed.reshape(x.shape())
    }
}

/// JAX's `_dot_general_transpose_lhs`/`_rhs`.
fn dot_general_vjp(params: &Params, g: &Tensor, x: &Tensor, y: &Tensor) -> Vec<Option<Tensor>> {
    let dd = match crate::prim::dot_dims(params) {
        Ok(dd) => dd,
        Err(e) => return vec![Some(g.fail("dot_general", format!("in its VJP: {e}"))); 2],
    };
    let (xc, yc, xb, yb) = (
        &dd.lhs_contract,
        &dd.rhs_contract,
        &dd.lhs_batch,
        &dd.rhs_batch,
    );
    let dx = x
        .dtype()
        .is_float()
        .then(|| transpose_lhs(g, x, y, (xc, yc), (xb, yb), false));
    let dy = y
        .dtype()
        .is_float()
        .then(|| transpose_lhs(g, y, x, (yc, xc), (yb, xb), true));
    vec![
        dx.map(|t| t.astype(x.dtype())),
        dy.map(|t| t.astype(y.dtype())),
    ]
}

fn as_i64(dims: &[usize]) -> Vec<i64> {
    dims.iter().map(|&d| d as i64).collect()
}

fn transpose_lhs(
    g: &Tensor,
    x: &Tensor,
    y: &Tensor,
    contract: (&[usize], &[usize]),
    batch: (&[usize], &[usize]),
    swap_ans: bool,
) -> Tensor {
    let (x_contract, y_contract) = contract;
    let (x_batch, y_batch) = batch;
    let x_rank = x.rank();
    let x_kept = crate::prim::free_dims(x_rank, x_contract, x_batch);
    let y_kept = crate::prim::free_dims(y.rank(), y_contract, y_batch);
    let nb = x_batch.len();
    let range = |start: usize, n: usize| (start..start + n).collect::<Vec<_>>();
    let ans_batch = range(0, nb);
    let ans_y = if swap_ans {
        range(nb, y_kept.len())
    } else {
        range(nb + x_kept.len(), y_kept.len())
    };
    let mut order: Vec<usize> = (0..y_contract.len()).collect();
    order.sort_by_key(|&i| y_contract[i]);
    let x_contract_sorted_by_y: Vec<usize> = order.iter().map(|&i| x_contract[i]).collect();
    let produced: Vec<usize> = x_batch
        .iter()
        .chain(&x_kept)
        .chain(&x_contract_sorted_by_y)
        .copied()
        .collect();
    let mut out_axes: Vec<usize> = (0..produced.len()).collect();
    out_axes.sort_by_key(|&i| produced[i]);
    // On explicit types the product is split as the operand it is the cotangent of (JAX's
    // transpose passes `out_sharding`): a contraction split on both sides is then no error.
    let explicit = [g, x, y].iter().any(|t| t.aval().is_explicitly_sharded());
    let x_dims = x.aval().explicit_dims();
    let out_dims = explicit.then(|| produced.iter().map(|&d| x_dims[d].clone()).collect());
    let prod = g.dot_general_out(
        y,
        (&as_i64(&ans_y), &as_i64(&y_kept)),
        (&as_i64(&ans_batch), &as_i64(y_batch)),
        out_dims,
    );
    if out_axes.iter().enumerate().all(|(i, &a)| i == a) {
        prod
    } else {
        prod.transpose(&as_i64(&out_axes))
    }
}

/// `t`, resharded to `like`'s explicit sharding where the two split their dimensions
/// differently (the transpose and tangent of `reshard`).
pub(crate) fn resharded_like(t: &Tensor, like: &Tensor) -> Tensor {
    if t.aval().explicit_dims() == like.aval().explicit_dims() {
        t.clone()
    } else {
        let mut target = t.aval().clone();
        target.set_explicit_dims(like.aval().explicit_dims());
        t.reshard_to(&target)
    }
}
