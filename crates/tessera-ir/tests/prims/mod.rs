//! Shared by the transformation tests: one small example program per primitive (an exhaustive
//! match, so a new primitive without an example does not compile), seeded random inputs, and
//! array helpers.

#![allow(dead_code)]

use ndarray::{ArrayD, Axis, IxDyn};
use tessera_ir::text::parse_closed;
use tessera_ir::trace::{Tensor, shard_map_program};
use tessera_ir::{Array, ClosedJaxpr, DType, Prim, ShapedArray};
use tessera_sharding::{AbstractMesh, PartitionSpec};

/// The primitives with forward-mode derivatives only (as in JAX): their VJP is an error.
pub const FORWARD_ONLY: &[Prim] = &[Prim::While];

/// The primitives with no derivative, as in JAX (collectives, pure and io callbacks).
pub const NOT_DIFFERENTIABLE: &[Prim] = &[
    Prim::Pmax,
    Prim::Pmin,
    Prim::Psend,
    Prim::Precv,
    Prim::PureCallback,
    Prim::IoCallback,
];

/// The primitives whose examples `vmap` refuses (JAX's batchers of the reduced/unreduced
/// collectives raise NotImplementedError): the example uses the primitive itself or, for
/// `preduced`, the `reduced_vary_cast_p` the tracing API inserts after it.
pub const NOT_BATCHED: &[Prim] = &[
    Prim::Preduced,
    Prim::VaryUnreducedCast,
    Prim::UnreducedPsum,
    Prim::ReducedVaryCast,
    Prim::AllGatherReduced,
    Prim::UnreducedReduceScatter,
    Prim::UnreducedPsumStart,
    Prim::AllGatherReducedStart,
    Prim::UnreducedReduceScatterStart,
];

/// `shard_map(f)` over a 2×2 mesh (`x`, `y`) on f64 arguments of `shapes`, operand `i` laid
/// out by `in_specs[i]`, one result laid out by `out_spec`.
fn on_mesh(
    shapes: &[&[i64]],
    in_specs: &[&str],
    out_spec: &str,
    f: impl FnOnce(&[Tensor]) -> Tensor,
) -> ClosedJaxpr {
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 2)]).unwrap_or_else(|e| panic!("{e}"));
    let spec = |t: &str| PartitionSpec::parse(t).unwrap_or_else(|e| panic!("{e}"));
    let avals: Vec<ShapedArray> = shapes
        .iter()
        .map(|s| ShapedArray::new(DType::F64, s))
        .collect();
    let in_specs: Vec<PartitionSpec> = in_specs.iter().map(|t| spec(t)).collect();
    shard_map_program(&mesh, &in_specs, &[spec(out_spec)], &avals, |a| vec![f(a)])
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A collective's example: `shard_map` over the 2×2 mesh with blocks of a `[4, 4]` array.
fn collective(prim: Prim) -> ClosedJaxpr {
    let both = "P('x', 'y')";
    let single = |f: fn(&Tensor) -> Tensor| on_mesh(&[&[4, 4]], &[both], both, |a| f(&a[0]));
    match prim {
        Prim::Psum => single(|a| &a.psum(&["x"]) * a),
        Prim::Pmax => single(|a| a.pmax(&["y"])),
        Prim::Pmin => single(|a| a.pmin(&["x", "y"])),
        Prim::AllGather => single(|a| {
            a.all_gather("x", 1, true)
                .all_gather("y", 0, false)
                .sum(&[0])
        }),
        Prim::ReduceScatter => single(|a| a.psum_scatter("y", 1, true).all_gather("y", 1, true)),
        Prim::Ppermute => {
            single(|a| &a.ppermute("x", &[(0, 1), (1, 0)]) + &a.ppermute("y", &[(0, 1)]))
        }
        Prim::AllToAll => single(|a| a.all_to_all("x", 1, 0, true).all_to_all("y", 0, 1, true)),
        Prim::AxisIndex => single(|a| a * &Tensor::axis_index(a, "y").astype(DType::F64)),
        Prim::Pvary => on_mesh(&[&[4, 4], &[2]], &[both, "P()"], both, |a| {
            &a[0] * &a[1].pvary(&["x", "y"])
        }),
        Prim::Pbroadcast => single(|a| &a.pbroadcast("x", 1) * &a.sin()),
        Prim::PsumInvariant => single(|a| &a.psum_invariant(&["x"]) * a),
        Prim::AllGatherInvariant => single(|a| {
            let stacked = a.all_gather_invariant("y", 0, false).sum(&[0]);
            let tiled = Tensor::slice_axis(&a.all_gather_invariant("x", 1, true), 1, 1, 3);
            &(&stacked * &tiled) * a
        }),
        Prim::Preduced => single(|a| &a.psum(&["y"]).preduced(&["y"]) * &a.sin()),
        Prim::VaryUnreducedCast | Prim::UnreducedPsum => {
            single(|a| &a.sin().vary_unreduced_cast(&["y"]).unreduced_psum(&["y"]) * a)
        }
        Prim::ReducedVaryCast => single(|a| {
            &a.psum(&["y"])
                .preduced(&["y"])
                .sin()
                .reduced_vary_cast(&["y"])
                * a
        }),
        Prim::AllGatherReduced => single(|a| {
            let gathered = a.all_gather_reduced("y", 1, true).sin();
            &Tensor::slice_axis(&gathered, 1, 1, 3) * a
        }),
        Prim::UnreducedReduceScatter => single(|a| {
            let scattered = a
                .sin()
                .vary_unreduced_cast(&["y"])
                .unreduced_psum_scatter("y", 1, true);
            &scattered.all_gather("y", 1, true) * a
        }),
        Prim::PsumInvariantStart => single(|a| {
            let pending = a.psum_invariant_start(&["x"]);
            &pending.done() * &a.sin()
        }),
        Prim::UnreducedPsumStart => single(|a| {
            let pending = a
                .sin()
                .vary_unreduced_cast(&["y"])
                .unreduced_psum_start(&["y"]);
            &pending.done() * a
        }),
        Prim::AllGatherReducedStart => single(|a| {
            let pending = a.all_gather_reduced_start("y", 0, false);
            &pending.done().sum(&[0]) * a
        }),
        Prim::UnreducedReduceScatterStart => single(|a| {
            let pending = a
                .cos()
                .vary_unreduced_cast(&["x"])
                .unreduced_psum_scatter_start("x", 0, false);
            &pending.done().all_gather("x", 0, false) * a
        }),
        // Asynchronous collectives: work traced between the start and the done.
        Prim::PsumStart | Prim::PsumDone => single(|a| {
            let pending = a.psum_start(&["x"]);
            let local = a.sin();
            &pending.done() * &local
        }),
        Prim::AllGatherStart | Prim::AllGatherDone => single(|a| {
            a.all_gather_start("x", 1, true)
                .done()
                .all_gather_start("y", 0, false)
                .done()
                .sum(&[0])
        }),
        Prim::ReduceScatterStart | Prim::ReduceScatterDone => single(|a| {
            let pending = a.psum_scatter_start("y", 1, true);
            let local = a.cos();
            &pending.done().all_gather("y", 1, true) * &local
        }),
        Prim::AllToAllStart | Prim::AllToAllDone => single(|a| {
            a.all_to_all_start("x", 1, 0, true)
                .done()
                .all_to_all_start("y", 0, 1, true)
                .done()
        }),
        Prim::PbroadcastStart | Prim::PbroadcastDone => {
            single(|a| &a.pbroadcast_start("x", 1).done() * &a.sin())
        }
        Prim::PpermuteStart | Prim::PpermuteDone => single(|a| {
            let pending = a.ppermute_start("x", &[(0, 1), (1, 0)]);
            &pending.done() + &a.ppermute_start("y", &[(0, 1)]).done()
        }),
        // A send and its receive, with work traced between them.
        Prim::Psend | Prim::Precv => single(|a| {
            let perm = [(0, 1), (1, 0)];
            let token = a.psend("x", &perm);
            let local = a.sin();
            &tessera_ir::trace::precv(token, a.aval(), "x", &perm) * &local
        }),
        Prim::RaggedAllToAll => on_mesh(&[&[8, 4], &[8, 4]], &[both, both], both, |a| {
            // Over 'x' (2 devices), blocks of 4 rows: each device sends rows 0..1 to device 0
            // and rows 1..3 to device 1, which write them one after the other (device 0's
            // rows 2..3 keep the output's value).
            let here = Tensor::axis_index(&a[0], "x");
            let slice = a[0].iota_along(&[2], 0);
            let send_sizes = &slice + &slice.full_like_scalar(1.0);
            let output_offsets = &here * &send_sizes;
            let recv_sizes = (&here + &here.full_like_scalar(1.0)).broadcast_to(&[2]);
            a[0].sin().ragged_all_to_all(
                &(&a[1] * &a[1]),
                &slice,
                &send_sizes,
                &output_offsets,
                &recv_sizes,
                "x",
            )
        }),
        _ => on_mesh(
            &[&[4, 4], &[2, 4]],
            &[both, "P(None, 'y')"],
            "P('x')",
            |a| {
                let h = a[0].sin().matmul(&a[1]);
                h.psum(&["y"])
            },
        ),
    }
}

/// A program from its arguments, equations (one per line) and results.
pub fn prog(args: &str, body: &str, outs: &str) -> ClosedJaxpr {
    let eqns: Vec<String> = body
        .lines()
        .map(|l| format!("    {}\n", l.trim()))
        .collect();
    let text = format!(
        "{{ lambda ; {args}. let\n{}  in ({outs},) }}",
        eqns.concat()
    );
    parse_closed(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn unary(name: &str) -> ClosedJaxpr {
    prog("a:f64[2,3]", &format!("b:f64[2,3] = {name} a"), "b")
}

/// A binary op with size-1 broadcasting, then with a scalar literal.
fn binary(name: &str) -> ClosedJaxpr {
    prog(
        "a:f64[2,3] b:f64[1,3]",
        &format!("c:f64[2,3] = {name} a b\nd:f64[2,3] = {name} c 1.5:f64[]"),
        "d",
    )
}

fn logical(name: &str) -> ClosedJaxpr {
    prog(
        "a:bool[2,3] b:bool[2,3]",
        &format!("c:bool[2,3] = {name} a b"),
        "c",
    )
}

fn compare(name: &str) -> ClosedJaxpr {
    prog(
        "a:f64[2,3] b:f64[2,3]",
        &format!(
            "c:bool[2,3] = {name} a b\nd:bool[2,3] = {name} a 1.0:f64[]\ne:bool[2,3] = and c d"
        ),
        "e",
    )
}

fn reduce(name: &str) -> ClosedJaxpr {
    prog(
        "a:f64[2,3]",
        &format!("b:f64[2] = {name}[axes=(1,)] a"),
        "b",
    )
}

const GATHER_DIMS: &str = "dimension_numbers=GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,), operand_batching_dims=(), start_indices_batching_dims=())";
const SCATTER_DIMS: &str = "dimension_numbers=ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), operand_batching_dims=(), scatter_indices_batching_dims=())";

/// The example program of `prim`.
/// `sin` of the one operand, computed on the host (the callback of the callback examples).
pub fn host_sin(args: &[Array]) -> Result<Vec<Array>, String> {
    Ok(vec![Array::from_values(
        args[0].dtype(),
        args[0].values().mapv(f64::sin),
    )])
}

pub fn example(prim: Prim) -> ClosedJaxpr {
    use Prim::*;
    let name = prim.name();
    match prim {
        Neg | Abs | Sign | Exp | Exp2 | Log | Log1p | Expm1 | Tanh | Logistic | Sin | Cos
        | Sqrt | Rsqrt | Floor | Ceil | Copy | StopGradient | Reshard => unary(name),
        Round => prog("a:f64[2,3]", "b:f64[2,3] = round[rounding_method=1] a", "b"),
        DotProductAttention => prog(
            "q:f64[2,4,3,2] k:f64[2,2,3,2] v:f64[2,2,3,3]",
            "o:f64[2,4,3,3] l:f64[2,4,3] = dot_product_attention[is_causal=True scale=0.7] q k v",
            "o, l",
        ),
        DotProductAttentionBwd => prog(
            "q:f64[1,2,3,2] k:f64[1,1,4,2] v:f64[1,1,4,2] m:bool[3,4] o:f64[1,2,3,2] l:f64[1,2,3] g:f64[1,2,3,2]",
            "a:f64[1,2,3,2] b:f64[1,1,4,2] c:f64[1,1,4,2] = dot_product_attention_bwd[is_causal=False scale=0.5] q k v m o l g",
            "a, b, c",
        ),
        OptimizationBarrier => prog(
            "a:f64[2,3] b:f64[2,3]",
            "c:f64[2,3] d:f64[2,3] = optimization_barrier a b\ne:f64[2,3] = sin c\nf:f64[2,3] = mul e d",
            "f, d",
        ),
        Not => prog("a:bool[2,3]", "b:bool[2,3] = not a", "b"),
        ShardingConstraint => prog(
            "a:f64[2,3]",
            "b:f64[2,3] = sharding_constraint[context_mesh=Mesh() layout=None sharding=NamedSharding(mesh=Mesh('x': 2, axis_types=(Auto,)), spec=P('x', None), memory_kind=device) unconstrained_dims=frozenset({})] a\nc:f64[2,3] = sin b",
            "c",
        ),
        IntegerPow => prog("a:f64[2,3]", "b:f64[2,3] = integer_pow[y=3] a", "b"),
        Add | Sub | Mul | Div | Rem | Pow | Max | Min | AddAny => binary(name),
        And | Or | Xor => logical(name),
        Eq | Ne | Lt | Le | Gt | Ge => compare(name),
        SelectN => prog(
            "p:bool[2,3] a:f64[2,3] b:f64[2,3] q:bool[]",
            "c:f64[2,3] = select_n p a b\nd:f64[2,3] = select_n q c a",
            "d",
        ),
        Clamp => prog(
            "lo:f64[] x:f64[2,3] hi:f64[2,3]",
            "y:f64[2,3] = clamp lo x hi",
            "y",
        ),
        ConvertElementType => prog(
            "a:f64[2,3] b:i32[2,3]",
            "c:f64[2,3] = convert_element_type[new_dtype=float64 weak_type=False] b\nd:f64[2,3] = mul a c\ne:i32[2,3] = convert_element_type[new_dtype=int32 weak_type=False] d",
            "d, e",
        ),
        Iota => prog(
            "a:f64[2,3]",
            "b:i32[2,3] = iota[dimension=1 dtype=int32 shape=(2, 3) sharding=None]\nc:f64[2,3] = convert_element_type[new_dtype=float64 weak_type=False] b\nd:f64[2,3] = mul a c",
            "d",
        ),
        BroadcastInDim => prog(
            "a:f64[3] b:f64[1,3]",
            "c:f64[2,3] = broadcast_in_dim[broadcast_dimensions=(1,) shape=(2, 3) sharding=None] a\nd:f64[2,3] = broadcast_in_dim[broadcast_dimensions=(0, 1)] b\ne:f64[2,3] = mul c d",
            "e",
        ),
        Reshape => prog(
            "a:f64[2,3]",
            "b:f64[3,2] = reshape[dimensions=None new_sizes=(3, 2) sharding=None] a",
            "b",
        ),
        Squeeze => prog(
            "a:f64[2,1,3]",
            "b:f64[2,3] = squeeze[dimensions=(1,)] a",
            "b",
        ),
        ExpandDims => prog(
            "a:f64[2,3]",
            "b:f64[2,1,3] = expand_dims[dimensions=(1,)] a",
            "b",
        ),
        Transpose => prog(
            "a:f64[2,3,4]",
            "b:f64[4,2,3] = transpose[permutation=(2, 0, 1)] a",
            "b",
        ),
        Slice => prog(
            "a:f64[4,5]",
            "b:f64[2,3] = slice[limit_indices=(3, 5) start_indices=(1, 0) strides=(1, 2)] a",
            "b",
        ),
        DynamicSlice => prog(
            "a:f64[4,5] i:i32[] j:i32[]",
            "b:f64[2,3] = dynamic_slice[slice_sizes=(2, 3)] a i j",
            "b",
        ),
        DynamicUpdateSlice => prog(
            "a:f64[4,5] u:f64[2,3] i:i32[] j:i32[]",
            "b:f64[4,5] = dynamic_update_slice a u i j",
            "b",
        ),
        Concatenate => prog(
            "a:f64[2,3] b:f64[2,2]",
            "c:f64[2,5] = concatenate[dimension=1] a b",
            "c",
        ),
        Pad => prog(
            "a:f64[2,3] v:f64[]",
            "b:f64[3,7] = pad[padding_config=((1, 0, 0), (0, 2, 1))] a v",
            "b",
        ),
        ReduceSum => prog(
            "a:f64[2,3,4]",
            "b:f64[3] = reduce_sum[axes=(0, 2) out_sharding=None] a",
            "b",
        ),
        ReduceMax | ReduceMin | ReduceProd => reduce(name),
        ReduceAnd | ReduceOr => prog(
            "a:bool[2,3]",
            &format!("b:bool[2] = {name}[axes=(1,)] a"),
            "b",
        ),
        Argmax | Argmin => prog(
            "a:f64[2,3]",
            &format!("b:i32[2] = {name}[axes=(1,) index_dtype=int32] a"),
            "b",
        ),
        Cumsum => prog(
            "a:f64[2,3]",
            "b:f64[2,3] = cumsum[axis=1 reverse=False] a\nc:f64[2,3] = cumsum[axis=0 reverse=True] b",
            "c",
        ),
        DotGeneral => prog(
            "a:f64[2,3,4] b:f64[2,4,5]",
            "c:f64[2,3,5] = dot_general[dimension_numbers=(([2], [1]), ([0], [0])) preferred_element_type=float64] a b",
            "c",
        ),
        Gather => prog(
            "a:f64[5,3] i:i32[4,1]",
            &format!(
                "b:f64[4,3] = gather[{GATHER_DIMS} fill_value=None indices_are_sorted=False mode=GatherScatterMode.CLIP slice_sizes=(1, 3) unique_indices=False] a i"
            ),
            "b",
        ),
        ScatterAdd => prog(
            "a:f64[5,3] i:i32[4,1] u:f64[4,3]",
            &format!(
                "b:f64[5,3] = scatter-add[{SCATTER_DIMS} indices_are_sorted=False mode=GatherScatterMode.FILL_OR_DROP unique_indices=False] a i u"
            ),
            "b",
        ),
        Jit => prog(
            "a:f64[2,3] b:f64[2,3]",
            "c:f64[2,3] = jit[\nname=inner\njaxpr={ lambda ; x:f64[2,3] y:f64[2,3]. let\nz:f64[2,3] = mul x y\nw:f64[2,3] = sin z\nin (w,) }\n] a b",
            "c",
        ),
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
        | RaggedAllToAll
        | ShardMap
        | PsumStart
        | AllGatherStart
        | ReduceScatterStart
        | AllToAllStart
        | PbroadcastStart
        | PpermuteStart
        | PsumDone
        | AllGatherDone
        | ReduceScatterDone
        | AllToAllDone
        | PbroadcastDone
        | PpermuteDone
        | ReducedVaryCast
        | AllGatherReduced
        | UnreducedReduceScatter
        | Psend
        | Precv
        | PsumInvariantStart
        | UnreducedPsumStart
        | UnreducedReduceScatterStart
        | AllGatherReducedStart => collective(prim),
        Treduce => {
            let f64 = |s: &[i64]| ShapedArray::new(DType::F64, s);
            tessera_ir::trace::trace(&[f64(&[3]), f64(&[4, 3])], |a| {
                let ops = [
                    tessera_ir::prim::ReduceOp::Add,
                    tessera_ir::prim::ReduceOp::Concat(1),
                ];
                tessera_ir::trace::treduce(&[&a[0]], &[&a[1]], 0, "1f1b", &ops, |w, x| {
                    vec![&x[0] * &w[0], x[0].sin()]
                })
            })
            .unwrap_or_else(|e| panic!("{e}"))
        }
        Checkpoint => {
            let aval = ShapedArray::new(DType::F64, &[2, 3]);
            tessera_ir::trace::trace(&[aval.clone(), aval], |a| {
                tessera_ir::trace::checkpoint(&[&a[0], &a[1]], |b| vec![&b[0].sin() * &b[1]])
            })
            .unwrap_or_else(|e| panic!("{e}"))
        }
        CustomJvpCall => {
            let aval = ShapedArray::new(DType::F64, &[2, 3]);
            tessera_ir::trace::trace(&[aval.clone(), aval], |a| {
                // f(x, y) = sin(x) * y with its exact JVP rule.
                tessera_ir::trace::custom_jvp(
                    "sin_mul",
                    &[&a[0], &a[1]],
                    |p| vec![&p[0].sin() * &p[1]],
                    |p, t| {
                        let y = &p[0].sin() * &p[1];
                        let dy = &(&(&t[0] * &p[0].cos()) * &p[1]) + &(&p[0].sin() * &t[1]);
                        (vec![y], vec![dy])
                    },
                )
            })
            .unwrap_or_else(|e| panic!("{e}"))
        }
        // As parsed from JAX's text: the rules are Python functions, the body is differentiated.
        CustomVjpCall => prog(
            "a:f64[2,3] b:f64[2,3]",
            "c:f64[2,3] = custom_vjp_call[\nname=f\nbwd=<function f_bwd at 0x7f00>\ncall_jaxpr={ lambda ; x:f64[2,3] y:f64[2,3]. let\nz:f64[2,3] = mul x y\nw:f64[2,3] = tanh z\nin (w,) }\nfwd_jaxpr_thunk=<function f_fwd at 0x7f01>\nnum_consts=0\nout_trees=<function out_trees at 0x7f02>\nsymbolic_zeros=False\n] a b",
            "c",
        ),
        // A reverse scan with a constant, a float and an integer carry, scanned and stacked values.
        Scan => {
            let f64 = |s: &[i64]| ShapedArray::new(DType::F64, s);
            tessera_ir::trace::trace(&[f64(&[3]), f64(&[3]), f64(&[4, 3])], |a| {
                let i0 = (&a[0].sum(&[0]) * 0.0).astype(DType::I32);
                let (carry, ys) = tessera_ir::trace::scan(
                    &[&a[0]],
                    &[&a[1], &i0],
                    &[&a[2]],
                    None,
                    true,
                    |c, h, x| {
                        let h1 = &(&(&h[0] * &c[0]) + &x[0]).sin() + &h[1].astype(DType::F64);
                        let y = &h1 * &x[0];
                        (vec![h1, &h[1] + 1], vec![y])
                    },
                );
                vec![carry[0].clone(), ys[0].clone()]
            })
            .unwrap_or_else(|e| panic!("{e}"))
        }
        // As JAX prints `lax.switch` on three branches; an index of 3 runs the last branch.
        Cond => prog(
            "i:i32[] a:f64[2,3] b:f64[1,3]",
            "c:f64[2,3] d:f64[1,3] = cond[\nbranches=(\n{ lambda ; x:f64[2,3] y:f64[1,3]. let\nz:f64[2,3] = sin x\nin (z, y) }\n{ lambda ; x:f64[2,3] y:f64[1,3]. let\nz:f64[2,3] = mul x y\nw:f64[1,3] = cos y\nin (z, w) }\n{ lambda ; x:f64[2,3] y:f64[1,3]. let\nz:f64[2,3] = tanh x\nw:f64[1,3] = mul y 2.0:f64[]\nin (z, w) }\n)\n] i a b\ne:f64[2,3] = mul c d",
            "e",
        ),
        // Host callbacks computing `sin` on the host (any shape, so every vmap_method fits).
        PureCallback | IoCallback | DebugCallback => {
            let f64s = ShapedArray::new(DType::F64, &[2, 3]);
            tessera_ir::trace::trace(std::slice::from_ref(&f64s), |a| {
                let x = &a[0] * 2.0;
                let y = match prim {
                    PureCallback => tessera_ir::trace::pure_callback(
                        host_sin,
                        std::slice::from_ref(&f64s),
                        &[&x],
                        Some(tessera_ir::prim::VmapMethod::Sequential),
                    )
                    .remove(0),
                    IoCallback => tessera_ir::trace::io_callback(
                        host_sin,
                        std::slice::from_ref(&f64s),
                        &[&x],
                        false,
                    )
                    .remove(0),
                    _ => {
                        tessera_ir::trace::debug_callback(|_| {}, &[&x]);
                        x.sin()
                    }
                };
                vec![&y * &a[0]]
            })
            .unwrap_or_else(|e| panic!("{e}"))
        }
        // A loop whose trip count is an operand (0..=3).
        While => {
            let i32s = ShapedArray::new(DType::I32, &[]);
            let f64 = |s: &[i64]| ShapedArray::new(DType::F64, s);
            tessera_ir::trace::trace(&[i32s, f64(&[3]), f64(&[3])], |a| {
                let zero = a[0].full_like_scalar(0.0);
                tessera_ir::trace::fori_loop_dynamic(&zero, &a[0], &[&a[2]], &[&a[1]], |c, i, h| {
                    vec![&(&h[0].sin() * &c[0]) + &i.astype(DType::F64)]
                })
            })
            .unwrap_or_else(|e| panic!("{e}"))
        }
        PipelineEnterStage => prog(
            "a:f64[2,3] b:f64[3]",
            "c:f64[2,3] d:f64[3] = pipeline_enter_stage[stage=1] a b\ne:f64[3] = sin d",
            "c, e",
        ),
        // Special functions, bit operations, random numbers, sorting.
        Erf | Erfc | Lgamma | Digamma | Atan | Sinh | Cosh | Asinh | Cbrt | Square => unary(name),
        ErfInv | Asin | Acos | Atanh | Tan => prog(
            "a:f64[2,3]",
            &format!("b:f64[2,3] = mul a 0.5:f64[]\nc:f64[2,3] = {name} b"),
            "c",
        ),
        Acosh => prog(
            "a:f64[2,3]",
            "b:f64[2,3] = add a 1.0:f64[]\nc:f64[2,3] = acosh b",
            "c",
        ),
        Polygamma => prog(
            "a:f64[2,3]",
            "b:f64[2,3] = polygamma 1.0:f64[] a\nc:f64[2,3] = polygamma 2.0:f64[] a\nd:f64[2,3] = add b c",
            "d",
        ),
        IsFinite => prog(
            "a:f64[2,3]",
            "e:f64[2,3] = sub a 1.0:f64[]\nb:f64[2,3] = log e\nc:bool[2,3] = is_finite b\nd:f64[2,3] = select_n c a b",
            "d, c",
        ),
        Atan2 => binary(name),
        ShiftLeft | ShiftRightLogical | ShiftRightArithmetic => prog(
            "a:i32[2,3] b:i32[1,3]",
            &format!("c:i32[2,3] = {name} a b\nd:i32[2,3] = {name} c 1:i32[]"),
            "d",
        ),
        BitcastConvertType => prog(
            "a:f32[2,3] u:u32[2,3]",
            "b:i32[2,3] = bitcast_convert_type[new_dtype=int32] a\nc:f32[2,3] = bitcast_convert_type[new_dtype=float32] u\nd:f32[2,3] = mul a c",
            "b, d",
        ),
        PopulationCount => prog("a:i32[2,3]", "b:i32[2,3] = population_count a", "b"),
        RandomSeed | RandomWrap | RandomUnwrap | RandomBits | RandomSplit | RandomFoldIn => prog(
            "a:u32[2] s:i32[] x:f64[3]",
            "k:key<fry>[] = random_wrap[impl=fry] a\nj:key<fry>[] = random_seed[impl=fry] s\nks:key<fry>[2] = random_split[shape=(2,)] k\nf:key<fry>[] = random_fold_in j 3:u32[]\nb:u32[3] = random_bits[bit_width=32 shape=(3,)] f\nd:u32[2,2] = random_unwrap ks\nc:f64[3] = convert_element_type[new_dtype=float64 weak_type=False] b\ny:f64[3] = mul x c",
            "y, d",
        ),
        Threefry2x32 => prog(
            "a:u32[2,3] b:u32[1,3] c:u32[2,3] d:u32[2,3]",
            "e:u32[2,3] f:u32[2,3] = threefry2x32 a b c d",
            "e, f",
        ),
        Sort => prog(
            "a:f64[2,3] b:f64[2,3] i:i32[2,3]",
            "c:f64[2,3] d:f64[2,3] = sort[dimension=1 is_stable=True num_keys=1] a b\ne:i32[2,3] f:f64[2,3] = sort[dimension=0 is_stable=True num_keys=2] i c\ng:f64[2,3] = mul d f",
            "g, e",
        ),
        TopK => prog(
            "a:f64[2,4]",
            "b:f64[2,2] c:i32[2,2] = top_k[axis=1 k=2] a\nd:f64[1,4] e:i32[1,4] = top_k[axis=0 k=1] a\nf:f64[2,4] = sin a\ng:f64[2,2] h:i32[2,2] = top_k[k=2] f",
            "b, c, d, g",
        ),
        // Cumulative ops, scatters, windows, convolution.
        Cumprod | Cummax | Cummin | Cumlogsumexp => prog(
            "a:f64[3,5]",
            &format!(
                "b:f64[3,5] = {name}[axis=1 reverse=False] a\nc:f64[3,5] = {name}[axis=0 reverse=True] b\nd:f64[3,5] = {name}[axis=1 reverse=True] a\ne:f64[3,5] = mul c d"
            ),
            "e",
        ),
        Scatter | ScatterMul | ScatterMin | ScatterMax => {
            let mode = match prim {
                Scatter => "FILL_OR_DROP",
                ScatterMul => "CLIP",
                _ => "PROMISE_IN_BOUNDS",
            };
            prog(
                "a:f64[5,3] i:i32[4,1] u:f64[4,3]",
                &format!(
                    "b:f64[5,3] = {name}[{SCATTER_DIMS} indices_are_sorted=False mode=GatherScatterMode.{mode} unique_indices=False update_consts=() update_jaxpr=None] a i u\nc:f64[5,3] = sin b"
                ),
                "c",
            )
        }
        ReduceWindowSum => prog(
            "a:f64[4,5]",
            "b:f64[7,2] = reduce_window_sum[base_dilation=(2, 1) padding=((1, 0), (1, 1)) window_dilation=(1, 2) window_dimensions=(2, 3) window_strides=(1, 2)] a\nc:f64[7,2] = sin b",
            "c",
        ),
        ReduceWindowMax | ReduceWindowMin => prog(
            "a:f64[4,6]",
            &format!(
                "b:f64[2,4] = {name}[base_dilation=(1, 1) padding=((0, 1), (1, 1)) window_dilation=(1, 1) window_dimensions=(2, 2) window_strides=(2, 2)] a\nc:f64[6,5] = {name}[base_dilation=(2, 1) padding=((0, 0), (0, 0)) window_dilation=(1, 1) window_dimensions=(2, 2) window_strides=(1, 1)] a\nd:f64[] = reduce_sum[axes=(0, 1)] b\ne:f64[6,5] = mul c d"
            ),
            "e",
        ),
        ReduceWindow => prog(
            "a:f64[4,5]",
            "b:f64[3,2] = reduce_window[base_dilation=(1, 1) consts=() jaxpr={ lambda ; x:f64[] y:f64[]. let z:f64[] = mul x y in (z,) } padding=((0, 0), (1, 0)) window_dilation=(1, 1) window_dimensions=(2, 3) window_strides=(1, 2)] a 1.0:f64[]",
            "b",
        ),
        SelectAndScatterAdd => prog(
            "s:f64[2,4] a:f64[4,6]",
            "b:f64[4,6] = select_and_scatter_add[padding=((0, 1), (1, 1)) select_prim=ge window_dimensions=(2, 2) window_strides=(2, 2)] s a\nd:f64[4,6] = cos a\nc:f64[4,6] = select_and_scatter_add[padding=((0, 1), (1, 1)) select_prim=le window_dimensions=(2, 2) window_strides=(2, 2)] s d\ne:f64[4,6] = mul b c",
            "e",
        ),
        ConvGeneralDilated => {
            let conv = |out: &str, operands: &str, specs: &str, rest: &str| {
                format!(
                    "{out} = conv_general_dilated[dimension_numbers=ConvDimensionNumbers({specs}) {rest} precision=None preferred_element_type=None] {operands}"
                )
            };
            let body = [
                conv(
                    "c:f64[2,2,11,4]",
                    "a b",
                    "lhs_spec=(0, 3, 1, 2), rhs_spec=(3, 2, 0, 1), out_spec=(0, 3, 1, 2)",
                    "batch_group_count=1 feature_group_count=1 lhs_dilation=(1, 2) padding=((1, 0), (0, 1)) rhs_dilation=(2, 1) window_strides=(2, 1)",
                ),
                conv(
                    "f:f64[2,6,5,3]",
                    "d e",
                    "lhs_spec=(0, 1, 2, 3), rhs_spec=(0, 1, 2, 3), out_spec=(0, 1, 2, 3)",
                    "batch_group_count=1 feature_group_count=2 lhs_dilation=(1, 1) padding=((1, 1), (0, 0)) rhs_dilation=(1, 1) window_strides=(1, 1)",
                ),
                conv(
                    "i:f64[2,6,4]",
                    "g h",
                    "lhs_spec=(0, 1, 2), rhs_spec=(0, 1, 2), out_spec=(0, 1, 2)",
                    "batch_group_count=2 feature_group_count=1 lhs_dilation=(1,) padding=((0, 0),) rhs_dilation=(1,) window_strides=(1,)",
                ),
            ];
            prog(
                "a:f64[2,7,6,3] b:f64[3,2,3,4] d:f64[2,4,5,5] e:f64[6,2,3,3] g:f64[4,3,5] h:f64[6,3,2]",
                &body.join("\n"),
                "c, f, i",
            )
        }
    }
}

/// A small deterministic generator (SplitMix64).
pub struct Rng(pub u64);

impl Rng {
    /// A uniform number in `[0, 1)`.
    pub fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A random value of `aval`: floats in `[0.3, 1.7)`, integers in `0..=3`, booleans.
    pub fn array(&mut self, aval: &ShapedArray) -> Array {
        let values = (0..aval.size())
            .map(|_| match aval.dtype {
                DType::Bool => (self.next() < 0.5) as i64 as f64,
                d if d.is_float() => 0.3 + 1.4 * self.next(),
                _ => (self.next() * 4.0).floor(),
            })
            .collect();
        Array::new(aval.dtype, &aval.shape, values).unwrap()
    }

    /// A random direction (floats in `[-1, 1)`; zeros for integers and booleans).
    pub fn direction(&mut self, aval: &ShapedArray) -> Array {
        let values = (0..aval.size())
            .map(|_| {
                if aval.dtype.is_float() {
                    2.0 * self.next() - 1.0
                } else {
                    0.0
                }
            })
            .collect();
        Array::new(aval.dtype, &aval.shape, values).unwrap()
    }
}

/// `a + s * b` elementwise (for floats; others are returned unchanged).
pub fn axpy(a: &Array, s: f64, b: &Array) -> Array {
    if !a.dtype().is_float() {
        return a.clone();
    }
    Array::from_values(a.dtype(), &a.values() + &(&b.values() * s))
}

/// The sum of elementwise products.
pub fn dot(a: &Array, b: &Array) -> f64 {
    a.to_vec().iter().zip(b.to_vec()).map(|(x, y)| x * y).sum()
}

/// Element `i` along `axis`.
pub fn index_axis(a: &Array, axis: usize, i: usize) -> Array {
    a.with_elems(a.elems().index_axis(Axis(axis), i).to_owned())
}

/// Stacks arrays along a new `axis`.
pub fn stack(parts: &[Array], axis: usize, aval: &ShapedArray) -> Array {
    if parts.is_empty() {
        let mut dims: Vec<usize> = aval.shape.iter().map(|&d| d as usize).collect();
        dims.insert(axis, 0);
        return Array::from_values(aval.dtype, ArrayD::<f64>::zeros(IxDyn(&dims)));
    }
    let elems: Vec<_> = parts.iter().map(Array::elems).collect();
    let views: Vec<_> = elems.iter().map(|p| p.view()).collect();
    parts[0].with_elems(ndarray::stack(Axis(axis), &views).unwrap())
}

/// Asserts two arrays are equal up to `tol` relative to their magnitude.
pub fn assert_close(what: &str, got: &Array, want: &Array, tol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes differ");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtypes differ");
    for (i, (g, w)) in got.to_vec().iter().zip(want.to_vec().iter()).enumerate() {
        let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan());
        assert!(
            ok,
            "{what}: element {i}: got {g}, want {w}\ngot  {:?}\nwant {:?}",
            got.to_vec(),
            want.to_vec()
        );
    }
}

/// Runs `check(index, primitive, example)` for every primitive and returns one line per
/// primitive whose check panicked, naming it and giving the panic's message.
pub fn failures_per_primitive(check: impl Fn(usize, Prim, &ClosedJaxpr)) -> Vec<String> {
    let mut failures = Vec::new();
    for (i, &prim) in Prim::ALL.iter().enumerate() {
        let f = example(prim);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(i, prim, &f)));
        if let Err(e) = result {
            let message = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            failures.push(format!("{}: {message}", prim.name()));
        }
    }
    failures
}
