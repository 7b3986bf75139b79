//! A failed operation inside a trace (a nested function, a loop, a transform) makes `trace`
//! return that error, while user code that indexes the failed operation's results keeps
//! running; a `Tensor` captured from another trace is a clear error for every kind of
//! operation.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::prim::{GatherScatterMode, ReduceOp};
use tessera_ir::trace::{
    Tensor, checkpoint, jit, trace, treduce, value_and_grad_call, vjp_call, vmap_call,
};
use tessera_ir::{DType, IrError, ShapedArray};

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

/// Traces `f` on one `[2, 3]` argument and returns the error message it must give.
fn error_of(f: impl FnOnce(&Tensor) -> Vec<Tensor>) -> String {
    match trace(&[f32(&[2, 3])], |a| f(&a[0])) {
        Ok(p) => panic!(
            "expected an error, traced\n{}",
            tessera_ir::text::print_closed(&p, 0)
        ),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_failed_loop_body_is_an_error_not_a_panic_on_its_second_result() {
    let message = error_of(|x| {
        let outs = treduce(&[], &[x], 0, "1f1b", &[], |_, xs| {
            let bad = xs[0].reshape(&[7]); // 3 elements do not reshape to 7
            vec![bad.clone(), xs[0].clone()]
        });
        vec![&outs[0].sum(&[0]) + &outs[1].sum(&[0])]
    });
    assert!(message.contains("in the loop body"), "{message}");
}

#[test]
fn a_malformed_loop_still_gives_as_many_results_as_its_body() {
    let message = error_of(|x| {
        let outs = treduce(
            &[],
            &[x],
            5,
            "1f1b",
            &[ReduceOp::Add, ReduceOp::Add],
            |_, xs| vec![xs[0].clone(), xs[0].tanh()],
        );
        vec![outs[1].clone()]
    });
    assert!(message.contains("axis 5 is out of range"), "{message}");
}

#[test]
fn a_failed_nested_function_gives_all_its_results() {
    let message = error_of(|x| {
        let outs = jit("three", &[x], |a| {
            let bad = a[0].matmul(&a[0]); // [2, 3] @ [2, 3] does not contract
            vec![bad, a[0].clone(), a[0].tanh()]
        });
        assert_eq!(outs.len(), 3);
        vec![outs[2].clone()]
    });
    assert!(message.contains("nested function `three`"), "{message}");
    let message = error_of(|x| {
        let outs = checkpoint(&[x], |a| vec![a[0].reshape(&[5]), a[0].clone()]);
        vec![outs[1].clone()]
    });
    assert!(message.contains("checkpointed"), "{message}");
}

#[test]
fn failed_transforms_give_their_expected_results() {
    // A program of two results whose gradient cannot be taken (not a scalar loss).
    let two = trace(&[f32(&[2, 3])], |a| vec![a[0].tanh(), a[0].clone()]).unwrap();
    let message = error_of(|x| {
        let outs = value_and_grad_call(&two, &[0], &[x]);
        vec![outs[1].clone()]
    });
    assert!(message.contains("value_and_grad"), "{message}");
    let message = error_of(|x| {
        let outs = vmap_call(&two, &[None], &[0, 0], &[x]);
        vec![outs[1].clone()]
    });
    assert!(message.contains("no argument is batched"), "{message}");
    // Cotangents of the wrong type: the VJP program refuses its operands.
    let message = error_of(|x| {
        let outs = vjp_call(&two, &[x], &[&x.reshape(&[3, 2]), x]);
        vec![outs[0].clone()]
    });
    assert!(!message.is_empty());
}

#[test]
fn every_kind_of_operation_on_a_captured_tensor_is_an_error() {
    type Op = fn(&Tensor, &Tensor) -> Tensor;
    let ops: [(&str, Op); 8] = [
        ("unary", |w, _| w.tanh()),
        ("binary", |w, x| x + w),
        ("reduction", |w, _| w.sum(&[0])),
        ("reshape", |w, _| w.reshape(&[3, 2])),
        ("dot", |w, x| x.matmul(&w.transpose(&[1, 0]))),
        ("gather", |w, _| {
            let ids = w.iota_along(&[2], 0);
            w.take_with(&ids, 0, GatherScatterMode::Clip)
        }),
        ("nullary", |w, _| w.iota_along(&[4], 0).astype(DType::F32)),
        ("convert", |w, _| w.astype(DType::F64)),
    ];
    for (kind, op) in ops {
        let result = trace(&[f32(&[2, 3])], |outer| {
            let w = &outer[0];
            let inner = jit("inner", &[w], |a| {
                let _ = op(w, &a[0]); // `w` is the outer trace's, captured
                vec![a[0].tanh()]
            });
            vec![inner[0].clone()]
        });
        let Err(IrError::Type { message, .. }) = &result else {
            panic!("{kind}: expected a type error, got {result:?}");
        };
        assert!(
            message.contains("Tensor of the outer trace") || message.contains("another trace"),
            "{kind}: {message}"
        );
    }
}
