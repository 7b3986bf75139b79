//! Nested `pmap` (JAX's `pmap(pmap(f, axis_name='j'), axis_name='i')`): the inner body sees both
//! axes, collectives over the inner axis, the outer one or both and `axis_index` of each run on
//! the interpreter and on PJRT over an outer × inner grid of the 8 CPU devices, equal to a
//! reference computed here by loops over the host arrays; gradients match finite differences;
//! misuse is a typed error naming the fix.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::cell::RefCell;

use tessera::pmap::{PmapError, PmapRun};
use tessera_ir::autodiff::value_and_grad;
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{PmapAxes, Tensor, pmap, pmap_with, trace};
use tessera_ir::{Array, ClosedJaxpr, DType, ShapedArray};
use tessera_pjrt::Client;

const OUTER: usize = 2;
const INNER: usize = 4;
const ROW: usize = 3;

/// `pmap(pmap(f, 'j'), 'i')` over `[2, 4, 3]`; `f` returns, per device, `psum(x, 'j')`,
/// `psum(x, 'i')`, `psum(x, ('i', 'j'))`, `axis_index('i')`, `axis_index('j')` and
/// `axis_index(('i', 'j'))`; after the inner pmap the outer body also sums its first result
/// over 'i'. `shapes` records the shapes each level's body sees.
fn program(shapes: &RefCell<Vec<Vec<i64>>>) -> ClosedJaxpr {
    let aval = ShapedArray::new(DType::F32, &[OUTER as i64, INNER as i64, ROW as i64]);
    trace(&[aval], |a| {
        pmap("i", &[&a[0]], |s| {
            shapes.borrow_mut().push(s[0].shape().to_vec());
            let mut inner = pmap("j", &[&s[0]], |t| {
                let x = &t[0];
                shapes.borrow_mut().push(x.shape().to_vec());
                vec![
                    x.psum(&["j"]),
                    x.psum(&["i"]),
                    x.psum(&["i", "j"]),
                    Tensor::axis_index(x, "i"),
                    Tensor::axis_index(x, "j"),
                    Tensor::axis_index_over(x, &["i", "j"]),
                ]
            });
            let after = inner[0].psum(&["i"]);
            inner.push(after);
            inner
        })
    })
    .unwrap()
}

fn input() -> Array {
    let n = OUTER * INNER * ROW;
    let values = (0..n).map(|k| ((k as f64) * 0.61 + 0.3).sin() * 3.0);
    Array::new(
        DType::F32,
        &[OUTER as i64, INNER as i64, ROW as i64],
        values.collect(),
    )
    .unwrap()
}

/// The expected results, by loops over the host values: `x[o][q][k]`.
fn reference(x: &Array) -> Vec<Vec<f64>> {
    let v = x.to_vec();
    let at = |o: usize, q: usize, k: usize| v[(o * INNER + q) * ROW + k];
    let (mut over_j, mut over_i, mut both, mut after) = (vec![], vec![], vec![], vec![]);
    let (mut index_i, mut index_j, mut index_ij) = (vec![], vec![], vec![]);
    for o in 0..OUTER {
        for q in 0..INNER {
            for k in 0..ROW {
                over_j.push((0..INNER).map(|q2| at(o, q2, k)).sum::<f64>());
                over_i.push((0..OUTER).map(|o2| at(o2, q, k)).sum::<f64>());
                let all: f64 = (0..OUTER)
                    .flat_map(|o2| (0..INNER).map(move |q2| (o2, q2)))
                    .map(|(o2, q2)| at(o2, q2, k))
                    .sum();
                both.push(all);
                after.push(all);
            }
            index_i.push(o as f64);
            index_j.push(q as f64);
            index_ij.push((o * INNER + q) as f64);
        }
    }
    vec![over_j, over_i, both, index_i, index_j, index_ij, after]
}

fn close(got: &[f64], want: &[f64], tol: f64) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= tol * (1.0 + w.abs()))
}

fn check(results: &[Array], want: &[Vec<f64>], what: &str) {
    assert_eq!(results.len(), want.len(), "{what}");
    let grid = [OUTER as i64, INNER as i64];
    let shapes: [&[i64]; 7] = [
        &[2, 4, 3],
        &[2, 4, 3],
        &[2, 4, 3],
        &grid,
        &grid,
        &grid,
        &[2, 4, 3],
    ];
    for (k, ((r, w), shape)) in results.iter().zip(want).zip(shapes).enumerate() {
        assert_eq!(r.shape(), shape.to_vec(), "{what}: result {k}");
        assert!(
            close(&r.to_vec(), w, 1e-5),
            "{what}: result {k}: {:?} != {w:?}",
            r.to_vec()
        );
    }
}

#[test]
fn a_nested_pmap_traces_with_both_axes_bound_and_each_level_maps_its_leading_axis_away() {
    let shapes = RefCell::new(Vec::new());
    let p = program(&shapes);
    assert_eq!(
        shapes.borrow().as_slice(),
        &[vec![4, 3], vec![3]],
        "the outer body sees [inner, row], the inner body [row]"
    );
    let outs = p.jaxpr.out_avals();
    assert_eq!(outs[0].shape, vec![2, 4, 3]);
    assert_eq!(outs[3].shape, vec![2, 4]);
    assert_eq!(outs[3].dtype, DType::I32);
    // The program prints a shard_map over 'j' inside one over 'i'.
    let text = tessera_ir::text::print_closed(&p, 0);
    assert!(text.matches("shard_map").count() >= 2, "{text}");
}

#[test]
fn a_nested_pmap_runs_on_the_interpreter_with_collectives_over_each_axis_and_both() {
    let x = input();
    let got = eval_closed(&program(&RefCell::default()), std::slice::from_ref(&x)).unwrap();
    check(&got, &reference(&x), "interpreter");
}

#[test]
fn a_nested_pmap_runs_on_2x4_pjrt_devices_and_on_an_explicit_device_list() {
    let x = input();
    let want = reference(&x);
    let p = program(&RefCell::default());
    let client = Client::cpu(8).unwrap();
    let run = PmapRun::new(&client, &p, None, &[]).unwrap();
    assert_eq!(run.devices(), (0..8).collect::<Vec<i64>>());
    check(
        &run.run(std::slice::from_ref(&x)).unwrap(),
        &want,
        "PJRT, devices 0..8",
    );
    // Another order of the 8 devices: the same values (row-major: outer index first).
    let order = [7, 5, 3, 1, 6, 4, 2, 0];
    let run = PmapRun::new(&client, &p, Some(&order), &[]).unwrap();
    assert_eq!(run.devices(), order.to_vec());
    check(
        &run.run(std::slice::from_ref(&x)).unwrap(),
        &want,
        "PJRT, devices 7,5,3,1,6,4,2,0",
    );
}

#[test]
fn a_2x2_nested_pmap_runs_on_four_listed_devices_of_eight() {
    // psum over 'i' and over both of a [2, 2, 2] input, on devices 4 to 7.
    let aval = ShapedArray::new(DType::F32, &[2, 2, 2]);
    let p = trace(&[aval], |a| {
        pmap("i", &[&a[0]], |s| {
            pmap("j", &[&s[0]], |t| {
                vec![&t[0].psum(&["i"]) * 10.0 + &t[0].psum(&["i", "j"])]
            })
        })
    })
    .unwrap();
    let x = Array::new(DType::F32, &[2, 2, 2], (0..8).map(f64::from).collect()).unwrap();
    let v = x.to_vec();
    let mut want = Vec::new();
    for o in 0..2 {
        for q in 0..2 {
            for k in 0..2 {
                let over_i: f64 = (0..2).map(|o2| v[(o2 * 2 + q) * 2 + k]).sum();
                let all: f64 = (0..4).map(|d| v[d * 2 + k]).sum();
                let _ = o;
                want.push(over_i * 10.0 + all);
            }
        }
    }
    let interp = eval_closed(&p, std::slice::from_ref(&x)).unwrap();
    assert!(close(&interp[0].to_vec(), &want, 1e-6));
    let client = Client::cpu(8).unwrap();
    let run = PmapRun::new(&client, &p, Some(&[4, 5, 6, 7]), &[]).unwrap();
    let got = run.run(std::slice::from_ref(&x)).unwrap();
    assert_eq!(got[0].shape(), vec![2, 2, 2]);
    assert!(
        close(&got[0].to_vec(), &want, 1e-6),
        "{:?}",
        got[0].to_vec()
    );
}

/// `sum(pmap(pmap(lambda t: sin(t) * psum(t, 'i') + cos(psum(t, ('i', 'j'))), 'j'), 'i')(x))`.
fn loss(dtype: DType) -> ClosedJaxpr {
    let aval = ShapedArray::new(dtype, &[2, 4, 3]);
    trace(&[aval], |a| {
        let y = pmap("i", &[&a[0]], |s| {
            pmap("j", &[&s[0]], |t| {
                let x = &t[0];
                vec![&x.sin() * &x.psum(&["i"]) + x.psum(&["i", "j"]).cos()]
            })
        });
        vec![y[0].sum(&[0, 1, 2])]
    })
    .unwrap()
}

#[test]
fn the_gradient_of_a_nested_pmaps_sum_matches_finite_differences_and_runs_on_pjrt() {
    let program = loss(DType::F64);
    let vg = value_and_grad(&program, &[0]).unwrap();
    let x = input().converted(DType::F64);
    let got = eval_closed(&vg, std::slice::from_ref(&x)).unwrap();
    let value = |a: &Array| eval_closed(&program, std::slice::from_ref(a)).unwrap()[0].to_vec()[0];
    assert!((got[0].to_vec()[0] - value(&x)).abs() < 1e-9);
    let grad = got[1].to_vec();
    let base = x.to_vec();
    let eps = 1e-5;
    for k in 0..base.len() {
        let at = |d: f64| {
            let mut v = base.clone();
            v[k] += d;
            value(&Array::new(DType::F64, &[2, 4, 3], v).unwrap())
        };
        let fd = (at(eps) - at(-eps)) / (2.0 * eps);
        assert!(
            (grad[k] - fd).abs() <= 1e-5 * (1.0 + fd.abs()),
            "d loss / d x[{k}]: {} vs finite difference {fd}",
            grad[k]
        );
    }
    // The gradient program (nested shard_maps of the bodies' VJPs) runs on PJRT too.
    let client = Client::cpu(8).unwrap();
    let run = PmapRun::new(&client, &vg, None, &[]).unwrap();
    let on_device = run.run(std::slice::from_ref(&x)).unwrap();
    assert!(close(&on_device[1].to_vec(), &grad, 1e-9));
}

#[test]
fn a_device_list_that_is_not_outer_times_inner_is_refused_naming_the_grid() {
    let p = program(&RefCell::default());
    let client = Client::cpu(8).unwrap();
    let e = PmapRun::new(&client, &p, Some(&[0, 1, 2, 3]), &[])
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            PmapError::DeviceCount {
                size: 8,
                given: 4,
                ..
            }
        ),
        "{e}"
    );
    let text = e.to_string();
    assert!(
        text.contains("i=2 × j=4") && text.contains("give exactly 8 devices"),
        "{text}"
    );
    // Without a list, a client with fewer than outer × inner devices.
    let small = Client::cpu(4).unwrap();
    let e = PmapRun::new(&small, &p, None, &[]).err().unwrap();
    assert!(
        matches!(
            e,
            PmapError::TooFewDevices {
                size: 8,
                available: 4,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn an_axis_name_used_by_both_levels_is_refused_at_tracing() {
    let aval = ShapedArray::new(DType::F32, &[2, 4, 3]);
    let e = trace(&[aval], |a| {
        pmap("i", &[&a[0]], |s| {
            pmap("i", &[&s[0]], |t| vec![t[0].psum(&["i"])])
        })
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("'i' is already bound") && e.contains("name its axes differently"),
        "{e}"
    );
}

#[test]
fn in_axes_mismatches_and_unbound_axes_of_the_inner_pmap_are_typed_errors() {
    let aval = ShapedArray::new(DType::F32, &[2, 4, 3]);
    // in_axes names two arguments for one.
    let e = trace(std::slice::from_ref(&aval), |a| {
        pmap("i", &[&a[0]], |s| {
            let axes = PmapAxes {
                in_axes: vec![Some(0), None],
                ..PmapAxes::default()
            };
            pmap_with("j", &[&s[0]], &axes, |t| vec![t[0].psum(&["j"])])
        })
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("in_axes names 2 arguments but pmap got 1"),
        "{e}"
    );
    // Mapped dimensions of different sizes in the inner pmap: [4, 3] at 0 and [3, 4] at 0.
    let other = ShapedArray::new(DType::F32, &[2, 3, 4]);
    let e = trace(&[aval.clone(), other], |a| {
        pmap("i", &[&a[0], &a[1]], |s| {
            pmap("j", &[&s[0], &s[1]], |t| vec![t[0].psum(&["j"])])
        })
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("every mapped dimension"), "{e}");
    // An axis neither level binds, named inside the inner body.
    let e = trace(&[aval], |a| {
        pmap("i", &[&a[0]], |s| {
            pmap("j", &[&s[0]], |t| vec![t[0].psum(&["k"])])
        })
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("unbound axis name: 'k'") && e.contains("bound axes: [i, j]"),
        "{e}"
    );
}

#[test]
fn a_shard_map_nested_in_a_shard_map_keeps_the_outer_axis_manual_on_the_interpreter_and_pjrt() {
    use tessera_ir::trace::shard_map;
    use tessera_sharding::{AbstractMesh, PartitionSpec};
    let spec = |t: &str| PartitionSpec::parse(t).unwrap();
    let outer = AbstractMesh::auto(&[("x", 2)]).unwrap();
    let inner = AbstractMesh::auto(&[("y", 3)]).unwrap();
    let aval = ShapedArray::new(DType::F32, &[4, 6]);
    let p = trace(&[aval], |a| {
        shard_map(
            &outer,
            &[spec("P('x')")],
            &[spec("P('x')"), spec("P('x')"), spec("P()")],
            &[&a[0]],
            |s| {
                // Rows split over x: [2, 6]; then columns over y: [2, 2].
                let r = shard_map(
                    &inner,
                    &[spec("P(None, 'y')")],
                    &[spec("P(None, 'y')"), spec("P()")],
                    &[&s[0]],
                    |t| vec![&t[0] + &t[0].psum(&["x"]), t[0].sum(&[1]).psum(&["y"])],
                );
                let total = r[1].psum(&["x"]);
                vec![r[0].clone(), r[1].clone(), total]
            },
        )
    })
    .unwrap();
    let x = Array::new(
        DType::F32,
        &[4, 6],
        (0..24).map(|k| f64::from(k) * 0.5 - 3.0).collect(),
    )
    .unwrap();
    let v = x.to_vec();
    let at = |r: usize, c: usize| v[r * 6 + c];
    let mut r0 = Vec::new();
    for r in 0..4 {
        for c in 0..6 {
            r0.push(at(r, c) + (0..2).map(|o| at(o * 2 + r % 2, c)).sum::<f64>());
        }
    }
    let r1: Vec<f64> = (0..4).map(|r| (0..6).map(|c| at(r, c)).sum()).collect();
    let r2: Vec<f64> = (0..2).map(|k| r1[k] + r1[2 + k]).collect();
    let want = [r0, r1, r2];
    let interp = eval_closed(&p, std::slice::from_ref(&x)).unwrap();
    let client = Client::cpu(8).unwrap();
    let run = PmapRun::new(&client, &p, None, &[]).unwrap();
    assert_eq!(run.devices(), (0..6).collect::<Vec<i64>>());
    let device = run.run(std::slice::from_ref(&x)).unwrap();
    for (what, got) in [("interpreter", &interp), ("PJRT", &device)] {
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                close(&g.to_vec(), w, 1e-5),
                "{what}: result {k}: {:?} != {w:?}",
                g.to_vec()
            );
        }
    }
}

#[test]
fn an_inner_pmap_in_a_loop_runs_on_the_interpreter_and_is_a_typed_error_for_pjrt() {
    use tessera_ir::trace::fori_loop;
    // Twice: c <- c + psum(c, 'i'), the inner pmap inside a fori_loop of the outer body.
    let aval = ShapedArray::new(DType::F32, &[2, 4, 3]);
    let p = trace(&[aval], |a| {
        pmap("i", &[&a[0]], |s| {
            fori_loop(0, 2, &[], &[&s[0]], |_, _, c| {
                pmap("j", &[&c[0]], |t| vec![&t[0] + &t[0].psum(&["i"])])
            })
        })
    })
    .unwrap();
    let x = input();
    let mut want = x.to_vec();
    for _ in 0..2 {
        let before = want.clone();
        for (k, w) in want.iter_mut().enumerate() {
            let local = k % (INNER * ROW);
            *w += (0..OUTER)
                .map(|o| before[o * INNER * ROW + local])
                .sum::<f64>();
        }
    }
    let got = eval_closed(&p, std::slice::from_ref(&x)).unwrap();
    assert!(
        close(&got[0].to_vec(), &want, 1e-5),
        "{:?}",
        got[0].to_vec()
    );
    let client = Client::cpu(8).unwrap();
    let e = PmapRun::new(&client, &p, None, &[]).err().unwrap();
    assert!(
        matches!(&e, PmapError::Nested { outer, inner, .. } if outer == "i" && inner == "j"),
        "{e}"
    );
    assert!(
        e.to_string().contains("call the inner pmap directly"),
        "{e}"
    );
}
