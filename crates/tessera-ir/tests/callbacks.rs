//! Host callbacks on the interpreter: `pure_callback`, `io_callback` and `debug_callback` call
//! their Rust closures, results of the wrong type are typed errors, dead-code elimination keeps
//! the effectful ones, `vmap` follows `vmap_method`, differentiation is refused as JAX refuses
//! it, and the printed form is JAX's while parsing it back is refused.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tessera_ir::interp::eval_closed;
use tessera_ir::passes::{eliminate_common_subexpressions, eliminate_dead_code, inline_calls};
use tessera_ir::prim::VmapMethod;
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::{call_closed, debug_callback, io_callback, pure_callback, trace};
use tessera_ir::{Array, DType, IrError, Prim, ShapedArray, jvp, vjp, vmap};

fn f32s(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

fn arr(shape: &[i64], values: &[f64]) -> Array {
    Array::new(DType::F32, shape, values.to_vec()).unwrap()
}

/// A closure that squares its operand and counts its calls.
fn counting_square(
    calls: &Arc<AtomicUsize>,
) -> impl Fn(&[Array]) -> Result<Vec<Array>, String> + Send + Sync + 'static {
    let calls = calls.clone();
    move |args: &[Array]| {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok(vec![Array::from_values(
            args[0].dtype(),
            args[0].values().mapv(|v| v * v),
        )])
    }
}

#[test]
fn pure_callback_runs_its_closure_on_the_interpreter() {
    let calls = Arc::new(AtomicUsize::new(0));
    let f = counting_square(&calls);
    let program = trace(&[f32s(&[4])], |a| {
        let y = pure_callback(f, &[f32s(&[4])], &[&a[0]], None).remove(0);
        vec![&y + &a[0]]
    })
    .unwrap();
    let out = eval_closed(&program, &[arr(&[4], &[1.0, 2.0, 3.0, -1.0])]).unwrap();
    assert_eq!(
        out[0].values().into_raw_vec_and_offset().0,
        [2.0, 6.0, 12.0, 0.0]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn a_callback_returning_the_wrong_shape_is_a_typed_error() {
    let program = trace(&[f32s(&[4])], |a| {
        pure_callback(
            |_: &[Array]| Ok(vec![Array::new(DType::F32, &[3], vec![0.0; 3]).unwrap()]),
            &[f32s(&[4])],
            &[&a[0]],
            None,
        )
    })
    .unwrap();
    let err = eval_closed(&program, &[arr(&[4], &[0.0; 4])]).unwrap_err();
    let IrError::Callback { prim, message } = &err else {
        panic!("expected IrError::Callback, got {err:?}");
    };
    assert_eq!(prim, "pure_callback");
    assert!(
        message.contains("float32[3]") && message.contains("float32[4]"),
        "{message}"
    );
}

#[test]
fn a_failing_callback_is_a_typed_error_with_its_message() {
    let program = trace(&[f32s(&[2])], |a| {
        io_callback(
            |_: &[Array]| Err("disk full".to_owned()),
            &[f32s(&[2])],
            &[&a[0]],
            false,
        )
    })
    .unwrap();
    let err = eval_closed(&program, &[arr(&[2], &[0.0; 2])]).unwrap_err();
    assert!(
        matches!(&err, IrError::Callback { message, .. } if message.contains("disk full")),
        "{err:?}"
    );
}

#[test]
fn dead_code_elimination_keeps_io_and_debug_callbacks_but_drops_unused_pure_ones() {
    let program = trace(&[f32s(&[2])], |a| {
        let _unused = pure_callback(|x: &[Array]| Ok(x.to_vec()), &[f32s(&[2])], &[&a[0]], None);
        let _ignored = io_callback(|x: &[Array]| Ok(x.to_vec()), &[f32s(&[2])], &[&a[0]], true);
        debug_callback(|_: &[Array]| {}, &[&a[0]]);
        vec![a[0].sin()]
    })
    .unwrap();
    let prims: Vec<Prim> = eliminate_dead_code(&program)
        .jaxpr
        .eqns
        .iter()
        .map(|e| e.prim)
        .collect();
    assert_eq!(prims, [Prim::IoCallback, Prim::DebugCallback, Prim::Sin]);
}

#[test]
fn common_subexpression_elimination_never_merges_effects() {
    let calls = Arc::new(AtomicUsize::new(0));
    let f = counting_square(&calls);
    let inner = trace(&[f32s(&[2])], |a| {
        io_callback(f, &[f32s(&[2])], &[&a[0]], false)
    })
    .unwrap();
    let pure = trace(&[f32s(&[2])], |a| {
        pure_callback(|x: &[Array]| Ok(x.to_vec()), &[f32s(&[2])], &[&a[0]], None)
    })
    .unwrap();
    // The same callback equations twice on the same operand (a function called twice).
    let program = trace(&[f32s(&[2])], |a| {
        let x = call_closed(&inner, &[&a[0]]).remove(0);
        let y = call_closed(&inner, &[&a[0]]).remove(0);
        let p = call_closed(&pure, &[&a[0]]).remove(0);
        let q = call_closed(&pure, &[&a[0]]).remove(0);
        vec![&(&x + &y) + &(&p + &q)]
    })
    .unwrap();
    let merged = eliminate_common_subexpressions(&inline_calls(&program));
    let count = |prim| merged.jaxpr.eqns.iter().filter(|e| e.prim == prim).count();
    assert_eq!(count(Prim::IoCallback), 2);
    assert_eq!(
        count(Prim::PureCallback),
        1,
        "pure callbacks may be merged, as in JAX"
    );
    eval_closed(&merged, &[arr(&[2], &[1.0, 2.0])]).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[test]
fn an_io_callback_whose_result_is_unused_still_runs() {
    let calls = Arc::new(AtomicUsize::new(0));
    let f = counting_square(&calls);
    let program = trace(&[f32s(&[2])], |a| {
        let _ = io_callback(f, &[f32s(&[2])], &[&a[0]], false);
        vec![a[0].sin()]
    })
    .unwrap();
    let program = eliminate_dead_code(&program);
    eval_closed(&program, &[arr(&[2], &[1.0, 2.0])]).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn ordered_io_callbacks_run_in_program_order_on_the_interpreter() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let (l1, l2) = (log.clone(), log.clone());
    let program = trace(&[f32s(&[])], |a| {
        let first = move |x: &[Array]| {
            l1.lock().unwrap().push(1);
            Ok(x.to_vec())
        };
        let second = move |x: &[Array]| {
            l2.lock().unwrap().push(2);
            Ok(x.to_vec())
        };
        let _ = io_callback(first, &[f32s(&[])], &[&a[0]], true);
        let _ = io_callback(second, &[f32s(&[])], &[&a[0]], true);
        vec![a[0].clone()]
    })
    .unwrap();
    for _ in 0..2 {
        eval_closed(&program, &[arr(&[], &[1.0])]).unwrap();
    }
    assert_eq!(*log.lock().unwrap(), [1, 2, 1, 2]);
}

#[test]
fn a_callback_without_operands_joins_the_innermost_trace() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let next = move |_: &[Array]| {
        let n = c.fetch_add(1, Ordering::SeqCst) + 1;
        Array::new(DType::F32, &[], vec![n as f64])
            .map(|a| vec![a])
            .map_err(|e| e.to_string())
    };
    let program = trace(&[f32s(&[])], |a| {
        let n = io_callback(next, &[f32s(&[])], &[], true).remove(0);
        vec![&a[0] + &n]
    })
    .unwrap();
    assert!(program.jaxpr.eqns[0].inputs.is_empty());
    let x = arr(&[], &[10.0]);
    let first = eval_closed(&program, std::slice::from_ref(&x)).unwrap();
    let second = eval_closed(&program, &[x]).unwrap();
    assert_eq!(first[0].values()[[]], 11.0);
    assert_eq!(second[0].values()[[]], 12.0);
}

#[test]
fn a_callback_without_operands_outside_any_trace_fails_the_trace_that_uses_it() {
    let outside = io_callback(
        |_: &[Array]| Ok(Vec::new()),
        &[f32s(&[2]), f32s(&[])],
        &[],
        false,
    );
    assert_eq!(
        outside.len(),
        2,
        "one placeholder per declared result, no panic"
    );
    let err = trace(&[f32s(&[2])], |a| vec![&a[0] + &outside[0]]).unwrap_err();
    assert!(!err.to_string().is_empty());
}

#[test]
fn vmap_sequential_calls_the_callback_once_per_element() {
    let calls = Arc::new(AtomicUsize::new(0));
    let f = counting_square(&calls);
    let program = trace(&[f32s(&[2])], |a| {
        pure_callback(f, &[f32s(&[2])], &[&a[0]], Some(VmapMethod::Sequential))
    })
    .unwrap();
    let batched = vmap(&program, &[Some(0)], &[0], 3).unwrap();
    let x = arr(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let out = eval_closed(&batched, &[x]).unwrap();
    assert_eq!(out[0].dims(), [3, 2]);
    assert_eq!(
        out[0].values().into_raw_vec_and_offset().0,
        [1.0, 4.0, 9.0, 16.0, 25.0, 36.0]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[test]
fn vmap_expand_dims_calls_the_callback_once_on_the_whole_batch() {
    let calls = Arc::new(AtomicUsize::new(0));
    let f = counting_square(&calls);
    let program = trace(&[f32s(&[2])], |a| {
        pure_callback(f, &[f32s(&[2])], &[&a[0]], Some(VmapMethod::ExpandDims))
    })
    .unwrap();
    let batched = vmap(&program, &[Some(1)], &[0], 3).unwrap();
    let x = arr(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let out = eval_closed(&batched, &[x]).unwrap();
    assert_eq!(
        out[0].values().into_raw_vec_and_offset().0,
        [1.0, 16.0, 4.0, 25.0, 9.0, 36.0]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn vmap_without_a_vmap_method_and_of_ordered_io_callbacks_is_refused() {
    let plain = trace(&[f32s(&[2])], |a| {
        pure_callback(|x: &[Array]| Ok(x.to_vec()), &[f32s(&[2])], &[&a[0]], None)
    })
    .unwrap();
    let err = vmap(&plain, &[Some(0)], &[0], 3).unwrap_err().to_string();
    assert!(err.contains("vmap_method"), "{err}");
    let ordered = trace(&[f32s(&[2])], |a| {
        io_callback(|x: &[Array]| Ok(x.to_vec()), &[f32s(&[2])], &[&a[0]], true)
    })
    .unwrap();
    let err = vmap(&ordered, &[Some(0)], &[0], 3).unwrap_err().to_string();
    assert!(err.contains("ordered io_callback"), "{err}");
}

#[test]
fn differentiating_pure_and_io_callbacks_is_refused_as_in_jax() {
    let pure = trace(&[f32s(&[2])], |a| {
        pure_callback(|x: &[Array]| Ok(x.to_vec()), &[f32s(&[2])], &[&a[0]], None)
    })
    .unwrap();
    let err = jvp(&pure).unwrap_err().to_string();
    assert!(err.contains("Pure callbacks do not support JVP"), "{err}");
    let err = vjp(&pure).unwrap_err().to_string();
    assert!(err.contains("not differentiable"), "{err}");
    let io = trace(&[f32s(&[2])], |a| {
        io_callback(|x: &[Array]| Ok(x.to_vec()), &[f32s(&[2])], &[&a[0]], false)
    })
    .unwrap();
    let err = jvp(&io).unwrap_err().to_string();
    assert!(err.contains("IO callbacks do not support JVP"), "{err}");
}

#[test]
fn debug_callbacks_run_on_the_primals_under_differentiation() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let program = trace(&[f32s(&[2])], |a| {
        let c = c.clone();
        debug_callback(
            move |_: &[Array]| {
                c.fetch_add(1, Ordering::SeqCst);
            },
            &[&a[0]],
        );
        vec![a[0].sin()]
    })
    .unwrap();
    let derivative = jvp(&program).unwrap();
    let x = arr(&[2], &[0.0, 1.0]);
    let t = arr(&[2], &[1.0, 1.0]);
    let out = eval_closed(&derivative, &[x, t]).unwrap();
    assert_eq!(out[1].values().into_raw_vec_and_offset().0[0], 1.0);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn callbacks_print_as_jax_prints_them_and_parsing_them_back_is_refused() {
    let program = trace(&[f32s(&[4])], |a| {
        let y = pure_callback(
            |x: &[Array]| Ok(x.to_vec()),
            &[f32s(&[4])],
            &[&a[0]],
            Some(VmapMethod::Sequential),
        );
        let z = io_callback(|x: &[Array]| Ok(x.to_vec()), &[f32s(&[4])], &[&y[0]], true);
        vec![z[0].clone()]
    })
    .unwrap();
    let text = print_closed(&program, 0);
    for piece in [
        "= pure_callback[",
        "callback=<tessera host callback ",
        "result_avals=(ShapedArray(float32[4]),)",
        "sharding=None",
        "vmap_method=sequential",
        "= io_callback[",
        "ordered=True",
    ] {
        assert!(text.contains(piece), "{piece} in {text}");
    }
    let err = parse_closed(&text).unwrap_err();
    assert!(
        matches!(&err, IrError::Parse { message, .. } if message.contains("cannot be recovered from text")),
        "{err:?}"
    );
}
