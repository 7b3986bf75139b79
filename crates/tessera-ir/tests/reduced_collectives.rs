//! JAX's reduced/unreduced collectives inside `shard_map` on a 2×4 mesh (8 devices):
//! `reduced_vary_cast_p` (Reduced -> Varying), `all_gather_reduced` (Varying -> Reduced),
//! `unreduced_reduce_scatter` (`unreduced_psum_scatter`, Unreduced -> Varying), `pcast`'s
//! dispatch, and the asynchronous starts of `psum_invariant`, `unreduced_psum`,
//! `all_gather_reduced` and `unreduced_reduce_scatter`. Each prints as JAX prints it and parses
//! back; the SPMD interpreter gives what each means (the composition of plain collectives);
//! gradients equal the compositions' (and finite differences); misuse gives JAX's errors.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::interp::eval_closed;
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::{PcastTo, Tensor, shard_map_program};
use tessera_ir::{Array, ClosedJaxpr, DType, Prim, ShapedArray, verify, vjp, vmap};
use tessera_sharding::{AbstractMesh, PartitionSpec};

/// A traced `shard_map` body.
type Body = fn(&Tensor) -> Tensor;

/// `shard_map(f)` over a 2×4 mesh (`x`, `y`) on an f64 `[4, 16]` array laid out by
/// `P('x', 'y')` (blocks of `[2, 4]`), one result laid out by `out_spec`.
fn try_program(
    out_spec: &str,
    f: impl FnOnce(&Tensor) -> Tensor,
) -> tessera_ir::Result<ClosedJaxpr> {
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 4)]).unwrap();
    shard_map_program(
        &mesh,
        &[PartitionSpec::parse("P('x', 'y')").unwrap()],
        &[PartitionSpec::parse(out_spec).unwrap()],
        &[ShapedArray::new(DType::F64, &[4, 16])],
        |a| vec![f(&a[0])],
    )
}

fn program(out_spec: &str, f: impl FnOnce(&Tensor) -> Tensor) -> ClosedJaxpr {
    let p = try_program(out_spec, f).unwrap_or_else(|e| panic!("{e}"));
    verify(&p).unwrap();
    p
}

fn error(f: impl FnOnce(&Tensor) -> Tensor) -> String {
    match try_program("P('x', 'y')", f) {
        Ok(p) => panic!("expected an error, got\n{}", print_closed(&p, 0)),
        Err(e) => e.to_string(),
    }
}

fn input(seed: f64) -> Array {
    Array::new(
        DType::F64,
        &[4, 16],
        (0..64)
            .map(|v| (f64::from(v) * 0.61 + seed).sin())
            .collect(),
    )
    .unwrap()
}

fn assert_same(what: &str, got: &[Array], want: &[Array]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.shape(), w.shape(), "{what}");
        for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
            assert!(
                (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
                "{what}: {a} vs {b}"
            );
        }
    }
}

/// Both programs give the same values and, for the same result cotangent, the same gradient.
fn assert_equivalent(what: &str, a: &ClosedJaxpr, b: &ClosedJaxpr) {
    let x = input(0.2);
    assert_same(
        what,
        &eval_closed(a, std::slice::from_ref(&x)).unwrap(),
        &eval_closed(b, std::slice::from_ref(&x)).unwrap(),
    );
    let ct = a.jaxpr.out_avals()[0].clone();
    let ct = Array::new(
        DType::F64,
        &ct.shape,
        (0..ct.size()).map(|v| (v as f64 * 0.23).cos()).collect(),
    )
    .unwrap();
    let (ga, gb) = (vjp(a).unwrap(), vjp(b).unwrap());
    verify(&ga).unwrap();
    let args = [x, ct];
    assert_same(
        &format!("{what} (gradient)"),
        &eval_closed(&ga, &args).unwrap(),
        &eval_closed(&gb, &args).unwrap(),
    );
}

/// The primitives of the body of the (single) `shard_map` of `p`.
fn body_prims(p: &ClosedJaxpr) -> Vec<Prim> {
    let sm = tessera_ir::prim::ShardMapParams::read(&p.jaxpr.eqns[0].params).unwrap();
    sm.body.jaxpr.eqns.iter().map(|e| e.prim).collect()
}

#[test]
fn each_new_primitive_prints_as_jax_and_parses_back() {
    let p = program("P('x', 'y')", |a| {
        let gathered = a.all_gather_reduced("y", 1, true);
        let scattered = a
            .cos()
            .vary_unreduced_cast(&["y"])
            .unreduced_psum_scatter("y", 1, true);
        let cast = a.psum(&["x"]).preduced(&["x"]).reduced_vary_cast(&["x"]);
        let summed = a.psum_invariant_start(&["y"]).done();
        let owed = a
            .sin()
            .vary_unreduced_cast(&["x"])
            .unreduced_psum_start(&["x"])
            .done();
        let gathered_late = a.all_gather_reduced_start("x", 0, false).done();
        let scattered_late = a
            .vary_unreduced_cast(&["y"])
            .unreduced_psum_scatter_start("y", 1, false)
            .done();
        let sums = [
            Tensor::slice_axis(&gathered, 1, 0, 4),
            scattered.all_gather("y", 1, true),
            cast,
            &summed + &owed,
            gathered_late.sum(&[0]),
            scattered_late.broadcast_in_dim(&[2, 4], &[0]),
        ];
        sums.iter().skip(1).fold(sums[0].clone(), |acc, t| &acc + t)
    });
    let text = print_closed(&p, 0);
    for printed in [
        ":f64[2,16]{V:x, R:y} = all_gather_reduced[\n            all_gather_dimension=1\n            \
         axis_name=('y',)\n            axis_size=4\n            tiled=True\n          ] c",
        ":f64[2,4]{V:x, U:y} = vary_unreduced_cast_p[axes=('y',)]",
        ":f64[2,1]{V:(x,y)} = unreduced_reduce_scatter[\n            axis_name=('y',)\n            \
         axis_size=4\n            scatter_dimension=1\n            tiled=True\n",
        ":f64[2,4]{V:y, R:x} = preduced[axes=('x',)]",
        ":f64[2,4]{V:(x,y)} = reduced_vary_cast_p[axes=('x',)]",
        ":Todo[f64[2,4]{V:x}] = psum_invariant_start[axes=('y',)]",
        ":Todo[f64[2,4]{V:y}] = unreduced_psum_start[axes=('x',)]",
        ":Todo[f64[2,2,4]{V:y, R:x}] = all_gather_reduced_start[\n            \
         all_gather_dimension=0\n            axis_name=('x',)\n            axis_size=2\n            \
         tiled=False\n",
        ":Todo[f64[2]{V:(x,y)}] = unreduced_reduce_scatter_start[\n            \
         axis_name=('y',)\n            axis_size=4\n            scatter_dimension=1\n            \
         tiled=False\n",
        " = psum_done ",
        " = all_gather_done ",
        " = reduce_scatter_done ",
    ] {
        assert!(text.contains(printed), "{printed} not in\n{text}");
    }
    let again = parse_closed(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(again, p);
    assert_eq!(print_closed(&again, 0), text);
    let x = input(0.7);
    assert_same(
        "parsed",
        &eval_closed(&again, std::slice::from_ref(&x)).unwrap(),
        &eval_closed(&p, std::slice::from_ref(&x)).unwrap(),
    );
}

#[test]
fn unreduced_psum_scatter_is_psum_scatter_of_the_summed_partials() {
    // Dimension 0 of a block has 2 rows: the block stacked twice has 4, one per device of `y`.
    let rows = |a: &Tensor, dim: i64| match dim {
        0 => a.concatenate(&[a], 0),
        _ => a.clone(),
    };
    for (dim, tiled) in [(1, true), (0, true), (1, false)] {
        let reshape = |t: Tensor| match tiled {
            true => t.all_gather("y", dim, true),
            false => t.all_gather("y", dim, false),
        };
        let unreduced = program("P('x', 'y')", |a| {
            reshape(
                rows(a, dim)
                    .sin()
                    .vary_unreduced_cast(&["y"])
                    .unreduced_psum_scatter("y", dim, tiled),
            )
            .exp()
        });
        let plain = program("P('x', 'y')", |a| {
            reshape(rows(a, dim).sin().psum_scatter("y", dim, tiled)).exp()
        });
        assert_equivalent(&format!("dim {dim} tiled {tiled}"), &unreduced, &plain);
        assert!(body_prims(&unreduced).contains(&Prim::UnreducedReduceScatter));
    }
}

#[test]
fn all_gather_reduced_is_the_invariant_gather() {
    for (dim, tiled) in [(1, true), (0, false), (-1, false)] {
        let reduced = program("P('x')", |a| a.all_gather_reduced("y", dim, tiled).sin());
        let invariant = program("P('x')", |a| a.all_gather_invariant("y", dim, tiled).sin());
        assert_equivalent(&format!("dim {dim} tiled {tiled}"), &reduced, &invariant);
        let gathered = reduced.jaxpr.out_avals()[0].clone();
        assert_eq!(gathered, invariant.jaxpr.out_avals()[0]);
    }
    // Reduced, then used with a varying value: cast with reduced_vary_cast_p, and the gradient
    // sums the cotangent once.
    let reduced = program("P('x', 'y')", |a| {
        &Tensor::slice_axis(&a.all_gather_reduced("y", 1, true).tanh(), 1, 4, 8) * a
    });
    let plain = program("P('x', 'y')", |a| {
        &Tensor::slice_axis(&a.all_gather_invariant("y", 1, true).tanh(), 1, 4, 8) * a
    });
    assert_equivalent("used with a varying value", &reduced, &plain);
}

#[test]
fn reduced_vary_cast_is_the_identity_and_its_gradient_sums_once() {
    let explicit = program("P('x', 'y')", |a| {
        &a.psum(&["y"])
            .preduced(&["y"])
            .sin()
            .reduced_vary_cast(&["y"])
            * a
    });
    let implicit = program("P('x', 'y')", |a| {
        &a.psum(&["y"]).preduced(&["y"]).sin() * a
    });
    let plain = program("P('x', 'y')", |a| &a.psum(&["y"]).sin() * a);
    assert_equivalent("explicit cast", &explicit, &plain);
    assert_equivalent("implicit cast", &implicit, &plain);
    // The tracing API casts a reduced operand of a local operation as JAX does.
    assert!(body_prims(&implicit).contains(&Prim::ReducedVaryCast));
    assert!(!body_prims(&plain).contains(&Prim::ReducedVaryCast));
    // Finite differences of <ct, f(x)> along a direction agree with the gradient.
    let g = vjp(&explicit).unwrap();
    let x = input(0.4);
    let d = input(2.5);
    let ct = input(1.1);
    let grad = &eval_closed(&g, &[x.clone(), ct.clone()]).unwrap()[0];
    let f = |t: f64| {
        let moved: Vec<f64> = x
            .to_vec()
            .iter()
            .zip(d.to_vec())
            .map(|(a, b)| a + t * b)
            .collect();
        let moved = Array::new(DType::F64, &[4, 16], moved).unwrap();
        let y = &eval_closed(&explicit, &[moved]).unwrap()[0];
        y.to_vec()
            .iter()
            .zip(ct.to_vec())
            .map(|(a, b)| a * b)
            .sum::<f64>()
    };
    let eps = 1e-6;
    let numeric = (f(eps) - f(-eps)) / (2.0 * eps);
    let analytic: f64 = grad
        .to_vec()
        .iter()
        .zip(d.to_vec())
        .map(|(a, b)| a * b)
        .sum();
    assert!(
        (numeric - analytic).abs() <= 1e-6 * (1.0 + analytic.abs()),
        "{numeric} vs {analytic}"
    );
}

#[test]
fn each_start_gives_its_synchronous_collective() {
    let cases: [(&str, &str, Body, Body); 4] = [
        (
            "psum_invariant",
            "P('x', 'y')",
            |a| &a.psum_invariant_start(&["y"]).done() * &a.sin(),
            |a| &a.psum_invariant(&["y"]) * &a.sin(),
        ),
        (
            "unreduced_psum",
            "P('x', 'y')",
            |a| {
                let owed = a.sin().vary_unreduced_cast(&["x"]);
                &owed.unreduced_psum_start(&["x"]).done() * a
            },
            |a| &a.sin().vary_unreduced_cast(&["x"]).unreduced_psum(&["x"]) * a,
        ),
        (
            "all_gather_reduced",
            "P('x')",
            |a| a.all_gather_reduced_start("y", 1, true).done().sin(),
            |a| a.all_gather_reduced("y", 1, true).sin(),
        ),
        (
            "unreduced_psum_scatter",
            "P('x', 'y')",
            |a| {
                let owed = a.sin().vary_unreduced_cast(&["y"]);
                owed.unreduced_psum_scatter_start("y", 1, true)
                    .done()
                    .all_gather("y", 1, true)
            },
            |a| {
                let owed = a.sin().vary_unreduced_cast(&["y"]);
                owed.unreduced_psum_scatter("y", 1, true)
                    .all_gather("y", 1, true)
            },
        ),
    ];
    for (what, out, started, sync) in cases {
        let started = program(out, started);
        assert_equivalent(what, &started, &program(out, sync));
        let prims = body_prims(&started);
        assert!(
            prims.iter().any(|p| p.is_async_start()) && prims.iter().any(|p| p.is_async_done()),
            "{what}: {prims:?}"
        );
    }
    // JAX ends them with the dones of the collectives that share their wrappers.
    for (start, done) in [
        (Prim::PsumInvariantStart, Prim::PsumDone),
        (Prim::UnreducedPsumStart, Prim::PsumDone),
        (Prim::AllGatherReducedStart, Prim::AllGatherDone),
        (Prim::UnreducedReduceScatterStart, Prim::ReduceScatterDone),
    ] {
        assert_eq!(start.async_done(), Some(done));
        assert_eq!(start.synchronous().async_start(), Some(start));
    }
}

#[test]
fn pcast_dispatches_as_jax_and_refuses_the_other_pairs() {
    let cast = |f: fn(&Tensor) -> Tensor| body_prims(&program("P('x', 'y')", f));
    assert!(cast(|a| &a.psum(&["y"]).pcast(&["y"], PcastTo::Varying) * a).contains(&Prim::Pvary));
    let reduced = cast(|a| {
        &a.psum(&["y"])
            .pcast(&["y"], PcastTo::Reduced)
            .pcast(&["y"], PcastTo::Varying)
            * a
    });
    assert!(reduced.contains(&Prim::Preduced) && reduced.contains(&Prim::ReducedVaryCast));
    let unreduced = cast(|a| {
        a.pcast(&["y"], PcastTo::Unreduced)
            .unreduced_psum_scatter("y", 1, true)
            .all_gather("y", 1, true)
    });
    assert!(unreduced.contains(&Prim::VaryUnreducedCast));
    // No axes: the value itself.
    assert_eq!(cast(|a| a.pcast(&[], PcastTo::Reduced)), Vec::<Prim>::new());
    for (from, to, f) in [
        (
            "varying",
            "reduced",
            (|a| a.pcast(&["y"], PcastTo::Reduced)) as fn(&Tensor) -> Tensor,
        ),
        ("varying", "varying", |a| a.pcast(&["y"], PcastTo::Varying)),
        ("invarying", "unreduced", |a| {
            &a.psum(&["y"]).pcast(&["y"], PcastTo::Unreduced) * a
        }),
        ("unreduced", "varying", |a| {
            a.vary_unreduced_cast(&["y"])
                .pcast(&["y"], PcastTo::Varying)
        }),
    ] {
        let err = error(f);
        assert!(
            err.contains(&format!("unsupported pcast from={from} to={to}")),
            "{from} -> {to}: {err}"
        );
    }
    let mixed = error(|a| &a.psum(&["y"]).pcast(&["x", "y"], PcastTo::Reduced) * a);
    assert!(
        mixed.contains("one state") && mixed.contains("{varying, invarying}"),
        "{mixed}"
    );
    assert_eq!(PcastTo::parse("reduced").unwrap(), PcastTo::Reduced);
    let bad = PcastTo::parse("sharded").unwrap_err().to_string();
    assert!(
        bad.contains("'varying', 'reduced' and 'unreduced'"),
        "{bad}"
    );
}

#[test]
fn misuse_gives_jaxs_errors() {
    let cases: [(Body, &str); 9] = [
        (
            |a| &a.psum(&["y"]).unreduced_psum(&["y"]) * a,
            "must be unreduced (`U:`) over some of its axes",
        ),
        (
            |a| &a.psum(&["y"]).preduced(&["y"]).preduced(&["y"]) * a,
            "already reduced over some of its axes",
        ),
        (|a| a.reduced_vary_cast(&["y"]), "takes only reduced values"),
        (
            |a| {
                &a.psum(&["x", "y"])
                    .preduced(&["x"])
                    .reduced_vary_cast(&["y"])
                    * a
            },
            "must be among the operand's reduced axes {x}",
        ),
        (
            |a| a.psum(&["y"]).all_gather_reduced("y", 0, true),
            "is a Varying -> Reduced collective",
        ),
        (
            |a| a.unreduced_psum_scatter("y", 1, true),
            "takes only unreduced values",
        ),
        (
            |a| {
                a.vary_unreduced_cast(&["x"])
                    .unreduced_psum_scatter("y", 1, true)
            },
            "must be among the operand's unreduced axes {x}",
        ),
        (
            |a| {
                a.vary_unreduced_cast(&["y"])
                    .unreduced_psum_scatter("y", 0, false)
            },
            "must be equal",
        ),
        (
            |a| {
                a.vary_unreduced_cast(&["y"])
                    .unreduced_psum_scatter_start("y", 0, true)
                    .done()
            },
            "not divisible",
        ),
    ];
    for (f, expected) in cases {
        let err = error(f);
        assert!(err.contains(expected), "expected '{expected}' in: {err}");
    }
}

#[test]
fn parsed_programs_are_checked_and_vmap_refuses_them() {
    let p = program("P('x')", |a| {
        a.all_gather_reduced_start("y", 1, true).done().sin()
    });
    let text = print_closed(&p, 0);
    // all_gather_reduced takes no groups (JAX prints none).
    let grouped = text.replace(
        "all_gather_reduced_start[",
        "all_gather_reduced_start[axis_index_groups=((0, 1, 2, 3),) ",
    );
    let err = parse_closed(&grouped).unwrap_err().to_string();
    assert!(err.contains("axis_index_groups"), "{err}");
    // Its result's reduced axes are those the rule derives.
    let retyped = text.replace("{V:x, R:y}", "{V:x}");
    assert_ne!(retyped, text);
    let err = parse_closed(&retyped).unwrap_err().to_string();
    assert!(
        err.contains("all_gather_reduced_start gives a result of type")
            && err.contains("reduced and unreduced axes differ"),
        "{err}"
    );
    // The start is ended by all_gather_done, not another done.
    let wrong = text.replace("all_gather_done", "reduce_scatter_done");
    let err = parse_closed(&wrong).unwrap_err().to_string();
    assert!(
        err.contains("reduce_scatter_done ends a all_gather_reduced_start")
            && err.contains("end it with all_gather_done"),
        "{err}"
    );
    // JAX's batchers of the reduced/unreduced collectives raise NotImplementedError.
    let err = vmap(&p, &[Some(0)], &[0], 3).unwrap_err().to_string();
    assert!(
        err.contains("all_gather_reduced") && err.contains("NotImplementedError"),
        "{err}"
    );
    let scatter = program("P('x', 'y')", |a| {
        a.vary_unreduced_cast(&["y"])
            .unreduced_psum_scatter("y", 1, true)
            .all_gather("y", 1, true)
    });
    let err = vmap(&scatter, &[Some(1)], &[1], 2).unwrap_err().to_string();
    assert!(err.contains("NotImplementedError"), "{err}");
}

#[test]
fn the_jvp_of_the_unreduced_collectives_matches_finite_differences() {
    // A sum of unreduced values keeps `U:y` in the primal and the tangent (a unary operation
    // such as `sin` refuses an unreduced operand, as in JAX), and the JVP of the unreduced
    // collectives gives the derivative.
    let p = program("P('x', 'y')", |a| {
        let partial = a.vary_unreduced_cast(&["y"]);
        let owed = &partial + &partial;
        let scattered = owed
            .unreduced_psum_scatter("y", 1, true)
            .all_gather("y", 1, true);
        &scattered + &owed.unreduced_psum(&["y"])
    });
    let j = tessera_ir::jvp(&p).unwrap();
    verify(&j).unwrap();
    let (x, t) = (input(0.9), input(3.3));
    let tangent = eval_closed(&j, &[x.clone(), t.clone()]).unwrap()[1].to_vec();
    let at = |s: f64| {
        let moved: Vec<f64> = x
            .to_vec()
            .iter()
            .zip(t.to_vec())
            .map(|(a, b)| a + s * b)
            .collect();
        let moved = Array::new(DType::F64, &[4, 16], moved).unwrap();
        eval_closed(&p, &[moved]).unwrap()[0].to_vec()
    };
    let eps = 1e-6;
    let (up, down) = (at(eps), at(-eps));
    for (k, dy) in tangent.iter().enumerate() {
        let numeric = (up[k] - down[k]) / (2.0 * eps);
        assert!(
            (numeric - dy).abs() <= 1e-6 * (1.0 + dy.abs()),
            "{k}: {numeric} vs {dy}"
        );
    }
}

/// A value unreduced over `y` returned as replicated (`P()`, or `P('x')` which replicates over
/// `y`) is refused as JAX refuses it: its devices hold different partial sums, so reading one
/// device's block as the whole would return device 0's partial. With a primitive that dropped
/// the unreduced axes (`sub`, JAX refuses it) in between, the same happened silently.
#[test]
fn an_unreduced_result_cannot_leave_shard_map_as_a_replicated_value() {
    for out in ["P()", "P('x')"] {
        let err = try_program(out, |a| {
            a.psum(&["x"]).sin().vary_unreduced_cast(&["y"]).sum(&[1])
        })
        .map(|p| print_closed(&p, 0))
        .expect_err("an unreduced result with a replicated out spec");
        assert!(err.to_string().contains("unreduced"), "{out}: {err}");
        let err = try_program(out, |a| {
            let partial = a.psum(&["x"]).sin().vary_unreduced_cast(&["y"]).sum(&[1]);
            &partial - &partial
        })
        .map(|p| print_closed(&p, 0))
        .expect_err("sub of an unreduced value");
        assert!(err.to_string().contains("unreduced"), "{out}: {err}");
    }
}
