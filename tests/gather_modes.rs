//! Gather and scatter-add in each `GatherScatterMode` with out-of-bounds indices: JAX-printed
//! programs run on the interpreter and on PJRT, values and gradients, both checked against the
//! semantics worked out by hand (clamped rows, NaN-filled rows, dropped windows); `Tensor::take`
//! like `jnp.take`; and JAX's own `jnp.take` cases (`take_modes_*` of `jaxpr_real_cases.json`).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::autodiff::vjp;
use tessera_ir::interp::eval_closed;
use tessera_ir::prim::GatherScatterMode;
use tessera_ir::text::parse_closed;
use tessera_ir::trace::trace;
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_tests::named_real_cases;

/// Indices with two below and two above the 5 rows of the table.
const IDS: [f64; 6] = [-2.0, 0.0, 4.0, 5.0, 7.0, 3.0];

fn table() -> Array {
    Array::new(DType::F32, &[5, 3], (0..15).map(f64::from).collect()).unwrap()
}

fn ids() -> Array {
    Array::new(DType::I32, &[6], IDS.to_vec()).unwrap()
}

/// `e[i]` as a gather of mode `mode` (JAX's text, fill value as given).
fn gather_text(mode: &str, fill: &str) -> String {
    format!(
        "{{ lambda ; a:f32[5,3] b:i32[6]. let
    c:i32[6,1] = broadcast_in_dim[broadcast_dimensions=(0,) shape=(6, 1) sharding=None] b
    d:f32[6,3] = gather[
      dimension_numbers=GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,), operand_batching_dims=(), start_indices_batching_dims=())
      fill_value={fill}
      indices_are_sorted=False
      mode=GatherScatterMode.{mode}
      slice_sizes=(1, 3)
      unique_indices=False
    ] a c
  in (d,) }}"
    )
}

/// `zeros.at[i].add(u)` as a scatter-add of mode `mode`.
fn scatter_text(mode: &str) -> String {
    format!(
        "{{ lambda ; a:f32[5,3] b:i32[6] u:f32[6,3]. let
    c:i32[6,1] = broadcast_in_dim[broadcast_dimensions=(0,) shape=(6, 1) sharding=None] b
    d:f32[5,3] = scatter-add[
      dimension_numbers=ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), operand_batching_dims=(), scatter_indices_batching_dims=())
      indices_are_sorted=False
      mode=GatherScatterMode.{mode}
      unique_indices=False
      update_consts=()
      update_jaxpr=None
    ] a c u
  in (d,) }}"
    )
}

fn pjrt(program: &ClosedJaxpr, inputs: &[Array]) -> Vec<Array> {
    let client = tessera_pjrt::Client::cpu(1).unwrap();
    tessera::jit::run_on_device(&client, program, inputs, 0).unwrap()
}

/// Both backends' results, asserted equal (NaN where NaN), and returned from the interpreter.
fn both(program: &ClosedJaxpr, inputs: &[Array]) -> Vec<Vec<f64>> {
    let here = eval_closed(program, inputs).unwrap();
    let there = pjrt(program, inputs);
    assert_eq!(here.len(), there.len());
    for (a, b) in here.iter().zip(&there) {
        assert_eq!(a.shape(), b.shape());
        for (x, y) in a.to_vec().iter().zip(b.to_vec()) {
            assert!(
                (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-6 * x.abs().max(1.0),
                "interpreter {x} vs PJRT {y}\n{}",
                tessera_ir::text::print_closed(program, 0)
            );
        }
    }
    here.iter().map(Array::to_vec).collect()
}

/// The row each index reads in CLIP mode, or `None` where FILL_OR_DROP fills.
fn row(i: f64, clip: bool) -> Option<usize> {
    match (clip, i) {
        (true, _) => Some(i.clamp(0.0, 4.0) as usize),
        (false, i) if (0.0..=4.0).contains(&i) => Some(i as usize),
        (false, _) => None,
    }
}

#[test]
fn gathers_in_each_mode_agree_with_pjrt_and_with_the_modes_semantics() {
    for (mode, fill, clip, fill_value) in [
        ("CLIP", "None", true, f64::NAN),
        ("PROMISE_IN_BOUNDS", "None", true, f64::NAN),
        ("FILL_OR_DROP", "None", false, f64::NAN),
        ("FILL_OR_DROP", "nan", false, f64::NAN),
        ("FILL_OR_DROP", "-1.5", false, -1.5),
    ] {
        let program = parse_closed(&gather_text(mode, fill)).unwrap();
        let got = both(&program, &[table(), ids()]).remove(0);
        let t = table().to_vec();
        for (k, &i) in IDS.iter().enumerate() {
            for c in 0..3 {
                let want = row(i, clip).map_or(fill_value, |r| t[r * 3 + c]);
                let v = got[k * 3 + c];
                assert!(
                    v == want || (v.is_nan() && want.is_nan()),
                    "{mode} fill {fill}: index {i} column {c} gave {v}, want {want}"
                );
            }
        }
    }
}

#[test]
fn gather_gradients_in_each_mode_agree_with_pjrt_and_route_cotangents_as_jax() {
    let ct = Array::new(DType::F32, &[6, 3], (1..=18).map(f64::from).collect()).unwrap();
    for (mode, clip) in [
        ("CLIP", true),
        ("PROMISE_IN_BOUNDS", true),
        ("FILL_OR_DROP", false),
    ] {
        let program = parse_closed(&gather_text(mode, "None")).unwrap();
        let grads = vjp(&program).unwrap();
        let got = both(&grads, &[table(), ids(), ct.clone()]).remove(0);
        let mut want = [0.0; 15];
        for (k, &i) in IDS.iter().enumerate() {
            // CLIP's transpose clamps; FILL_OR_DROP's drops (PROMISE_IN_BOUNDS lowers as XLA's
            // scatter, which drops too).
            let target = if mode == "PROMISE_IN_BOUNDS" {
                row(i, false)
            } else {
                row(i, clip)
            };
            if let Some(r) = target {
                for c in 0..3 {
                    want[r * 3 + c] += ct.to_vec()[k * 3 + c];
                }
            }
        }
        assert_eq!(got, want, "{mode}");
    }
}

#[test]
fn scatter_adds_in_each_mode_agree_with_pjrt() {
    let zeros = Array::new(DType::F32, &[5, 3], vec![0.0; 15]).unwrap();
    let updates = Array::new(DType::F32, &[6, 3], (1..=18).map(f64::from).collect()).unwrap();
    for (mode, clip) in [
        ("CLIP", true),
        ("FILL_OR_DROP", false),
        ("PROMISE_IN_BOUNDS", false),
    ] {
        let program = parse_closed(&scatter_text(mode)).unwrap();
        let got = both(&program, &[zeros.clone(), ids(), updates.clone()]).remove(0);
        let mut want = [0.0; 15];
        for (k, &i) in IDS.iter().enumerate() {
            if let Some(r) = row(i, clip) {
                for c in 0..3 {
                    want[r * 3 + c] += updates.to_vec()[k * 3 + c];
                }
            }
        }
        assert_eq!(got, want, "{mode}");
        // The updates' cotangent: a gather of the output cotangent with the same mode: zero
        // where FILL_OR_DROP dropped, clamped otherwise (XLA's gather clamps).
        let grads = vjp(&program).unwrap();
        let ct = Array::new(DType::F32, &[5, 3], (1..=15).map(f64::from).collect()).unwrap();
        let g = both(&grads, &[zeros.clone(), ids(), updates.clone(), ct.clone()]);
        let d_updates = &g[2];
        for (k, &i) in IDS.iter().enumerate() {
            for c in 0..3 {
                let read = row(i, mode != "FILL_OR_DROP");
                let want = read.map_or(0.0, |r| ct.to_vec()[r * 3 + c]);
                assert_eq!(d_updates[k * 3 + c], want, "{mode}: update {k} column {c}");
            }
        }
    }
}

#[test]
fn take_reads_any_table_rank_along_any_axis_like_jnp_take() {
    // A [2, 4, 3] array, [2, 2] indices along axis 1: out[i, j, k, l] = x[i, ids[j, k], l],
    // with -1 the last row and 9 out of range (filled) or clamped.
    let x = Array::new(DType::F32, &[2, 4, 3], (0..24).map(f64::from).collect()).unwrap();
    let ids = Array::new(DType::I32, &[2, 2], vec![1.0, -1.0, 9.0, 0.0]).unwrap();
    for (mode, wrap) in [
        (GatherScatterMode::FillOrDrop, true),
        (GatherScatterMode::Clip, false),
    ] {
        let program = trace(
            &[
                ShapedArray::new(DType::F32, &[2, 4, 3]),
                ShapedArray::new(DType::I32, &[2, 2]),
            ],
            |a| vec![a[0].take_with(&a[1], 1, mode)],
        )
        .unwrap();
        assert_eq!(program.jaxpr.out_avals()[0].shape, vec![2, 2, 2, 3]);
        let got = both(&program, &[x.clone(), ids.clone()]).remove(0);
        let xv = x.to_vec();
        let mut at = 0;
        for i in 0..2 {
            for &id in &ids.to_vec() {
                let r = match (wrap, id) {
                    (true, id) if id < 0.0 => Some((id + 4.0) as usize),
                    (true, id) if id > 3.0 => None,
                    (_, id) => Some(id.clamp(0.0, 3.0) as usize),
                };
                for l in 0..3 {
                    let want = r.map_or(f64::NAN, |r| xv[i * 12 + r * 3 + l]);
                    let v = got[at];
                    assert!(v == want || (v.is_nan() && want.is_nan()), "{mode:?} {at}");
                    at += 1;
                }
            }
        }
    }
}

/// JAX's `jnp.take` in each mode (with its `let _where = ...` definitions), values and
/// gradients on the interpreter and on PJRT.
#[test]
fn jaxs_take_modes_cases_match_on_the_interpreter_and_on_pjrt() {
    let report = named_real_cases(&["take_modes_0", "take_modes_1"]);
    assert_eq!(report, 2 * 2);
}

/// Windows of two rows: a start of 4 in 5 rows does not fit. XLA's scatter drops the whole
/// window (FILL_OR_DROP, PROMISE_IN_BOUNDS) and CLIP moves it to start 3; a FILL_OR_DROP gather
/// fills the whole window, the others clamp it. Interpreter and PJRT agree on each.
#[test]
fn partial_windows_are_dropped_filled_or_clamped_whole() {
    let zeros = Array::new(DType::F32, &[5, 3], vec![0.0; 15]).unwrap();
    let starts = Array::new(DType::I32, &[3, 1], vec![3.0, 4.0, -1.0]).unwrap();
    let updates = Array::new(DType::F32, &[3, 2, 3], (1..=18).map(f64::from).collect()).unwrap();
    for (mode, rows) in [
        ("CLIP", [3usize, 3, 0]),
        ("FILL_OR_DROP", [3, 99, 99]),
        ("PROMISE_IN_BOUNDS", [3, 99, 99]),
    ] {
        let scatter = parse_closed(&format!(
            "{{ lambda ; a:f32[5,3] b:i32[3,1] u:f32[3,2,3]. let
    d:f32[5,3] = scatter-add[
      dimension_numbers=ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(), scatter_dims_to_operand_dims=(0,), operand_batching_dims=(), scatter_indices_batching_dims=())
      indices_are_sorted=False
      mode=GatherScatterMode.{mode}
      unique_indices=False
      update_consts=()
      update_jaxpr=None
    ] a b u
  in (d,) }}"
        ))
        .unwrap();
        let got = both(&scatter, &[zeros.clone(), starts.clone(), updates.clone()]).remove(0);
        let mut want = [0.0; 15];
        let u = updates.to_vec();
        for (k, &r) in rows.iter().enumerate() {
            if r == 99 {
                continue; // dropped
            }
            for w in 0..2 {
                for c in 0..3 {
                    want[(r + w) * 3 + c] += u[k * 6 + w * 3 + c];
                }
            }
        }
        assert_eq!(got, want, "scatter {mode}");
        let gather = parse_closed(&format!(
            "{{ lambda ; a:f32[5,3] b:i32[3,1]. let
    d:f32[3,2,3] = gather[
      dimension_numbers=GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(0,), operand_batching_dims=(), start_indices_batching_dims=())
      fill_value=None
      indices_are_sorted=False
      mode=GatherScatterMode.{mode}
      slice_sizes=(2, 3)
      unique_indices=False
    ] a b
  in (d,) }}"
        ))
        .unwrap();
        let got = both(&gather, &[table(), starts.clone()]).remove(0);
        let t = table().to_vec();
        let fill = mode == "FILL_OR_DROP";
        for (k, &start) in [3i64, 4, -1].iter().enumerate() {
            for w in 0..2 {
                for c in 0..3 {
                    let v = got[k * 6 + w * 3 + c];
                    if fill && !(0..=3).contains(&start) {
                        assert!(v.is_nan(), "gather {mode}: {k} {w} {c} = {v}");
                    } else {
                        let r = start.clamp(0, 3) as usize + w;
                        assert_eq!(v, t[r * 3 + c], "gather {mode}: {k} {w} {c}");
                    }
                }
            }
        }
    }
}
