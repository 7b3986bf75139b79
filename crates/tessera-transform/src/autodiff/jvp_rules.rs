//! The JVP rule of every primitive: given the operands, the results and the operands' tangents
//! (`None` for a symbolic zero), the results' tangents. One exhaustive `match`, so a primitive
//! without a rule does not compile. Linear primitives apply themselves to the tangents; integer
//! operands (indices, predicates) are passed through as primals.

use super::rules::zeros_like;
use crate::params::{ParamValue, Params};
use crate::prim::{Prim, ReductionParams, UnaryOp, UnaryParams};
use crate::trace::Tensor;

/// Computes the tangents of an equation's results.
pub(super) fn jvp_rule(
    prim: Prim,
    params: &Params,
    x: &[Tensor],
    y: &[Tensor],
    ts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    use Prim::*;
    let t = |i: usize| ts.get(i).cloned().flatten();
    let one = |v: Option<Tensor>| vec![v];
    let scaled = |f: &dyn Fn(&Tensor) -> Tensor| one(t(0).map(|t0| f(&t0)));
    match prim {
        DotProductAttention | DotProductAttentionBwd => {
            super::attention::jvp(prim, params, x, y, ts)
        }
        Add | AddAny => one(plus(t(0), t(1))),
        Sub => one(plus(t(0), t(1).map(|t1| -&t1))),
        Mul => one(plus(t(0).map(|a| &a * &x[1]), t(1).map(|b| &x[0] * &b))),
        Div => {
            let num = plus(t(0), t(1).map(|b| -(&b * &y[0])));
            one(num.map(|n| &n / &x[1]))
        }
        Max | Min => {
            let pick = |a: &Tensor, b: &Tensor, ta: Tensor| {
                let ours = a.eq(&y[0]).astype(ta.dtype());
                let theirs = b.eq(&y[0]).astype(ta.dtype());
                &ta * &(&ours * &(1.0 - &theirs * 0.5))
            };
            let a = t(0).map(|t0| pick(&x[0], &x[1], t0));
            let b = t(1).map(|t1| pick(&x[1], &x[0], t1));
            one(plus(a, b))
        }
        Pow => {
            let a = t(0).map(|t0| &(&t0 * &x[1]) * &x[0].binary(Pow, &(&x[1] - 1.0)));
            let b = t(1).map(|t1| &(&t1 * &x[0].log()) * &y[0]);
            one(plus(a, b))
        }
        Rem => {
            let q = &x[0] / &x[1];
            let b = t(1).map(|t1| -(&t1 * &(&q.sign() * &q.abs().floor_())));
            one(plus(t(0), b))
        }
        Neg => scaled(&|t0| -t0),
        Exp => scaled(&|t0| t0 * &y[0]),
        Exp2 => scaled(&|t0| &(t0 * &y[0]) * std::f64::consts::LN_2),
        Log => scaled(&|t0| t0 / &x[0]),
        Log1p => scaled(&|t0| t0 / &(&x[0] + 1.0)),
        Expm1 => scaled(&|t0| t0 * &(&y[0] + 1.0)),
        // JAX's form, (t + t y)(1 - y): no cancellation in 1 - y² where |y| is near 1.
        Tanh => scaled(&|t0| &(t0 + &(t0 * &y[0])) * &(1.0 - &y[0])),
        Logistic => scaled(&|t0| &(t0 * &y[0]) * &(1.0 - &y[0])),
        Sin => scaled(&|t0| t0 * &x[0].cos()),
        Cos => scaled(&|t0| -(t0 * &x[0].sin())),
        Sqrt => scaled(&|t0| t0 / &(&y[0] * 2.0)),
        Rsqrt => scaled(&|t0| &(t0 * &y[0]) * &(-0.5 / &x[0])),
        Abs => scaled(&|t0| t0 * &x[0].sign()),
        IntegerPow => {
            let n = match UnaryParams::read(UnaryOp::IntegerPow, params) {
                Ok(typed) => typed.y,
                Err(e) => return one(Some(x[0].fail("integer_pow", e.to_string()))),
            };
            match n {
                0 => one(None),
                1 => one(t(0)),
                n => scaled(&|t0| t0 * &(x[0].integer_pow(n - 1) * n as f64)),
            }
        }
        Sign | Floor | Ceil | Round | StopGradient => one(None),
        Not | And | Or | Xor | Eq | Ne | Lt | Le | Gt | Ge | Iota | Argmax | Argmin | ReduceAnd
        | ReduceOr => vec![None; y.len()],
        Copy | PipelineEnterStage => ts.to_vec(),
        // The primal results are the barrier's own; the tangents pass through (a barrier is
        // about where computations run, not what they compute).
        OptimizationBarrier => ts.to_vec(),
        Reshard => one(t(0).map(|t0| super::rules::resharded_like(&t0, &y[0]))),
        // The constraint applies to the tangent too (as in JAX).
        ShardingConstraint => one(t(0).map(|t0| Tensor::bind1(prim, params.clone(), &[&t0]))),
        Clamp => one(clamp_jvp(x, &t)),
        ReduceMax | ReduceMin => one(t(0).map(|t0| reduce_chosen_jvp(prim, params, &t0, x, y))),
        ReduceProd => one(t(0).map(|t0| {
            let axes = match ReductionParams::read(prim, params, x[0].rank()) {
                Ok(typed) => typed.axes_i64(),
                Err(e) => return t0.fail("reduce_prod", e.to_string()),
            };
            let full = y[0]
                .keep_dims(&axes, x[0].rank())
                .broadcast_to(x[0].shape());
            (&(&t0 * &full) / &x[0]).sum(&axes)
        })),
        DotGeneral => {
            let lhs = t(0).map(|t0| apply(prim, params, &[&t0, &x[1]], &y[0]));
            let rhs = t(1).map(|t1| apply(prim, params, &[&x[0], &t1], &y[0]));
            one(plus(lhs, rhs))
        }
        ConvertElementType => one(t(0).filter(|_| y[0].dtype().is_float()).map(|t0| {
            if t0.dtype() == y[0].dtype() {
                t0
            } else {
                t0.astype(y[0].dtype())
            }
        })),
        SelectN | BroadcastInDim | Reshape | Squeeze | ExpandDims | Transpose | Slice
        | DynamicSlice | DynamicUpdateSlice | Concatenate | Pad | ReduceSum | Cumsum
        | ScatterAdd => one(Some(linear(prim, params, x, ts, &y[0]))),
        // JAX's gather JVP: the same gather of the tangent, filling with zeros out of bounds.
        Gather => {
            let zero_fill = params
                .clone()
                .with("fill_value", ParamValue::Float(0.0, "0.0".into()));
            one(Some(linear(prim, &zero_fill, x, ts, &y[0])))
        }
        Jit | Checkpoint => jit_jvp(params, x, ts, y),
        Treduce => vec![
            Some(y[0].fail(
            "treduce",
            "jvp reaches treduce only through its entry point, which unrolls the loop first; \
             call jvp on the whole program"
                .into(),
        ));
            y.len()
        ],
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
        | UnreducedReduceScatter => super::parallel::collective_jvp(prim, params, x, y, t(0)),
        RaggedAllToAll => super::parallel::ragged_jvp(params, x, ts),
        Psend | Precv => super::parallel::p2p_jvp(prim, y, ts),
        // A start differentiates as its collective (the tangent takes the synchronous one,
        // already complete); a done passes it through.
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
            super::parallel::collective_jvp(prim.synchronous(), params, x, y, t(0))
        }
        PsumDone | AllGatherDone | ReduceScatterDone | AllToAllDone | PbroadcastDone
        | PpermuteDone => ts.to_vec(),
        ShardMap => super::parallel::shard_map_jvp(params, x, y, ts),
        // Special functions, bit operations, random numbers, sorting.
        Erf | Erfc | ErfInv | Lgamma | Digamma | Polygamma | Tan | Asin | Acos | Atan | Sinh
        | Cosh | Asinh | Acosh | Atanh | Cbrt | Square | IsFinite | Atan2 | ShiftLeft
        | ShiftRightLogical | ShiftRightArithmetic | BitcastConvertType | PopulationCount => {
            super::numeric::jvp(prim, x, y, ts)
        }
        // Keys and bits carry no tangent.
        RandomSeed | RandomWrap | RandomUnwrap | RandomBits | RandomSplit | RandomFoldIn
        | Threefry2x32 => vec![None; y.len()],
        Sort | TopK => super::sort::jvp(prim, params, x, y, ts),
        // Cumulative ops, scatters, windows, convolution.
        Cumprod | Cummax | Cummin | Cumlogsumexp => {
            super::windowed::cumulative_jvp(prim, params, x, y, ts)
        }
        Scatter | ScatterMul | ScatterMin | ScatterMax => {
            super::scatter::scatter_jvp(prim, params, x, y, ts)
        }
        ReduceWindowSum | ReduceWindowMax | ReduceWindowMin | ReduceWindow
        | SelectAndScatterAdd => super::window::window_jvp(prim, params, x, y, ts),
        ConvGeneralDilated => super::conv::conv_jvp(params, x, y, ts),
        CustomJvpCall | CustomVjpCall => super::custom::custom_jvp(prim, params, x, y, ts),
        Scan => super::scan::scan_jvp(params, x, y, ts),
        Cond => super::branch::cond_jvp(params, x, y, ts),
        While => super::branch::while_jvp(params, x, y, ts),
        // `debug_callback` returns nothing: it runs on the primals, as in JAX.
        DebugCallback => Vec::new(),
        // A host callback has no derivative (`prim/callback.rs`); zero tangents pass.
        PureCallback | IoCallback => match ts.iter().flatten().next() {
            Some(t) => {
                vec![Some(t.fail(prim.name(), crate::prim::differentiation_refusal(prim))); y.len()]
            }
            None => vec![None; y.len()],
        },
    }
}

/// The sum of two optional tangents.
fn plus(a: Option<Tensor>, b: Option<Tensor>) -> Option<Tensor> {
    match (a, b) {
        (Some(a), Some(b)) => Some(&a + &b),
        (a, None) => a,
        (None, b) => b,
    }
}

/// `prim[params](operands)` with the result type of `like`.
fn apply(prim: Prim, params: &Params, operands: &[&Tensor], like: &Tensor) -> Tensor {
    let out = like.aval().clone();
    Tensor::bind_typed(prim, params.clone(), operands, Some(out)).remove(0)
}

/// A primitive linear in its float operands, applied to their tangents (zeros where absent);
/// integer operands (indices, predicates) keep their primal values.
fn linear(prim: Prim, params: &Params, x: &[Tensor], ts: &[Option<Tensor>], y: &Tensor) -> Tensor {
    let operands: Vec<Tensor> = x
        .iter()
        .zip(ts)
        .map(|(xi, ti)| {
            if !xi.dtype().is_float() {
                xi.clone()
            } else {
                ti.clone().unwrap_or_else(|| zeros_like(xi))
            }
        })
        .collect();
    let refs: Vec<&Tensor> = operands.iter().collect();
    apply(prim, params, &refs, y)
}

/// `clamp(lo, x, hi)`: the tangent of whichever operand the result is.
fn clamp_jvp(x: &[Tensor], t: &dyn Fn(usize) -> Option<Tensor>) -> Option<Tensor> {
    let [below, inside, above] = super::rules::clamp_masks(x, x[1].dtype());
    let lo = t(0).map(|t0| &t0 * &below);
    let mid = t(1).map(|t1| &t1 * &inside);
    let hi = t(2).map(|t2| &t2 * &above);
    plus(plus(lo, mid), hi)
}

/// `reduce_max`/`reduce_min`: the mean of the tangents at the chosen places.
fn reduce_chosen_jvp(
    prim: Prim,
    params: &Params,
    t: &Tensor,
    x: &[Tensor],
    y: &[Tensor],
) -> Tensor {
    let axes = match ReductionParams::read(prim, params, x[0].rank()) {
        Ok(typed) => typed.axes_i64(),
        Err(e) => return t.fail(prim.name(), e.to_string()),
    };
    let full = y[0]
        .keep_dims(&axes, x[0].rank())
        .broadcast_to(x[0].shape());
    let mask = x[0].eq(&full).astype(t.dtype());
    &(t * &mask).sum(&axes) / &mask.sum(&axes)
}

/// A nested call that inlining kept (one with constants): differentiated recursively.
fn jit_jvp(
    params: &Params,
    x: &[Tensor],
    ts: &[Option<Tensor>],
    y: &[Tensor],
) -> Vec<Option<Tensor>> {
    let inner = match params.jaxpr("jit", "jaxpr").and_then(super::jvp::jvp) {
        Ok(inner) => inner,
        Err(e) => {
            let fail = y
                .first()
                .map(|y0| y0.fail("jit", format!("in the JVP of a nested call: {e}")));
            return vec![fail; y.len()];
        }
    };
    let tangents: Vec<Tensor> = x
        .iter()
        .zip(ts)
        .map(|(xi, ti)| ti.clone().unwrap_or_else(|| zeros_like(xi)))
        .collect();
    let operands: Vec<&Tensor> = x.iter().chain(tangents.iter()).collect();
    let outs = crate::trace::call_closed(&inner, &operands);
    outs.into_iter().skip(y.len()).map(Some).collect()
}
