//! `vmap` with JAX's `spmd_axis_name` (`tessera_ir::vmap_spmd`, `trace::vmap_spmd_call`): the
//! batch dimension of the program's sharding constraints is split over the named mesh axes
//! (also inside loop bodies), explicit-sharding types of batched arguments get the axes on
//! their batch dimension and the sharding rules carry them through, a batched argument keeps
//! its reduced and unreduced axes, the values equal a loop over the batch, and misuse (an axis
//! named twice, one the argument already uses, a batch the axis does not divide) is a typed
//! error.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeSet;

use tessera_ir::prim::ConstraintParams;
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::{fori_loop, trace, use_mesh, vmap_spmd_call};
use tessera_ir::{Array, ClosedJaxpr, DType, Prim, ShapedArray, interp, vmap, vmap_spmd};
use tessera_sharding::{AbstractMesh, PartitionSpec};

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

fn spec(text: &str) -> PartitionSpec {
    PartitionSpec::parse(&format!("P{text}")).unwrap()
}

fn mesh() -> AbstractMesh {
    AbstractMesh::auto(&[("pp", 2), ("dp", 2), ("tp", 2)]).unwrap()
}

/// Every sharding constraint of `program` (loop bodies included), as its spec.
fn constraint_specs(program: &ClosedJaxpr) -> Vec<PartitionSpec> {
    let text = print_closed(program, 0);
    let mut out = Vec::new();
    collect(&program.jaxpr, &mut out);
    assert!(!out.is_empty() || !text.contains("sharding_constraint"));
    out
}

fn collect(jaxpr: &tessera_ir::Jaxpr, out: &mut Vec<PartitionSpec>) {
    for eqn in &jaxpr.eqns {
        if eqn.prim == Prim::ShardingConstraint {
            out.push(ConstraintParams::read(&eqn.params).unwrap().spec);
        }
        for inner in eqn.params.jaxprs() {
            collect(&inner.jaxpr, out);
        }
    }
}

fn values(shape: &[i64], seed: f64) -> Array {
    let n: i64 = shape.iter().product();
    let v = (0..n).map(|i| (i as f64 * 0.41 + seed).sin()).collect();
    Array::new(DType::F32, shape, v).unwrap()
}

#[test]
fn constraints_get_the_spmd_axis_at_the_batch_dimension() {
    // f(x: f32[8,4]) = tanh(with_sharding_constraint(x, P('tp'))).
    let program = use_mesh(&mesh(), || {
        trace(&[f32(&[8, 4])], |a| {
            vec![a[0].with_sharding(&spec("('tp',)")).tanh()]
        })
    })
    .unwrap();
    for (axis, spmd, want) in [
        (0, vec!["dp"], "('dp', 'tp')"),
        (1, vec!["dp"], "('tp', 'dp')"),
        (2, vec!["dp"], "('tp', None, 'dp')"),
        (0, vec!["pp", "dp"], "(('pp', 'dp'), 'tp')"),
        (0, vec![], "(None, 'tp')"),
    ] {
        let batched = vmap_spmd(&program, &[Some(axis)], &[axis], 4, &spmd).unwrap();
        assert_eq!(constraint_specs(&batched), [spec(want)], "{axis} {spmd:?}");
        // The batched program prints, parses back and equals the loop over the batch.
        let text = print_closed(&batched, 0);
        assert_eq!(print_closed(&parse_closed(&text).unwrap(), 0), text);
    }
    // Plain vmap (JAX's spmd_axis_name=None) leaves the batch dimension unsplit.
    let plain = vmap(&program, &[Some(0)], &[0], 4).unwrap();
    assert_eq!(constraint_specs(&plain), [spec("(None, 'tp')")]);
    // Values: the constraint is the identity, so the batch equals tanh of each element.
    let batched = vmap_spmd(&program, &[Some(0)], &[0], 4, &["dp"]).unwrap();
    let xs = values(&[4, 8, 4], 0.3);
    let got = interp::eval_closed(&batched, std::slice::from_ref(&xs)).unwrap();
    let want: Vec<f64> = xs
        .to_vec()
        .iter()
        .map(|v| (*v as f32).tanh().into())
        .collect();
    for (g, w) in got[0].to_vec().iter().zip(&want) {
        assert!((g - w).abs() < 1e-6, "{g} vs {w}");
    }
}

#[test]
fn constraints_in_a_loop_body_get_the_spmd_axis_too() {
    let program = use_mesh(&mesh(), || {
        trace(&[f32(&[8])], |a| {
            fori_loop(0, 3, &[], &[&a[0]], |_, _, c| {
                vec![(&c[0] * 2.0).with_sharding(&spec("('tp',)"))]
            })
        })
    })
    .unwrap();
    let batched = vmap_spmd(&program, &[Some(0)], &[0], 2, &["dp"]).unwrap();
    let specs = constraint_specs(&batched);
    assert!(!specs.is_empty());
    assert!(
        specs.iter().all(|s| *s == spec("('dp', 'tp')")),
        "{specs:?}"
    );
    let xs = values(&[2, 8], 1.0);
    let got = interp::eval_closed(&batched, std::slice::from_ref(&xs)).unwrap();
    for (g, x) in got[0].to_vec().iter().zip(xs.to_vec()) {
        assert_eq!(*g, x * 8.0);
    }
}

fn typed(shape: &[i64], text: &str) -> ShapedArray {
    f32(shape).with_explicit(&spec(text)).unwrap()
}

fn out_types(program: &ClosedJaxpr) -> Vec<String> {
    let outs = program.jaxpr.out_avals();
    outs.iter().map(ToString::to_string).collect()
}

#[test]
fn explicit_types_get_the_spmd_axis_on_the_batch_dimension() {
    // f(x: f32[8@pp,4], w: f32[4,8@tp]) = (sum(sin(x) @ w, 1), sin(x) @ w, x + 1).
    let program = use_mesh(&mesh(), || {
        trace(
            &[typed(&[8, 4], "('pp',)"), typed(&[4, 8], "(None, 'tp')")],
            |a| {
                let y = (&a[0].sin() * 2.0).matmul(&a[1]);
                vec![y.sum(&[1]), y, &a[0] + 1.0]
            },
        )
    })
    .unwrap();
    // JAX: `vmap(f, in_axes=(0, None), out_axes=(0, 1, 2), spmd_axis_name='dp')`.
    let batched = use_mesh(&mesh(), || {
        vmap_spmd(&program, &[Some(0), None], &[0, 1, 2], 4, &["dp"])
    })
    .unwrap();
    let ins: Vec<String> = batched
        .jaxpr
        .in_avals()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(ins, ["f32[4@dp,8@pp,4]", "f32[4,8@tp]"]);
    assert_eq!(
        out_types(&batched),
        ["f32[4@dp,8@pp]", "f32[8@pp,4@dp,8@tp]", "f32[8@pp,4,4@dp]"]
    );
    use_mesh(&mesh(), || tessera_ir::verify(&batched)).unwrap();
    let text = print_closed(&batched, 0);
    let back = parse_closed(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(print_closed(&back, 0), text);
    // The values are f's per batch element.
    let xs = values(&[4, 8, 4], 0.2);
    let w = values(&[4, 8], 2.0);
    let got = interp::eval_closed(&batched, &[xs.clone(), w.clone()]).unwrap();
    for b in 0..4 {
        let x = Array::new(
            DType::F32,
            &[8, 4],
            xs.to_vec()[b * 32..(b + 1) * 32].to_vec(),
        );
        let one = interp::eval_closed(&program, &[x.unwrap(), w.clone()]).unwrap();
        assert_eq!(
            &got[0].to_vec()[b * 8..(b + 1) * 8],
            one[0].to_vec().as_slice()
        );
    }
}

#[test]
fn the_trace_api_vmaps_with_an_spmd_axis() {
    let element = use_mesh(&mesh(), || {
        trace(&[typed(&[8], "('pp',)")], |a| vec![a[0].exp()])
    })
    .unwrap();
    let outer = use_mesh(&mesh(), || {
        trace(&[typed(&[2, 8], "('tp', 'pp')")], |a| {
            vmap_spmd_call(&element, &[Some(0)], &[0], &["tp"], &[&a[0]])
        })
    })
    .unwrap();
    assert_eq!(out_types(&outer), ["f32[2@tp,8@pp]"]);
}

#[test]
fn a_batched_argument_keeps_its_reduced_and_unreduced_axes() {
    let mut x = typed(&[8, 4], "('pp',)");
    x.set_reduced_unreduced(BTreeSet::new(), BTreeSet::from(["tp".to_owned()]));
    let mut r = f32(&[4]);
    r.set_reduced_unreduced(BTreeSet::from(["dp".to_owned()]), BTreeSet::new());
    let program = use_mesh(&mesh(), || trace(&[x, r], |a| vec![&a[0] + &a[0], -&a[1]])).unwrap();
    assert_eq!(out_types(&program), ["f32[8@pp,4]{U:tp}", "f32[4]{R:dp}"]);
    let batched = use_mesh(&mesh(), || vmap(&program, &[Some(0), Some(0)], &[0, 0], 2)).unwrap();
    let ins: Vec<String> = batched
        .jaxpr
        .in_avals()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(ins, ["f32[2,8@pp,4]{U:tp}", "f32[2,4]{R:dp}"]);
    assert_eq!(
        out_types(&batched),
        ["f32[2,8@pp,4]{U:tp}", "f32[2,4]{R:dp}"]
    );
}

#[test]
fn unary_operations_keep_reduced_axes_and_refuse_unreduced_operands_as_jax_does() {
    let mut x = typed(&[8, 4], "('pp',)");
    x.set_reduced_unreduced(BTreeSet::new(), BTreeSet::from(["tp".to_owned()]));
    let mut r = f32(&[4]);
    r.set_reduced_unreduced(BTreeSet::from(["dp".to_owned()]), BTreeSet::new());
    let kept = use_mesh(&mesh(), || trace(&[r], |a| vec![a[0].sin(), -&a[0]])).unwrap();
    assert_eq!(out_types(&kept), ["f32[4]{R:dp}", "f32[4]{R:dp}"]);
    for f in [
        (|t: &tessera_ir::trace::Tensor| t.sin()) as fn(&tessera_ir::trace::Tensor) -> _,
        |t| -t,
        |t| t.exp(),
    ] {
        let err = use_mesh(&mesh(), || {
            trace(std::slice::from_ref(&x), |a| vec![f(&a[0])])
        })
        .expect_err("an unreduced operand of a unary operation");
        let text = err.to_string();
        assert!(
            matches!(err, tessera_ir::IrError::Sharding { .. }),
            "{text}"
        );
        assert!(text.contains("unreduced over [\"tp\"]"), "{text}");
        assert!(text.contains("psum"), "{text}");
    }
}

#[test]
fn linear_operations_follow_jax_s_reduced_and_unreduced_rules() {
    let mut x = typed(&[8, 4], "('pp',)");
    x.set_reduced_unreduced(BTreeSet::new(), BTreeSet::from(["tp".to_owned()]));
    let mut rt = f32(&[8, 4]);
    rt.set_reduced_unreduced(BTreeSet::from(["tp".to_owned()]), BTreeSet::new());
    let program = use_mesh(&mesh(), || {
        trace(&[x.clone(), rt.clone()], |a| {
            let scaled = &a[0] * &a[1];
            vec![
                scaled.clone(),
                scaled.reshape(&[2, 4, 4]),
                scaled.sum(&[1]),
                tessera_ir::trace::Tensor::slice_axis(&scaled, 0, 0, 4),
            ]
        })
    })
    .unwrap();
    assert_eq!(
        out_types(&program),
        [
            "f32[8@pp,4]{U:tp}",
            "f32[2@pp,4,4]{U:tp}",
            "f32[8@pp]{U:tp}",
            "f32[4@pp,4]{U:tp}"
        ]
    );
    let refused = |f: fn(&[tessera_ir::trace::Tensor]) -> tessera_ir::trace::Tensor,
                   avals: &[ShapedArray]| {
        let err = use_mesh(&mesh(), || trace(avals, |a| vec![f(a)]))
            .expect_err("refused")
            .to_string();
        assert!(err.contains("mul") || err.contains("dot_general"), "{err}");
        err
    };
    // Two unreduced operands, and an unreduced one times a value not reduced alike.
    let err = refused(|a| &a[0] * &a[0], std::slice::from_ref(&x));
    assert!(err.contains("at most one"), "{err}");
    let err = refused(|a| &a[0] * 2.0, std::slice::from_ref(&x));
    assert!(err.contains("reduced over exactly those axes"), "{err}");
    let err = refused(|a| a[0].matmul(&a[1]), &[x.clone(), f32(&[4, 2])]);
    assert!(err.contains("cannot take unreduced"), "{err}");
}

/// JAX 0.10.2's rules for the rest (checked with JAX itself): `transpose`,
/// `broadcast_in_dim` and `convert_element_type` keep the unreduced axes; `sub`, `div` and
/// comparisons have no rule and refuse an unreduced operand; `add` refuses one unreduced and
/// one plain operand. Each of these dropped the unreduced axes, typing a partial sum as a value.
#[test]
fn every_primitive_keeps_or_refuses_unreduced_axes_as_jax_does() {
    let mut x = typed(&[8, 4], "('pp',)");
    x.set_reduced_unreduced(BTreeSet::new(), BTreeSet::from(["tp".to_owned()]));
    let program = use_mesh(&mesh(), || {
        trace(std::slice::from_ref(&x), |a| {
            vec![
                a[0].transpose(&[1, 0]),
                a[0].broadcast_in_dim(&[2, 8, 4], &[1, 2]),
                a[0].astype(DType::F64),
                &a[0] + &a[0],
            ]
        })
    })
    .unwrap();
    assert_eq!(
        out_types(&program),
        [
            "f32[4,8@pp]{U:tp}",
            "f32[2,8@pp,4]{U:tp}",
            "f64[8@pp,4]{U:tp}",
            "f32[8@pp,4]{U:tp}"
        ]
    );
    let refused: [fn(&tessera_ir::trace::Tensor) -> tessera_ir::trace::Tensor; 5] = [
        |t| t - t,
        |t| t / 2.0,
        |t| t - 1.0,
        |t| t.lt(&t.clone()),
        |t| t + 1.0,
    ];
    for (k, f) in refused.into_iter().enumerate() {
        let err = use_mesh(&mesh(), || {
            trace(std::slice::from_ref(&x), |a| vec![f(&a[0])])
        })
        .expect_err("an unreduced operand JAX refuses")
        .to_string();
        assert!(err.contains("unreduced"), "case {k}: {err}");
    }
}

fn vmap_error(program: &ClosedJaxpr, size: i64, spmd: &[&str]) -> String {
    let in_axes = vec![Some(0); program.jaxpr.invars.len()];
    let out_axes = vec![0; program.jaxpr.outvars.len()];
    match use_mesh(&mesh(), || {
        vmap_spmd(program, &in_axes, &out_axes, size, spmd)
    }) {
        Ok(p) => panic!("expected an error, got\n{}", print_closed(&p, 0)),
        Err(e) => e.to_string(),
    }
}

#[test]
fn misuse_of_the_spmd_axis_is_a_typed_error() {
    let split = use_mesh(&mesh(), || {
        trace(&[typed(&[8, 4], "('pp',)")], |a| vec![a[0].exp()])
    })
    .unwrap();
    let err = vmap_error(&split, 4, &["pp"]);
    assert!(err.contains("already uses mesh axis 'pp'"), "{err}");
    let err = vmap_error(&split, 4, &["dp", "dp"]);
    assert!(err.contains("names axis 'dp' twice"), "{err}");
    // The constraint's batch dimension must divide over the axis, as any constraint's.
    let constrained = use_mesh(&mesh(), || {
        trace(&[f32(&[8])], |a| vec![a[0].with_sharding(&spec("('tp',)"))])
    })
    .unwrap();
    let err = vmap_error(&constrained, 3, &["dp"]);
    assert!(err.contains("divide"), "{err}");
    // An axis the constraint's mesh lacks is refused with the constraint's own error.
    let err = vmap_error(&constrained, 4, &["data"]);
    assert!(err.contains("'data'"), "{err}");
}
