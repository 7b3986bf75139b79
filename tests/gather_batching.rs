//! Gathers and scatters with batching dimensions (`operand_batching_dims`,
//! `start_indices_batching_dims`, `scatter_indices_batching_dims`), as JAX prints
//! `jnp.take_along_axis` over a batch (a mixture-of-experts router) and its transpose: the
//! interpreter and PJRT agree with values worked out by hand, the gradient routes cotangents to
//! the gathered places (JVP and VJP agree: `<ct, J t> = <J^T ct, t>`), `vmap` equals stacking
//! per-example results, and malformed batching dimensions are refused naming them.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::interp::eval_closed;
use tessera_ir::text::parse_closed;
use tessera_ir::{Array, ClosedJaxpr, DType, jvp, vjp, vmap};

/// `take_along_axis(a, i, axis=1)` for `a: [2, 3]` and `i: [2, 2, 1]` in `mode`, then `* 1`.
fn take_along(mode: &str, batching: &str) -> String {
    format!(
        "{{ lambda ; a:f32[2,3] b:i32[2,2,1]. let
    c:f32[2,2] = gather[
      dimension_numbers=GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(1,), start_index_map=(1,), {batching})
      fill_value=None
      indices_are_sorted=False
      mode=GatherScatterMode.{mode}
      slice_sizes=(1, 1)
      unique_indices=False
    ] a b
  in (c,) }}"
    )
}

const BATCHED: &str = "operand_batching_dims=(0,), start_indices_batching_dims=(0,)";

fn table() -> Array {
    Array::new(
        DType::F32,
        &[2, 3],
        vec![10.0, 11.0, 12.0, 20.0, 21.0, 22.0],
    )
    .unwrap()
}

fn picks(ids: [f64; 4]) -> Array {
    Array::new(DType::I32, &[2, 2, 1], ids.to_vec()).unwrap()
}

fn pjrt(program: &ClosedJaxpr, inputs: &[Array]) -> Vec<Vec<f64>> {
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    let out = tessera::jit::run_on_device(&client, program, inputs, 0)
        .unwrap_or_else(|e| panic!("{e}\n{}", tessera_ir::text::print_closed(program, 0)));
    out.iter().map(Array::to_vec).collect()
}

fn interp(program: &ClosedJaxpr, inputs: &[Array]) -> Vec<Vec<f64>> {
    let out = eval_closed(program, inputs).unwrap();
    out.iter().map(Array::to_vec).collect()
}

fn same(a: &[Vec<f64>], b: &[Vec<f64>]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len());
        for (p, q) in x.iter().zip(y) {
            assert!(
                (p.is_nan() && q.is_nan()) || (p - q).abs() <= 1e-5,
                "{x:?} vs {y:?}"
            );
        }
    }
}

#[test]
fn each_row_reads_its_own_operand_row_on_both_backends() {
    let program = parse_closed(&take_along("PROMISE_IN_BOUNDS", BATCHED)).unwrap();
    let inputs = [table(), picks([2.0, 0.0, 1.0, 1.0])];
    let want = vec![vec![12.0, 10.0, 21.0, 21.0]];
    same(&interp(&program, &inputs), &want);
    same(&pjrt(&program, &inputs), &want);
    // Out of bounds: CLIP clamps within the row, FILL_OR_DROP fills with NaN.
    let inputs = [table(), picks([5.0, -1.0, 1.0, 3.0])];
    let clip = parse_closed(&take_along("CLIP", BATCHED)).unwrap();
    let want = vec![vec![12.0, 10.0, 21.0, 22.0]];
    same(&interp(&clip, &inputs), &want);
    same(&pjrt(&clip, &inputs), &want);
    let fill = parse_closed(&take_along("FILL_OR_DROP", BATCHED)).unwrap();
    let want = vec![vec![f64::NAN, f64::NAN, 21.0, f64::NAN]];
    same(&interp(&fill, &inputs), &want);
    same(&pjrt(&fill, &inputs), &want);
}

#[test]
fn the_gradient_routes_each_cotangent_to_its_row_and_jvp_agrees() {
    let program = parse_closed(&take_along("FILL_OR_DROP", BATCHED)).unwrap();
    let ids = picks([2.0, 2.0, 0.0, 7.0]);
    let ct = Array::new(DType::F32, &[2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let grad = vjp(&program).unwrap();
    let inputs = [table(), ids.clone(), ct.clone()];
    // Row 0 index 2 twice (1 + 2); row 1 index 0 (3), index 7 dropped.
    let want = vec![vec![0.0, 0.0, 3.0, 3.0, 0.0, 0.0]];
    same(&interp(&grad, &inputs)[..1], &want);
    same(&pjrt(&grad, &inputs)[..1], &want);
    // <ct, J t> = <J^T ct, t> for a tangent t of the table.
    let t = Array::new(DType::F32, &[2, 3], vec![0.5, -1.0, 2.0, 1.5, 3.0, -2.0]).unwrap();
    let forward = jvp(&program).unwrap();
    let ints = Array::zeros(&tessera_ir::ShapedArray::new(DType::I32, &[2, 2, 1]));
    let jt = eval_closed(&forward, &[table(), ids, t.clone(), ints]).unwrap();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let lhs = dot(&ct.to_vec(), &jt[1].to_vec());
    let rhs = dot(&want[0], &t.to_vec());
    assert!((lhs - rhs).abs() < 1e-9, "{lhs} vs {rhs}");
}

#[test]
fn vmap_equals_stacking_each_examples_result() {
    let program = parse_closed(&take_along("CLIP", BATCHED)).unwrap();
    let tables = [
        table(),
        Array::new(DType::F32, &[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap(),
    ];
    let ids = [picks([2.0, 0.0, 1.0, 1.0]), picks([0.0, 1.0, 2.0, 0.0])];
    let stack = |xs: &[Array]| {
        let dtype = xs[0].dtype();
        let dims: Vec<i64> = std::iter::once(2).chain(xs[0].shape()).collect();
        let data: Vec<f64> = xs.iter().flat_map(Array::to_vec).collect();
        Array::new(dtype, &dims, data).unwrap()
    };
    for in_axes in [[Some(0), Some(0)], [Some(0), None], [None, Some(0)]] {
        let batched = vmap(&program, &in_axes, &[0], 2).unwrap();
        let arg = |k: usize, xs: &[Array]| match in_axes[k] {
            Some(_) => stack(xs),
            None => xs[0].clone(),
        };
        let inputs = [arg(0, &tables), arg(1, &ids)];
        let want: Vec<f64> = (0..2)
            .flat_map(|k| {
                let pick = |i: usize, xs: &[Array]| match in_axes[i] {
                    Some(_) => xs[k].clone(),
                    None => xs[0].clone(),
                };
                interp(&program, &[pick(0, &tables), pick(1, &ids)]).remove(0)
            })
            .collect();
        same(&interp(&batched, &inputs), std::slice::from_ref(&want));
        same(&pjrt(&batched, &inputs), &[want]);
    }
    // The gradient, a scatter-add with batching dimensions, batched over all its arguments.
    let grad = vjp(&program).unwrap();
    let cts = [
        Array::new(DType::F32, &[2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap(),
        Array::new(DType::F32, &[2, 2], vec![-1.0, 0.5, 2.0, 1.0]).unwrap(),
    ];
    let batched = vmap(&grad, &[Some(0), Some(0), Some(0)], &[0, 0], 2).unwrap();
    let want: Vec<f64> = (0..2)
        .flat_map(|k| interp(&grad, &[tables[k].clone(), ids[k].clone(), cts[k].clone()]).remove(0))
        .collect();
    let inputs = [stack(&tables), stack(&ids), stack(&cts)];
    same(&interp(&batched, &inputs)[..1], std::slice::from_ref(&want));
    same(&pjrt(&batched, &inputs)[..1], &[want]);
}

#[test]
fn malformed_batching_dimensions_are_refused_naming_them() {
    for batching in [
        // Unpaired.
        "operand_batching_dims=(0,), start_indices_batching_dims=()",
        // The index vector's dimension.
        "operand_batching_dims=(0,), start_indices_batching_dims=(2,)",
        // Also collapsed.
        "operand_batching_dims=(1,), start_indices_batching_dims=(0,)",
    ] {
        let err = parse_closed(&take_along("CLIP", batching))
            .unwrap_err()
            .to_string();
        assert!(err.contains("do not fit operand"), "{batching}: {err}");
    }
    let missing = take_along("CLIP", "operand_batching_dims=(0,)");
    let err = parse_closed(&missing).unwrap_err().to_string();
    assert!(err.contains("start_indices_batching_dims"), "{err}");
}
