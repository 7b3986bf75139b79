//! `sort`'s parameters are read once, by `SortParams::read`, for every rule: `is_stable`, which
//! JAX always prints, must be there (no rule picks a default of its own), and the interpreter,
//! batching and the derivative all accept what the shape rule accepts.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::interp::eval_closed;
use tessera_ir::prim::SortParams;
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::{Array, ClosedJaxpr, DType, ParamValue, Params, vjp, vmap};

fn sort_program(params: &str) -> tessera_ir::Result<ClosedJaxpr> {
    parse_closed(&format!(
        "{{ lambda ; a:f32[2,3] b:f32[2,3]. let c:f32[2,3] d:f32[2,3] = sort[{params}] a b in (c, d) }}"
    ))
    .and_then(|p| tessera_ir::verify(&p).map(|()| p))
}

fn error_of(params: &str) -> String {
    sort_program(params)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

#[test]
fn a_sort_without_is_stable_is_refused() {
    let err = error_of("dimension=1 num_keys=1");
    assert!(err.contains("is_stable"), "{err:?}");
    let err = error_of("dimension=1 is_stable=1 num_keys=1");
    assert!(
        err.contains("is_stable") && err.contains("True or False"),
        "{err:?}"
    );
    let read = SortParams::read(
        &Params::new()
            .with("dimension", ParamValue::Int(0))
            .with("num_keys", ParamValue::Int(1)),
        2,
    );
    assert!(read.is_err());
}

#[test]
fn sort_params_normalise_the_dimension_and_keep_is_stable() {
    let params = Params::new()
        .with("dimension", ParamValue::Int(-1))
        .with("is_stable", ParamValue::Bool(false))
        .with("num_keys", ParamValue::Int(2));
    assert_eq!(
        SortParams::read(&params, 3).unwrap(),
        SortParams {
            dimension: 2,
            num_keys: 2,
            is_stable: false
        }
    );
}

#[test]
fn an_unstable_sort_runs_batches_and_differentiates_keeping_its_flag() {
    let program = sort_program("dimension=1 is_stable=False num_keys=1").unwrap();
    let keys = Array::new(DType::F32, &[2, 3], vec![3.0, 1.0, 2.0, 0.0, -1.0, 5.0]).unwrap();
    let vals = Array::new(
        DType::F32,
        &[2, 3],
        vec![10.0, 11.0, 12.0, 13.0, 14.0, 15.0],
    )
    .unwrap();
    let out = eval_closed(&program, &[keys.clone(), vals.clone()]).unwrap();
    assert_eq!(out[0].to_vec(), vec![1.0, 2.0, 3.0, -1.0, 0.0, 5.0]);
    assert_eq!(out[1].to_vec(), vec![11.0, 12.0, 10.0, 14.0, 13.0, 15.0]);
    let batched = vmap(&program, &[Some(0), Some(0)], &[0, 0], 2).unwrap();
    let text = print_closed(&batched, 0);
    assert!(text.contains("is_stable=False"), "{text}");
    let grad = vjp(&program).unwrap();
    assert!(print_closed(&grad, 0).contains("is_stable=False"));
}
