//! Differential test of the primitives the JAX oracle does not exercise: each small program runs
//! on the reference interpreter and, lowered to StableHLO, on PJRT; the results must agree.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::interp::eval_closed;
use tessera_ir::text::parse_closed;
use tessera_ir::{Array, DType};

fn arg(dtype: DType, shape: &[i64], values: &[f64]) -> Array {
    Array::new(dtype, shape, values.to_vec()).unwrap()
}

/// `jax.make_jaxpr(jax.grad(lambda e, i: e[i].sum()))` as JAX prints it: a gather (with a
/// dropped result `_`), then its transpose, a scatter-add with a one-line nested jaxpr.
const EMBEDDING_GRAD: &str = "{ lambda ; a:f32[5,4] b:i32[3]. let
    c:bool[3] = lt b 0:i32[]
    d:i32[3] = add b 5:i32[]
    e:i32[3] = select_n c b d
    f:i32[3,1] = broadcast_in_dim[
      broadcast_dimensions=(0,)
      shape=(3, 1)
      sharding=None
    ] e
    g:f32[3,4] = gather[
      dimension_numbers=GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,), operand_batching_dims=(), start_indices_batching_dims=())
      fill_value=None
      indices_are_sorted=False
      mode=GatherScatterMode.PROMISE_IN_BOUNDS
      slice_sizes=(1, 4)
      unique_indices=False
    ] a f
    _:f32[] = reduce_sum[axes=(0, 1) out_sharding=None] g
    h:f32[3,4] = broadcast_in_dim[broadcast_dimensions=() shape=(3, 4) sharding=None] 1.0:f32[]
    i:f32[5,4] = broadcast_in_dim[broadcast_dimensions=() shape=(5, 4) sharding=None] 0.0:f32[]
    j:f32[5,4] = scatter-add[
      dimension_numbers=ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), operand_batching_dims=(), scatter_indices_batching_dims=())
      indices_are_sorted=False
      mode=GatherScatterMode.PROMISE_IN_BOUNDS
      unique_indices=False
      update_consts=()
      update_jaxpr={ lambda ; k:f32[] l:f32[]. let m:f32[] = add k l in (m,) }
    ] i f h
  in (j,) }";

const CASES: &[(&str, &str)] = &[
    (
        "pow rem exp2",
        "{ lambda ; a:f32[4] b:f32[4]. let c:f32[4] = pow a b\n d:f32[4] = rem a b\n e:f32[4] = exp2 d\n f:f32[4] = add c e\n in (f,) }",
    ),
    (
        "floor ceil round",
        "{ lambda ; a:f32[4]. let b:f32[4] = floor a\n c:f32[4] = ceil a\n d:f32[4] = round[rounding_method=0] a\n e:f32[4] = add b c\n f:f32[4] = add e d\n in (f,) }",
    ),
    (
        "logic on bools",
        "{ lambda ; p:bool[4] q:bool[4]. let a:bool[4] = and p q\n b:bool[4] = or p q\n c:bool[4] = xor a b\n d:bool[4] = not c\n in (d,) }",
    ),
    (
        "integer ops",
        "{ lambda ; a:i32[4] b:i32[4]. let c:i32[4] = div a b\n d:i32[4] = rem a b\n e:i32[4] = and a b\n f:i32[4] = add c d\n g:i32[4] = add f e\n in (g,) }",
    ),
    (
        "comparisons",
        "{ lambda ; a:f32[4] b:f32[4]. let c:bool[4] = ne a b\n d:bool[4] = le a b\n e:bool[4] = gt a b\n f:bool[4] = and c d\n g:bool[4] = or f e\n in (g,) }",
    ),
    (
        "clamp",
        "{ lambda ; a:f32[4]. let b:f32[4] = clamp -0.5:f32[] a 0.5:f32[]\n in (b,) }",
    ),
    (
        "squeeze expand_dims",
        "{ lambda ; a:f32[1,4]. let b:f32[4] = squeeze[dimensions=(0,)] a\n c:f32[4,1] = expand_dims[dimensions=(1,)] b\n in (c,) }",
    ),
    (
        "reduce and or prod",
        "{ lambda ; p:bool[2,2] a:f32[2,2]. let b:bool[2] = reduce_and[axes=(1,)] p\n c:bool[2] = reduce_or[axes=(0,)] p\n d:f32[2] = reduce_prod[axes=(1,)] a\n e:f32[] = reduce_min[axes=(0, 1)] a\n in (b, c, d, e) }",
    ),
    (
        "argmin cumsum",
        "{ lambda ; a:f32[2,3]. let b:i32[2] = argmin[axes=(1,) index_dtype=int32] a\n c:f32[2,3] = cumsum[axis=1 reverse=False] a\n d:f32[2,3] = cumsum[axis=0 reverse=True] a\n in (b, c, d) }",
    ),
    (
        "select_n with an int32 index",
        "{ lambda ; i:i32[4] a:f32[4] b:f32[4] c:f32[4]. let d:f32[4] = select_n i a b c\n in (d,) }",
    ),
    (
        "integer_pow negative",
        "{ lambda ; a:f32[4]. let b:f32[4] = integer_pow[y=-3] a\n c:f32[4] = integer_pow[y=5] a\n d:f32[4] = add b c\n in (d,) }",
    ),
    (
        "convert to bool and back",
        "{ lambda ; a:f32[4]. let b:bool[4] = convert_element_type[new_dtype=bool weak_type=False] a\n c:i32[4] = convert_element_type[new_dtype=int32 weak_type=False] b\n d:i32[4] = convert_element_type[new_dtype=int32 weak_type=False] a\n e:i32[4] = add c d\n in (e,) }",
    ),
    (
        "f64 and u8",
        "{ lambda ; a:f64[3] b:u8[3]. let c:f64[3] = convert_element_type[new_dtype=float64 weak_type=False] b\n d:f64[3] = mul a c\n e:u8[3] = add b 200:u8[]\n in (d, e) }",
    ),
];

fn inputs(name: &str) -> Vec<Array> {
    let f = |v: &[f64]| arg(DType::F32, &[4], v);
    match name {
        "pow rem exp2" => vec![f(&[2.0, 3.0, 5.5, 0.5]), f(&[2.0, 0.5, 2.0, 3.0])],
        "round to even" => vec![f(&[0.5, 1.5, 2.5, -0.5])],
        "embedding gradient as JAX prints it" => vec![
            arg(
                DType::F32,
                &[5, 4],
                &(0..20).map(f64::from).collect::<Vec<_>>(),
            ),
            arg(DType::I32, &[3], &[1.0, -1.0, 1.0]),
        ],
        "floor ceil round" | "clamp" | "integer_pow negative" | "convert to bool and back" => {
            vec![f(&[-1.5, -0.25, 0.0, 2.5])]
        }
        "logic on bools" => vec![
            arg(DType::Bool, &[4], &[1.0, 1.0, 0.0, 0.0]),
            arg(DType::Bool, &[4], &[1.0, 0.0, 1.0, 0.0]),
        ],
        "integer ops" => vec![
            arg(DType::I32, &[4], &[7.0, -7.0, 9.0, 12.0]),
            arg(DType::I32, &[4], &[2.0, 2.0, -4.0, 5.0]),
        ],
        "comparisons" => vec![f(&[1.0, 2.0, 3.0, 4.0]), f(&[2.0, 2.0, 2.0, 5.0])],
        "squeeze expand_dims" => vec![arg(DType::F32, &[1, 4], &[1.0, 2.0, 3.0, 4.0])],
        "reduce and or prod" => vec![
            arg(DType::Bool, &[2, 2], &[1.0, 0.0, 1.0, 1.0]),
            arg(DType::F32, &[2, 2], &[1.5, -2.0, 3.0, 0.5]),
        ],
        "argmin cumsum" => vec![arg(DType::F32, &[2, 3], &[3.0, 1.0, 1.0, -2.0, 5.0, -2.0])],
        "select_n with an int32 index" => vec![
            arg(DType::I32, &[4], &[0.0, 1.0, 2.0, 1.0]),
            f(&[1.0; 4]),
            f(&[2.0; 4]),
            f(&[3.0; 4]),
        ],
        "f64 and u8" => vec![
            arg(DType::F64, &[3], &[0.1, 0.2, 0.3]),
            arg(DType::U8, &[3], &[1.0, 100.0, 250.0]),
        ],
        other => panic!("no inputs for {other}"),
    }
}

#[test]
fn interpreter_and_pjrt_agree_on_every_primitive() {
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    for &(name, text) in CASES {
        let program = parse_closed(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        tessera_ir::verify(&program).unwrap_or_else(|e| panic!("{name}: {e}"));
        let args = inputs(name);
        let want = eval_closed(&program, &args).unwrap();
        let got = tessera::jit::run_on_device(&client, &program, &args, 0)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.shape(), w.shape(), "{name}");
            for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
                assert!(
                    *a == b || (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                    "{name}: PJRT {:?} vs interpreter {:?}",
                    g.to_vec(),
                    w.to_vec()
                );
            }
        }
    }
}

#[test]
fn the_embedding_gradient_counts_each_row_lookup() {
    let program = parse_closed(EMBEDDING_GRAD).unwrap();
    let out = eval_closed(&program, &inputs("embedding gradient as JAX prints it")).unwrap();
    let mut expected = vec![0.0; 20];
    expected[4..8].copy_from_slice(&[2.0; 4]);
    expected[16..20].copy_from_slice(&[1.0; 4]);
    assert_eq!(out[0].to_vec(), expected);
}

#[test]
fn gradients_flow_through_embedding_lookups() {
    use tessera_ir::ShapedArray;
    use tessera_ir::autodiff::value_and_grad;
    use tessera_ir::trace::trace;
    let program = trace(
        &[
            ShapedArray::new(DType::F32, &[5, 4]),
            ShapedArray::new(DType::I32, &[3]),
        ],
        |a| vec![a[0].take(&a[1], 0).integer_pow(2).sum(&[0, 1])],
    )
    .unwrap();
    let grads = value_and_grad(&program, &[0]).unwrap();
    let table: Vec<f64> = (0..20).map(f64::from).collect();
    let args = vec![
        arg(DType::F32, &[5, 4], &table),
        arg(DType::I32, &[3], &[1.0, 4.0, 1.0]),
    ];
    let want = eval_closed(&grads, &args).unwrap();
    let mut expected = vec![0.0; 20];
    for (row, count) in [(1usize, 2.0), (4, 1.0)] {
        for c in 0..4 {
            expected[row * 4 + c] = 2.0 * table[row * 4 + c] * count;
        }
    }
    assert_eq!(want[1].to_vec(), expected);
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let got = tessera::jit::run_on_device(&client, &grads, &args, 0).unwrap();
    assert_eq!(got[1].to_vec(), expected, "PJRT agrees");
}
