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

/// Runs `p` on the interpreter and through `PmapRun` on the first 8 CPU devices, asserts
/// they agree, and returns the interpreter's results.
fn device_equals_interpreter(p: &ClosedJaxpr, args: &[Array], what: &str) -> Vec<Array> {
    let interp = eval_closed(p, args).unwrap();
    let client = Client::cpu(8).unwrap();
    let run = PmapRun::new(&client, p, None, &[]).unwrap();
    assert_eq!(run.devices(), (0..8).collect::<Vec<i64>>(), "{what}");
    let device = run.run(args).unwrap();
    assert_eq!(device.len(), interp.len(), "{what}");
    for (k, (d, i)) in device.iter().zip(&interp).enumerate() {
        assert_eq!(d.shape(), i.shape(), "{what}: result {k}");
        assert!(
            close(&d.to_vec(), &i.to_vec(), 1e-5),
            "{what}: result {k}: PJRT {:?} != interpreter {:?}",
            d.to_vec(),
            i.to_vec()
        );
    }
    interp
}

#[test]
fn an_inner_pmap_in_a_fori_loop_runs_on_the_interpreter_and_on_pjrt() {
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
    let got = device_equals_interpreter(&p, std::slice::from_ref(&x), "fori_loop");
    assert!(
        close(&got[0].to_vec(), &want, 1e-5),
        "{:?}",
        got[0].to_vec()
    );
}

/// `pmap(f, 'i')` over `[2, 5, 4, 3]`: `f` scans its 5 slices `[4, 3]` with a carry `[4, 3]`;
/// each step runs `pmap(g, 'j')` on the slice and the carry, where `g` mixes the slice, the
/// carry, `psum` over 'i', over 'j' and over both, and `axis_index` of each axis.
fn scanned(dtype: DType) -> ClosedJaxpr {
    let aval = ShapedArray::new(dtype, &[2, 5, 4, 3]);
    trace(&[aval], |a| scanned_on(&a[0])).unwrap()
}

fn scanned_on(a: &Tensor) -> Vec<Tensor> {
    use tessera_ir::trace::scan;
    {
        pmap("i", &[a], |s| {
            let init = s[0].sum(&[0]) * 0.1;
            let (carry, ys) = scan(&[], &[&init], &[&s[0]], None, false, |_, c, x| {
                let r = pmap("j", &[&x[0], &c[0]], |t| {
                    let (x, c) = (&t[0], &t[1]);
                    let i = Tensor::axis_index(x, "i").astype(x.dtype());
                    let j = Tensor::axis_index(x, "j").astype(x.dtype());
                    let next = &(&x.sin() * &c.psum(&["i"])) * 0.5
                        + (&c.psum(&["j"]) * 0.1).cos()
                        + &j * 0.25;
                    let y = &x.psum(&["i", "j"]) * &i + c.clone();
                    vec![next, y]
                });
                (vec![r[0].clone()], vec![r[1].clone()])
            });
            vec![carry[0].clone(), ys[0].clone()]
        })
    }
}

fn input4(dtype: DType) -> Array {
    let values = (0..120).map(|k| ((f64::from(k)) * 0.37 + 0.2).sin() * 2.0);
    Array::new(dtype, &[2, 5, 4, 3], values.collect()).unwrap()
}

#[test]
fn an_inner_pmap_in_a_scan_runs_on_pjrt_equal_to_the_interpreter() {
    let p = scanned(DType::F32);
    let got = device_equals_interpreter(&p, &[input4(DType::F32)], "scan");
    assert_eq!(got[0].shape(), vec![2, 4, 3]);
    assert_eq!(got[1].shape(), vec![2, 5, 4, 3]);
    // The last y of each outer device is computed from the carry before the last step: y[4]
    // differs from y[3] (the carry moved), so the loop really ran 5 steps.
    let ys = got[1].to_vec();
    assert!((0..12).any(|k| (ys[4 * 12 + k] - ys[3 * 12 + k]).abs() > 1e-3));
}

/// `pmap(f, 'i')` over `[2, 4, 3]`: on outer device 0 `f` runs `pmap(g0, 'j')`, elsewhere
/// `pmap(g1, 'j')` (a `cond` on `axis_index('i')`), each with collectives over 'j'.
fn branched(dtype: DType) -> ClosedJaxpr {
    let aval = ShapedArray::new(dtype, &[2, 4, 3]);
    trace(&[aval], |a| branched_on(&a[0])).unwrap()
}

fn branched_on(a: &Tensor) -> Vec<Tensor> {
    use tessera_ir::trace::cond;
    {
        pmap("i", &[a], |s| {
            let i = Tensor::axis_index(&s[0], "i");
            let first = i.eq(&i.full_like_scalar(0.0));
            cond(
                &first,
                &[&s[0]],
                |o| pmap("j", &[&o[0]], |t| vec![&t[0].sin() * &t[0].psum(&["j"])]),
                |o| {
                    pmap("j", &[&o[0]], |t| {
                        let j = Tensor::axis_index(&t[0], "j").astype(t[0].dtype());
                        vec![&t[0].cos() - &(&t[0].psum(&["j"]) * &j)]
                    })
                },
            )
        })
    }
}

#[test]
fn an_inner_pmap_in_a_cond_runs_on_pjrt_equal_to_the_interpreter() {
    let x = input();
    let got = device_equals_interpreter(&branched(DType::F32), std::slice::from_ref(&x), "cond");
    // Outer device 0 took the first branch, device 1 the second: checked against loops.
    let v = x.to_vec();
    let at = |o: usize, q: usize, k: usize| v[(o * INNER + q) * ROW + k];
    let mut want = Vec::new();
    for o in 0..OUTER {
        for q in 0..INNER {
            for k in 0..ROW {
                let over_j = (0..INNER).map(|q2| at(o, q2, k));
                want.push(match o {
                    0 => at(o, q, k).sin() * over_j.sum::<f64>(),
                    _ => at(o, q, k).cos() - over_j.sum::<f64>() * q as f64,
                });
            }
        }
    }
    assert!(
        close(&got[0].to_vec(), &want, 1e-5),
        "{:?} != {want:?}",
        got[0].to_vec()
    );
}

#[test]
fn an_inner_pmap_in_a_while_loop_runs_on_pjrt_equal_to_the_interpreter() {
    use tessera_ir::trace::while_loop;
    // While the carry's first element is below 50: c <- 2 c + psum(c, 'j') + 1.
    let aval = ShapedArray::new(DType::F32, &[2, 4, 3]);
    let p = trace(&[aval], |a| {
        pmap("i", &[&a[0]], |s| {
            while_loop(
                &[],
                &[&s[0]],
                |_, c| {
                    let row = Tensor::slice_axis(&c[0], 0, 0, 1);
                    let first = Tensor::slice_axis(&row, 1, 0, 1).reshape(&[]);
                    first.lt(&first.full_like_scalar(50.0))
                },
                |_, c| {
                    pmap("j", &[&c[0]], |t| {
                        vec![&t[0] * 2.0 + &t[0].psum(&["j"]) + 1.0]
                    })
                },
            )
        })
    })
    .unwrap();
    let x = Array::new(DType::F32, &[2, 4, 3], (0..24).map(f64::from).collect()).unwrap();
    let got = device_equals_interpreter(&p, std::slice::from_ref(&x), "while");
    assert!(got[0].to_vec()[0] >= 50.0 && got[0].to_vec()[12] >= 50.0);
}

/// `sum` of the scan program's results, and of the cond program's.
fn scanned_and_branched_loss() -> ClosedJaxpr {
    let avals = [
        ShapedArray::new(DType::F64, &[2, 5, 4, 3]),
        ShapedArray::new(DType::F64, &[2, 4, 3]),
    ];
    trace(&avals, |a| {
        let s = scanned_on(&a[0]);
        let c = branched_on(&a[1]);
        let total = s[0].sum(&[0, 1, 2]) + s[1].sum(&[0, 1, 2, 3]) + c[0].sum(&[0, 1, 2]);
        vec![total]
    })
    .unwrap()
}

#[test]
fn gradients_through_an_inner_pmap_in_a_scan_and_a_cond_match_finite_differences_on_pjrt() {
    let program = scanned_and_branched_loss();
    let vg = value_and_grad(&program, &[0, 1]).unwrap();
    let args = [input4(DType::F64), input().converted(DType::F64)];
    let got = device_equals_interpreter(&vg, &args, "gradient");
    let value = |a: &[Array]| eval_closed(&program, a).unwrap()[0].to_vec()[0];
    let eps = 1e-6;
    for (arg, grad) in [(0usize, &got[1]), (1, &got[2])] {
        let base = args[arg].to_vec();
        let grad = grad.to_vec();
        // Every fifth element (the check costs two evaluations per element).
        for k in (0..base.len()).step_by(5) {
            let at = |d: f64| {
                let mut v = base.clone();
                v[k] += d;
                let mut moved = args.to_vec();
                moved[arg] = Array::new(DType::F64, &args[arg].shape(), v).unwrap();
                value(&moved)
            };
            let fd = (at(eps) - at(-eps)) / (2.0 * eps);
            assert!(
                (grad[k] - fd).abs() <= 1e-5 * (1.0 + fd.abs()),
                "d loss / d arg{arg}[{k}]: {} vs finite difference {fd}",
                grad[k]
            );
        }
    }
}

/// JAX's printed nested `pmap`: `shard_map`s with `check_vma=False` (values untyped by the
/// axes they vary over), the inner one inside a `scan` of the outer body; its second result's
/// out_spec leaves out 'j', over which the value varies (JAX and the interpreter take the
/// first replica's value).
const UNCHECKED: &str = "{ lambda ; a:f32[2,4,3]. let
    b:f32[2,4,3] c:f32[2,2,3] = shard_map[
      check_vma=False
      in_specs=(P('i',),)
      jaxpr={ lambda ; d:f32[1,4,3]. let
          e:f32[4,3] = squeeze[dimensions=(0,)] d
          f:f32[4,3] g:f32[2,3] = scan[
            _split_transpose=False
            jaxpr={ lambda ; h:f32[4,3]. let
                i:f32[4,3] j:f32[3] = shard_map[
                  check_vma=False
                  in_specs=(P('j',),)
                  jaxpr={ lambda ; k:f32[1,3]. let
                      l:f32[3] = squeeze[dimensions=(0,)] k
                      m:f32[3] = psum[axes=('i',) axis_index_groups=None] l
                      n:f32[3] = psum[axes=('j',) axis_index_groups=None] l
                      o:f32[3] = mul m 0.25:f32[]
                      p:f32[3] = add o n
                      q:i32[] = axis_index[axis_name=j]
                      r:f32[] = convert_element_type[new_dtype=float32 weak_type=False] q
                      s:f32[3] = add l r
                      t:f32[1,3] = broadcast_in_dim[broadcast_dimensions=(1,) shape=(1, 3) sharding=None] p
                    in (t, s) }
                  mesh=Mesh('j': 4, axis_types=(Auto,))
                  out_specs=(P('j',), P())
                ] h
              in (i, j) }
            length=2
            linear=(False,)
            num_carry=1
            num_consts=0
            reverse=False
            unroll=1
          ] e
          u:f32[1,4,3] = broadcast_in_dim[broadcast_dimensions=(1, 2) shape=(1, 4, 3) sharding=None] f
          v:f32[1,2,3] = broadcast_in_dim[broadcast_dimensions=(1, 2) shape=(1, 2, 3) sharding=None] g
        in (u, v) }
      mesh=Mesh('i': 2, axis_types=(Auto,))
      out_specs=(P('i',), P('i',))
    ] a
  in (b, c) }";

#[test]
fn jax_s_printed_nested_pmap_with_check_vma_false_in_a_scan_runs_on_pjrt() {
    let p = tessera_ir::text::parse_closed(UNCHECKED).unwrap();
    let x = input();
    let got = device_equals_interpreter(&p, std::slice::from_ref(&x), "check_vma=False");
    let carry = got[0].to_vec();
    let second = got[1].to_vec();
    assert_eq!(second.len(), OUTER * 2 * ROW);
    // Against loops: one step maps c[o][q][k] to psum_i(c)[q][k] / 4 + psum_j(c)[o][k].
    let step = |c: &[f64]| -> Vec<f64> {
        let mut next = vec![0.0; c.len()];
        for o in 0..OUTER {
            for q in 0..INNER {
                for k in 0..ROW {
                    let over_i: f64 = (0..OUTER).map(|o2| c[(o2 * INNER + q) * ROW + k]).sum();
                    let over_j: f64 = (0..INNER).map(|q2| c[(o * INNER + q2) * ROW + k]).sum();
                    next[(o * INNER + q) * ROW + k] = over_i * 0.25 + over_j;
                }
            }
        }
        next
    };
    let c0 = x.to_vec();
    let c1 = step(&c0);
    let c2 = step(&c1);
    assert!(close(&carry, &c2, 1e-5), "{carry:?} != {c2:?}");
    // Step t's ys: the carry before it at q = 0 (the first replica of 'j'), plus
    // axis_index('j') = 0 there.
    let mut want = Vec::new();
    for o in 0..OUTER {
        for c in [&c0, &c1] {
            want.extend((0..ROW).map(|k| c[o * INNER * ROW + k]));
        }
    }
    assert!(close(&second, &want, 1e-5), "{second:?} != {want:?}");
}

#[test]
fn sibling_inner_pmaps_giving_one_axis_two_sizes_are_a_typed_error_for_pjrt() {
    use tessera_ir::trace::shard_map;
    use tessera_sharding::{AbstractMesh, PartitionSpec};
    let spec = |t: &str| PartitionSpec::parse(t).unwrap();
    let four = AbstractMesh::auto(&[("j", 4)]).unwrap();
    let two = AbstractMesh::auto(&[("j", 2)]).unwrap();
    let aval = ShapedArray::new(DType::F32, &[2, 4, 3]);
    let p = trace(&[aval], |a| {
        pmap("i", &[&a[0]], |s| {
            let r = shard_map(&four, &[spec("P('j')")], &[spec("P('j')")], &[&s[0]], |t| {
                vec![t[0].psum(&["j"])]
            });
            shard_map(&two, &[spec("P('j')")], &[spec("P('j')")], &[&r[0]], |t| {
                vec![t[0].psum(&["j"])]
            })
        })
    })
    .unwrap();
    // The interpreter runs it (each level binds its own 'j').
    eval_closed(&p, &[input()]).unwrap();
    let client = Client::cpu(8).unwrap();
    let e = PmapRun::new(&client, &p, None, &[]).err().unwrap();
    assert!(
        matches!(&e, PmapError::Nested { outer, inner, .. } if outer == "i" && inner == "j"),
        "{e}"
    );
    assert!(e.to_string().contains("sizes 4 and 2"), "{e}");
}

#[test]
fn the_gradient_of_jax_s_printed_nested_pmap_in_a_scan_runs_on_pjrt_equal_to_the_interpreter() {
    let p = tessera_ir::text::parse_closed(UNCHECKED).unwrap();
    let f64_text = UNCHECKED
        .replace("f32", "f64")
        .replace("float32", "float64");
    let p64 = tessera_ir::text::parse_closed(&f64_text).unwrap();
    assert_eq!(p.jaxpr.eqns.len(), p64.jaxpr.eqns.len());
    // loss = sum(b * b); `c` (an inner result whose out_spec leaves out 'j', over which it
    // varies) is left out: JAX's unchecked transpose spreads its cotangent over 'j' as if it
    // were replicated, which is not the derivative of taking the first replica.
    let loss = trace(&[ShapedArray::new(DType::F64, &[2, 4, 3])], |a| {
        let r = tessera_ir::trace::call_closed(&p64, &[&a[0]]);
        vec![(&r[0] * &r[0]).sum(&[0, 1, 2])]
    })
    .unwrap();
    let vg = value_and_grad(&loss, &[0]).unwrap();
    let x = input().converted(DType::F64);
    let got = device_equals_interpreter(&vg, std::slice::from_ref(&x), "unchecked gradient");
    let value = |a: &Array| eval_closed(&loss, std::slice::from_ref(a)).unwrap()[0].to_vec()[0];
    let (base, grad) = (x.to_vec(), got[1].to_vec());
    let eps = 1e-6;
    for k in (0..base.len()).step_by(3) {
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
}
