//! `gather` and `scatter-add`: an embedding lookup and its gradient as JAX prints them, parsed,
//! evaluated and printed back; the tracing API's `take` gives the same values.

use expect_test::{Expect, expect};
use tessera_ir::interp::{Array, eval_closed};
use tessera_ir::text::{parse_closed_jaxpr, print_jaxpr};
use tessera_ir::trace::{Tensor, trace};
use tessera_ir::verify::verify_closed;
use tessera_ir::{DType, ShapedArray};

fn check(actual: String, expect: Expect) {
    expect.assert_eq(&actual);
}

/// `jax.make_jaxpr(jax.grad(lambda e, i: (e[i] * e[i]).sum()))` as JAX 0.8 prints it (with the
/// older `broadcast_in_dim` params and a dropped variable `_`).
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
    h:f32[3,4] = broadcast_in_dim[
      broadcast_dimensions=()
      shape=(3, 4)
      sharding=None
    ] 1.0:f32[]
    i:f32[5,4] = broadcast_in_dim[
      broadcast_dimensions=()
      shape=(5, 4)
      sharding=None
    ] 0.0:f32[]
    j:f32[5,4] = scatter-add[
      dimension_numbers=ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), operand_batching_dims=(), scatter_indices_batching_dims=())
      indices_are_sorted=False
      mode=GatherScatterMode.PROMISE_IN_BOUNDS
      unique_indices=False
      update_consts=()
      update_jaxpr={ lambda ; k:f32[] l:f32[]. let m:f32[] = add k l in (m,) }
    ] i f h
  in (j,) }";

fn inputs() -> Vec<Array> {
    let emb: Vec<f64> = (0..20).map(f64::from).collect();
    vec![
        Array::from_f64(DType::F32, &[5, 4], &emb).expect("fits"),
        Array::from_f64(DType::I32, &[3], &[1.0, -1.0, 1.0]).expect("fits"),
    ]
}

#[test]
fn embedding_gradient_parses_evaluates_and_prints() {
    let cj = parse_closed_jaxpr(EMBEDDING_GRAD).expect("parses");
    verify_closed(&cj).expect("verifies");
    let out = eval_closed(&cj, &inputs()).expect("evaluates");
    // Row 1 is looked up twice and row 4 (index -1) once.
    check(
        format!("{:?}", out[0].to_f64_vec()),
        expect![
            "[0.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]"
        ],
    );
    let printed = print_jaxpr(&cj.jaxpr);
    assert_eq!(parse_closed_jaxpr(&printed).expect("reparses"), cj);
    check(
        printed,
        expect![[r#"
        { lambda ; a:f32[5,4] b:i32[3]. let
            c:bool[3] = lt b 0:i32[]
            d:i32[3] = add b 5:i32[]
            e:i32[3] = select_n c b d
            f:i32[3,1] = broadcast_in_dim[broadcast_dimensions=(0,)] e
            g:f32[3,4] = gather[
              dimension_numbers=GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,), operand_batching_dims=(), start_indices_batching_dims=())
              fill_value=None
              indices_are_sorted=False
              mode=GatherScatterMode.PROMISE_IN_BOUNDS
              slice_sizes=(1, 4)
              unique_indices=False
            ] a f
            h:f32[] = reduce_sum[axes=(0, 1) out_sharding=None] g
            i:f32[3,4] = broadcast_in_dim 1.0:f32[]
            j:f32[5,4] = broadcast_in_dim 0.0:f32[]
            k:f32[5,4] = scatter-add[
              dimension_numbers=ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), operand_batching_dims=(), scatter_indices_batching_dims=())
              indices_are_sorted=False
              mode=GatherScatterMode.PROMISE_IN_BOUNDS
              unique_indices=False
              update_consts=()
              update_jaxpr={ lambda ; l:f32[] m:f32[]. let n:f32[] = add l m in (n,) }
            ] j f i
          in (k,) }"#]],
    );
}

#[test]
fn take_is_an_embedding_lookup() {
    let avals = [
        ShapedArray::new(DType::F32, &[5, 4]),
        ShapedArray::new(DType::I32, &[3]),
    ];
    let cj = trace(&avals, |e: Tensor, i: Tensor| e.take(&i)).expect("traces");
    verify_closed(&cj).expect("verifies");
    let out = eval_closed(&cj, &inputs()).expect("evaluates");
    check(
        format!("{:?}", out[0].to_f64_vec()),
        expect!["[4.0, 5.0, 6.0, 7.0, 16.0, 17.0, 18.0, 19.0, 4.0, 5.0, 6.0, 7.0]"],
    );
    check(
        cj.to_string(),
        expect![[r#"
        { lambda ; a:f32[5,4] b:i32[3]. let
            c:bool[3] = lt b 0:i32[]
            d:i32[3] = add b 5:i32[]
            e:i32[3] = select_n c b d
            f:i32[3,1] = broadcast_in_dim[broadcast_dimensions=(0,)] e
            g:f32[3,4] = gather[
              dimension_numbers=GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,), operand_batching_dims=(), start_indices_batching_dims=())
              fill_value=None
              indices_are_sorted=False
              mode=GatherScatterMode.PROMISE_IN_BOUNDS
              slice_sizes=(1, 4)
              unique_indices=False
            ] a f
          in (g,) }"#]],
    );
}
