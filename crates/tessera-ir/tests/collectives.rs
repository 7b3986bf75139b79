//! Collectives inside `shard_map` on the SPMD interpreter: semantics the oracle file does not
//! cover (`pmap`, `pargmax`, `pbroadcast`, groups, untiled all-to-all, gradients of replicated
//! operands) and the errors a user sees for misuse.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::autodiff::vjp;
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{PmapAxes, Tensor, pmap, pmap_with, shard_map_program, trace};
use tessera_ir::{Array, DType, ShapedArray};
use tessera_sharding::{AbstractMesh, PartitionSpec};

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

fn iota(shape: &[i64]) -> Array {
    let n: i64 = shape.iter().product();
    Array::new(DType::F32, shape, (0..n).map(|v| v as f64).collect()).unwrap()
}

fn mesh(axes: &[(&str, i64)]) -> AbstractMesh {
    AbstractMesh::auto(axes).unwrap()
}

fn spec(text: &str) -> PartitionSpec {
    PartitionSpec::parse(text).unwrap()
}

/// `shard_map(f)` over a 1-D mesh `x` of `n` devices, blocks along dimension 0, run on `input`.
fn run_1d(n: i64, input: &Array, out: &str, f: impl FnOnce(&Tensor) -> Tensor) -> Vec<f64> {
    let program = shard_map_program(
        &mesh(&[("x", n)]),
        &[spec("P('x')")],
        &[spec(out)],
        &[input.aval()],
        |a| vec![f(&a[0])],
    )
    .unwrap();
    tessera_ir::verify(&program).unwrap();
    eval_closed(&program, std::slice::from_ref(input)).unwrap()[0].to_vec()
}

fn error_of(result: tessera_ir::Result<tessera_ir::ClosedJaxpr>) -> String {
    result.err().map(|e| e.to_string()).unwrap_or_default()
}

#[test]
fn a_collective_outside_shard_map_names_the_unbound_axis() {
    let err = error_of(trace(&[f32(&[4])], |a| vec![a[0].psum(&["x"])]));
    assert!(err.contains("unbound axis name: 'x'"), "{err}");
    let inner = shard_map_program(
        &mesh(&[("x", 2)]),
        &[spec("P('x')")],
        &[spec("P('x')")],
        &[f32(&[4])],
        |a| vec![a[0].psum(&["y"])],
    );
    let err = error_of(inner);
    assert!(
        err.contains("unbound axis name: 'y'") && err.contains("bound axes: [x]"),
        "{err}"
    );
}

#[test]
fn a_ppermute_with_a_repeated_source_is_refused() {
    let err = error_of(shard_map_program(
        &mesh(&[("x", 4)]),
        &[spec("P('x')")],
        &[spec("P('x')")],
        &[f32(&[4])],
        |a| vec![a[0].ppermute("x", &[(0, 1), (0, 2)])],
    ));
    assert!(err.contains("sources must be unique"), "{err}");
}

#[test]
fn a_psum_scatter_whose_dimension_does_not_divide_is_refused() {
    let err = error_of(shard_map_program(
        &mesh(&[("x", 2)]),
        &[spec("P('x')")],
        &[spec("P('x')")],
        &[f32(&[2, 3])],
        |a| vec![a[0].psum_scatter("x", 1, true)],
    ));
    assert!(
        err.contains("size 3, which is not divisible by the 2 devices"),
        "{err}"
    );
}

#[test]
fn an_out_spec_claiming_replication_of_a_varying_value_is_refused() {
    let err = error_of(shard_map_program(
        &mesh(&[("x", 2)]),
        &[spec("P('x')")],
        &[spec("P()")],
        &[f32(&[4])],
        |a| vec![a[0].clone()],
    ));
    assert!(
        err.contains("claim the result is replicated over 'x'"),
        "{err}"
    );
    // Reducing first makes it replicated, so the same out_spec is accepted.
    let ok = run_1d(2, &iota(&[4]), "P()", |x| x.psum(&["x"]));
    assert_eq!(ok, vec![2.0, 4.0]);
}

#[test]
fn pmax_has_no_derivative() {
    let program = shard_map_program(
        &mesh(&[("x", 2)]),
        &[spec("P('x')")],
        &[spec("P('x')")],
        &[f32(&[4])],
        |a| vec![a[0].pmax(&["x"])],
    )
    .unwrap();
    let err = vjp(&program).unwrap_err().to_string();
    assert!(err.contains("pmax is not differentiable"), "{err}");
}

#[test]
fn pmap_maps_over_the_leading_dimension() {
    let program = trace(&[f32(&[4, 3])], |a| {
        pmap("i", &[&a[0]], |rows| vec![&rows[0] / &rows[0].psum(&["i"])])
    })
    .unwrap();
    let x = iota(&[4, 3]);
    let got = eval_closed(&program, &[x]).unwrap()[0].to_vec();
    let col_sums = [18.0, 22.0, 26.0];
    let want: Vec<f64> = (0..12).map(|v| v as f64 / col_sums[v % 3]).collect();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
    }
}

#[test]
fn pargmax_and_axis_index_name_devices_along_the_axis() {
    let input = Array::new(DType::F32, &[4], vec![3.0, 9.0, 9.0, 1.0]).unwrap();
    let got = run_1d(4, &input, "P('x')", |x| x.pargmax("x").astype(DType::F32));
    assert_eq!(got, vec![1.0; 4], "ties go to the lowest index");
    let got = run_1d(4, &input, "P('x')", |x| x.pargmin("x").astype(DType::F32));
    assert_eq!(got, vec![3.0; 4]);
}

#[test]
fn psum_within_index_groups_sums_each_group() {
    let got = run_1d(4, &iota(&[4]), "P('x')", |x| {
        x.psum_in_groups(&["x"], &[vec![0, 2], vec![1, 3]])
    });
    assert_eq!(got, vec![2.0, 4.0, 2.0, 4.0]);
}

#[test]
fn pbroadcast_copies_the_source_and_sends_gradients_back_to_it() {
    let got = run_1d(4, &iota(&[4]), "P('x')", |x| x.pbroadcast("x", 2));
    assert_eq!(got, vec![2.0; 4]);
    let program = shard_map_program(
        &mesh(&[("x", 4)]),
        &[spec("P('x')")],
        &[spec("P('x')")],
        &[f32(&[4])],
        |a| vec![a[0].pbroadcast("x", 2)],
    )
    .unwrap();
    let ct = Array::new(DType::F32, &[4], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let grad = eval_closed(&vjp(&program).unwrap(), &[iota(&[4]), ct]).unwrap();
    assert_eq!(grad[0].to_vec(), vec![0.0, 0.0, 10.0, 0.0]);
}

#[test]
fn untiled_all_to_all_moves_the_device_axis() {
    // Each of 2 devices holds a [2, 3] block; untiled all_to_all splits dimension 0 (one row per
    // device), removes it, and stacks the received rows at dimension 1: blocks of [3, 2].
    let input = iota(&[4, 3]);
    let program = shard_map_program(
        &mesh(&[("x", 2)]),
        &[spec("P('x')")],
        &[spec("P('x')")],
        &[input.aval()],
        |a| vec![a[0].all_to_all("x", 0, 1, false)],
    )
    .unwrap();
    let out = eval_closed(&program, &[input]).unwrap();
    assert_eq!(out[0].shape(), vec![6, 2]);
    // Device 0 gets row 0 of both devices ([0,1,2] and [6,7,8]) as columns; device 1 the rows 1.
    assert_eq!(
        out[0].to_vec(),
        vec![0.0, 6.0, 1.0, 7.0, 2.0, 8.0, 3.0, 9.0, 4.0, 10.0, 5.0, 11.0]
    );
}

#[test]
fn a_replicated_operand_gets_the_sum_of_every_devices_gradient() {
    // loss = sum_devices sum(x_block * w), w replicated: dloss/dw = sum of all blocks.
    let m = mesh(&[("x", 2), ("y", 2)]);
    let program = shard_map_program(
        &m,
        &[spec("P(('x', 'y'))"), spec("P()")],
        &[spec("P()")],
        &[f32(&[8, 3]), f32(&[3])],
        |a| vec![(&a[0] * &a[1]).sum(&[0, 1]).psum(&["x", "y"])],
    )
    .unwrap();
    let x = iota(&[8, 3]);
    let w = Array::new(DType::F32, &[3], vec![1.0, -1.0, 2.0]).unwrap();
    let loss = eval_closed(&program, &[x.clone(), w.clone()]).unwrap();
    let col = |c: usize| (0..8).map(|r| (r * 3 + c) as f64).sum::<f64>();
    assert_eq!(loss[0].to_vec(), vec![col(0) - col(1) + 2.0 * col(2)]);
    let grads = eval_closed(
        &vjp(&program).unwrap(),
        &[x, w, Array::scalar(DType::F32, 1.0)],
    )
    .unwrap();
    assert_eq!(grads[1].to_vec(), vec![col(0), col(1), col(2)]);
    assert_eq!(grads[0].to_vec(), [1.0, -1.0, 2.0].repeat(8));
}

#[test]
fn a_shard_map_program_prints_and_parses_back_with_its_varying_axes() {
    use tessera_ir::text::{parse_closed, print_closed};
    let program = shard_map_program(
        &mesh(&[("x", 2), ("y", 2)]),
        &[spec("P('x', 'y')")],
        &[spec("P('x')")],
        &[f32(&[4, 4])],
        |a| vec![a[0].sin().psum(&["y"])],
    )
    .unwrap();
    let text = print_closed(&program, 0);
    // As JAX prints several axes: in parentheses.
    assert!(text.contains("f32[2,2]{V:(x,y)}"), "{text}");
    let parsed = parse_closed(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    tessera_ir::verify(&parsed).unwrap();
    assert_eq!(print_closed(&parsed, 0), text);
    let x = iota(&[4, 4]);
    assert_eq!(
        eval_closed(&parsed, std::slice::from_ref(&x)).unwrap(),
        eval_closed(&program, &[x]).unwrap()
    );
}

/// A program over the 2×2 mesh (`x`, `y`) with `f` applied to `[4, 8]` blocks laid out by
/// `P('x', 'y')`, and the same program with each `(from, to)` of `edits` replaced in its text.
fn with_text_replaced(
    f: impl FnOnce(&Tensor) -> Tensor,
    edits: &[(&str, &str)],
) -> (tessera_ir::ClosedJaxpr, tessera_ir::ClosedJaxpr) {
    use tessera_ir::text::{parse_closed, print_closed};
    let program = shard_map_program(
        &mesh(&[("x", 2), ("y", 2)]),
        &[spec("P('x', 'y')")],
        &[spec("P('x', 'y')")],
        &[f32(&[4, 8])],
        |a| vec![f(&a[0])],
    )
    .unwrap();
    let mut text = print_closed(&program, 0);
    for (from, to) in edits {
        assert!(text.contains(from), "{from}: {text}");
        text = text.replace(from, to);
    }
    let replaced = parse_closed(&text).unwrap();
    tessera_ir::verify(&replaced).unwrap();
    (program, replaced)
}

#[test]
fn negative_collective_dimensions_count_from_the_end_in_every_rule() {
    use tessera_ir::vmap;
    type Case = (
        Box<dyn FnOnce(&Tensor) -> Tensor>,
        Vec<(&'static str, &'static str)>,
    );
    let cases: Vec<Case> = vec![
        (
            Box::new(|x| x.all_gather("y", 1, true)),
            vec![("all_gather_dimension=1", "all_gather_dimension=-1")],
        ),
        (
            Box::new(|x| x.all_gather("y", 2, false).reshape(&[2, 8])),
            vec![("all_gather_dimension=2", "all_gather_dimension=-1")],
        ),
        (
            Box::new(|x| x.psum_scatter("x", 1, true).all_gather("x", 1, true)),
            vec![("scatter_dimension=1", "scatter_dimension=-1")],
        ),
        (
            Box::new(|x| x.all_to_all("y", 1, 0, true).reshape(&[2, 4])),
            vec![
                ("concat_axis=0", "concat_axis=-2"),
                ("split_axis=1", "split_axis=-1"),
            ],
        ),
    ];
    let input = iota(&[4, 8]);
    let batch = iota(&[3, 4, 8]);
    for (f, edits) in cases {
        let (positive, negative) = with_text_replaced(f, &edits);
        let to = edits[0].1;
        let want = eval_closed(&positive, std::slice::from_ref(&input)).unwrap();
        assert_eq!(
            eval_closed(&negative, std::slice::from_ref(&input)).unwrap(),
            want,
            "{to}"
        );
        // Batched, the dimension moves past the batch dimension: -1 stays the last one.
        let batched = |p| vmap(p, &[Some(0)], &[0], 3).unwrap_or_else(|e| panic!("{to}: {e}"));
        let want = eval_closed(&batched(&positive), std::slice::from_ref(&batch)).unwrap();
        let got = eval_closed(&batched(&negative), std::slice::from_ref(&batch));
        assert_eq!(got.ok(), Some(want), "{to}");
        // The VJP reads the same dimensions.
        let ct = iota(&positive.jaxpr.out_avals()[0].shape);
        let grad = |p| eval_closed(&vjp(p).unwrap(), &[input.clone(), ct.clone()]).unwrap();
        assert_eq!(grad(&negative), grad(&positive), "{to}");
    }
}

/// Small integers, different for each `seed`, so sums of products are exact in `f32`.
fn ints(shape: &[i64], seed: i64) -> Array {
    let n: i64 = shape.iter().product();
    let values = (0..n)
        .map(|i| ((i * 7 + seed * 5 + 3) % 11 - 5) as f64)
        .collect();
    Array::new(DType::F32, shape, values).unwrap()
}

fn inner(a: &Array, b: &Array) -> f64 {
    a.to_vec().iter().zip(b.to_vec()).map(|(x, y)| x * y).sum()
}

/// Checks `<ct, f(t)> = <f^T(ct), t>` for a linear `f` under `shard_map` over the 2×2 mesh
/// (`x`, `y`), `[16, 4]` operands split over both axes on dimension 0, `f^T` being the VJP.
fn check_transpose(what: &str, f: impl FnOnce(&Tensor) -> Tensor) {
    let both = spec("P(('x', 'y'))");
    let program = shard_map_program(
        &mesh(&[("x", 2), ("y", 2)]),
        std::slice::from_ref(&both),
        std::slice::from_ref(&both),
        &[f32(&[16, 4])],
        |a| vec![f(&a[0])],
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    let t = ints(&[16, 4], 1);
    let ct = ints(&program.jaxpr.out_avals()[0].shape, 2);
    let y = eval_closed(&program, std::slice::from_ref(&t)).unwrap();
    let vjp_program = vjp(&program).unwrap_or_else(|e| panic!("{what}: {e}"));
    tessera_ir::verify(&vjp_program).unwrap();
    let grad = eval_closed(&vjp_program, &[t.clone(), ct.clone()])
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(grad[0].shape(), t.shape(), "{what}: the cotangent's shape");
    let (lhs, rhs) = (inner(&ct, &y[0]), inner(&grad[0], &t));
    assert!(lhs != 0.0, "{what}: a zero product checks nothing");
    assert_eq!(lhs, rhs, "{what}: <ct, f(t)> vs <f^T(ct), t>");
}

#[test]
fn collectives_over_several_axes_transpose_over_all_of_them() {
    let xy = ["x", "y"];
    let yx = ["y", "x"];
    check_transpose("all_gather x,y", |a| a.all_gather_over(&xy, None, 0, true));
    check_transpose("all_gather y,x untiled", |a| {
        a.all_gather_over(&yx, None, 1, false)
    });
    check_transpose("psum_scatter x,y", |a| {
        a.psum_scatter_over(&xy, None, 0, true)
    });
    check_transpose("psum_scatter y,x untiled", |a| {
        a.reshape(&[4, 4, 1]).psum_scatter_over(&yx, None, 1, false)
    });
    check_transpose("ppermute x,y cycle", |a| {
        a.ppermute_over(&xy, &[(0, 1), (1, 2), (2, 3), (3, 0)])
    });
    check_transpose("ppermute y,x partial", |a| {
        a.ppermute_over(&yx, &[(0, 3), (3, 1)])
    });
    check_transpose("all_to_all x,y", |a| {
        a.all_to_all_over(&xy, None, 0, 1, true)
    });
    check_transpose("pbroadcast x,y", |a| a.pbroadcast_over(&xy, 2));
    check_transpose("pbroadcast y,x", |a| a.pbroadcast_over(&yx, 1));
}

#[test]
fn collectives_with_index_groups_transpose_within_them() {
    let xy = ["x", "y"];
    let pairs = [vec![0, 3], vec![1, 2]];
    check_transpose("psum groups", |a| a.psum_in_groups(&xy, &pairs));
    check_transpose("all_gather groups", |a| {
        a.all_gather_over(&xy, Some(&pairs), 0, true)
    });
    check_transpose("all_gather groups untiled", |a| {
        a.all_gather_over(&["y", "x"], Some(&pairs), 2, false)
    });
    check_transpose("psum_scatter groups", |a| {
        a.psum_scatter_over(&xy, Some(&pairs), 1, true)
    });
    check_transpose("all_to_all groups", |a| {
        a.all_to_all_over(&xy, Some(&pairs), 1, 0, true)
    });
}

#[test]
fn pbroadcast_within_index_groups_transposes_to_each_groups_source() {
    use tessera_ir::text::{parse_closed, print_closed};
    // The tracing API has no groups for pbroadcast (JAX neither); a parsed one may carry them.
    let program = shard_map_program(
        &mesh(&[("x", 2), ("y", 2)]),
        &[spec("P(('x', 'y'))")],
        &[spec("P(('x', 'y'))")],
        &[f32(&[4])],
        |a| vec![a[0].pbroadcast_over(&["x", "y"], 1)],
    )
    .unwrap();
    let text = print_closed(&program, 0).replace(
        "source=1",
        "axis_index_groups=((0, 3), (2, 1))\n            source=1",
    );
    let program = parse_closed(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    tessera_ir::verify(&program).unwrap();
    let t = Array::new(DType::F32, &[4], vec![10.0, 20.0, 30.0, 40.0]).unwrap();
    assert_eq!(
        eval_closed(&program, std::slice::from_ref(&t)).unwrap()[0].to_vec(),
        vec![40.0, 20.0, 20.0, 40.0],
        "the group (0, 3) takes device 3's value, (2, 1) device 1's"
    );
    let ct = Array::new(DType::F32, &[4], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let grad = eval_closed(&vjp(&program).unwrap(), &[t, ct]).unwrap();
    assert_eq!(grad[0].to_vec(), vec![0.0, 5.0, 0.0, 5.0]);
}

#[test]
fn pshuffle_takes_each_devices_value_from_its_source() {
    // Device i receives the block of device perm[i].
    let got = run_1d(4, &iota(&[4]), "P('x')", |x| x.pshuffle("x", &[2, 0, 3, 1]));
    assert_eq!(got, vec![2.0, 0.0, 3.0, 1.0]);
    let err = error_of(shard_map_program(
        &mesh(&[("x", 4)]),
        &[spec("P('x')")],
        &[spec("P('x')")],
        &[f32(&[4])],
        |a| vec![a[0].pshuffle("x", &[0, 0, 1, 2])],
    ));
    assert!(err.contains("is not a permutation"), "{err}");
}

#[test]
fn pswapaxes_swaps_the_device_axis_with_a_dimension() {
    // 3 devices, each a [1, 3] block of a [3, 3] array: device d holds row d. Swapping the
    // device axis with dimension 1 gives device d column d of the array (as a row).
    let input = iota(&[3, 3]);
    let got = run_1d(3, &input, "P('x')", |x| x.pswapaxes("x", 1));
    assert_eq!(got, vec![0.0, 3.0, 6.0, 1.0, 4.0, 7.0, 2.0, 5.0, 8.0]);
    // The same as all_to_all over that axis, untiled; gradients flow back.
    let same = run_1d(3, &input, "P('x')", |x| x.all_to_all("x", 1, 1, false));
    assert_eq!(got, same);
    let err = error_of(shard_map_program(
        &mesh(&[("x", 3)]),
        &[spec("P('x')")],
        &[spec("P('x')")],
        &[f32(&[3, 2])],
        |a| vec![a[0].pswapaxes("x", 1)],
    ));
    assert!(err.contains("of size 3"), "{err}");
}

#[test]
fn pmax_pmin_and_pmean_reduce_within_index_groups() {
    let groups = vec![vec![0, 3], vec![1, 2]];
    let input = Array::new(DType::F32, &[4], vec![1.0, 5.0, 2.0, 7.0]).unwrap();
    let max = run_1d(4, &input, "P('x')", |x| x.pmax_in_groups(&["x"], &groups));
    assert_eq!(max, vec![7.0, 5.0, 5.0, 7.0]);
    let min = run_1d(4, &input, "P('x')", |x| x.pmin_in_groups(&["x"], &groups));
    assert_eq!(min, vec![1.0, 2.0, 2.0, 1.0]);
    let mean = run_1d(4, &input, "P('x')", |x| x.pmean_in_groups(&["x"], &groups));
    assert_eq!(mean, vec![4.0, 3.5, 3.5, 4.0]);
}

#[test]
fn index_groups_that_do_not_cover_the_axis_once_are_refused() {
    for bad in [
        vec![vec![0, 0], vec![1, 2]],
        vec![vec![0, 1], vec![2]],
        vec![vec![0, 1]],
    ] {
        let err = error_of(shard_map_program(
            &mesh(&[("x", 4)]),
            &[spec("P('x')")],
            &[spec("P('x')")],
            &[f32(&[4])],
            |a| vec![a[0].psum_in_groups(&["x"], &bad)],
        ));
        assert!(err.contains("axis_index_groups"), "{bad:?}: {err}");
    }
}

/// `x[i, j, k]` of a [2, 3, 4] array is `100 i + 10 j + k`.
fn digits() -> Array {
    let values = (0..24).map(|v| f64::from(100 * (v / 12) + 10 * (v / 4 % 3) + v % 4));
    Array::new(DType::F32, &[2, 3, 4], values.collect()).unwrap()
}

#[test]
fn pmap_maps_any_dimension_broadcasts_unmapped_arguments_and_stacks_results_anywhere() {
    // Map dimension 1 of x (3 devices); w is seen whole by every device. Each device's slice
    // x[:, d, :] ([2, 4]) plus w; stacked at dimension 2 of the result, and psum'd over the
    // devices as an unmapped result.
    let axes = PmapAxes {
        in_axes: vec![Some(1), None],
        out_axes: vec![Some(2), None],
        axis_size: None,
    };
    let program = trace(&[f32(&[2, 3, 4]), f32(&[4])], |a| {
        pmap_with("i", &[&a[0], &a[1]], &axes, |s| {
            let y = &s[0] + &s[1];
            vec![y.clone(), y.psum(&["i"])]
        })
    })
    .unwrap();
    tessera_ir::verify(&program).unwrap();
    let w = Array::new(DType::F32, &[4], vec![0.5, 0.25, 0.0, -1.0]).unwrap();
    let out = eval_closed(&program, &[digits(), w.clone()]).unwrap();
    assert_eq!(out[0].shape(), vec![2, 4, 3]);
    // out[0][i, k, d] = x[i, d, k] + w[k].
    let x = digits().to_vec();
    let wv = w.to_vec();
    let stacked: Vec<f64> = (0..24)
        .map(|v| {
            let (i, k, d) = (v / 12, v / 3 % 4, v % 3);
            x[i * 12 + d * 4 + k] + wv[k]
        })
        .collect();
    assert_eq!(out[0].to_vec(), stacked);
    assert_eq!(out[1].shape(), vec![2, 4]);
    let summed: Vec<f64> = (0..8)
        .map(|v| {
            let (i, k) = (v / 4, v % 4);
            (0..3).map(|d| x[i * 12 + d * 4 + k] + wv[k]).sum()
        })
        .collect();
    assert_eq!(out[1].to_vec(), summed);
}

#[test]
fn pmap_with_no_mapped_argument_takes_axis_size_and_refuses_mismatches() {
    let axes = PmapAxes {
        in_axes: vec![None],
        out_axes: vec![Some(0)],
        axis_size: Some(3),
    };
    let program = trace(&[f32(&[2])], |a| {
        pmap_with("i", &[&a[0]], &axes, |s| {
            let i = Tensor::axis_index(&s[0], "i").astype(DType::F32);
            vec![&s[0] * &i]
        })
    })
    .unwrap();
    let x = Array::new(DType::F32, &[2], vec![1.0, 2.0]).unwrap();
    let out = eval_closed(&program, &[x]).unwrap();
    assert_eq!(out[0].to_vec(), vec![0.0, 0.0, 1.0, 2.0, 2.0, 4.0]);

    let refused = |axes: PmapAxes, avals: &[ShapedArray]| {
        let n = avals.len();
        error_of(trace(avals, |a| {
            let refs: Vec<&Tensor> = a.iter().collect();
            pmap_with("i", &refs, &axes, |s| s[..n].to_vec())
        }))
    };
    let none = PmapAxes {
        in_axes: vec![None],
        ..PmapAxes::default()
    };
    assert!(refused(none, &[f32(&[2])]).contains("give axis_size"));
    let disagree = PmapAxes {
        in_axes: vec![Some(0), Some(1)],
        ..PmapAxes::default()
    };
    let err = refused(disagree, &[f32(&[2, 3]), f32(&[2, 3])]);
    assert!(err.contains("must agree"), "{err}");
    let past = PmapAxes {
        in_axes: vec![Some(2)],
        ..PmapAxes::default()
    };
    assert!(refused(past, &[f32(&[2, 3])]).contains("rank 2"));
    // An unmapped result must be the same on every device.
    let varying = PmapAxes {
        out_axes: vec![None],
        ..PmapAxes::default()
    };
    let err = refused(varying, &[f32(&[2, 3])]);
    assert!(err.contains("vary") || err.contains("out_spec"), "{err}");
}

#[test]
fn the_gradient_flows_back_through_pmaps_axes() {
    let axes = PmapAxes {
        in_axes: vec![Some(1), None],
        out_axes: vec![None],
        axis_size: None,
    };
    let program = trace(&[f32(&[2, 3, 4]), f32(&[4])], |a| {
        pmap_with("i", &[&a[0], &a[1]], &axes, |s| {
            vec![(&s[0] * &s[1]).sum(&[0, 1]).psum(&["i"])]
        })
    })
    .unwrap();
    let w = Array::new(DType::F32, &[4], vec![0.5, 0.25, 0.0, -1.0]).unwrap();
    let grads = eval_closed(
        &vjp(&program).unwrap(),
        &[digits(), w.clone(), Array::scalar(DType::F32, 1.0)],
    )
    .unwrap();
    // d/dx = w broadcast; d/dw[k] = sum over i, d of x[i, d, k].
    let wv = w.to_vec();
    assert_eq!(
        grads[0].to_vec(),
        (0..24).map(|v| wv[v % 4]).collect::<Vec<_>>()
    );
    let x = digits().to_vec();
    let dw: Vec<f64> = (0..4).map(|k| (0..6).map(|r| x[r * 4 + k]).sum()).collect();
    assert_eq!(grads[1].to_vec(), dw);
}

#[test]
fn positional_axes_of_psum_pmax_and_pmin_reduce_those_dimensions() {
    use tessera_ir::text::{parse_closed, print_closed};
    // JAX prints `psum(x, (0, 'x'))` as `psum[axes=(0, 'x') ...]`: dimension 0 of the block is
    // reduced, then the mesh axis. Written here by replacing the reduction and the collective
    // of the same program traced with both spelled out.
    let input = iota(&[4, 3]);
    type Reduce = fn(&Tensor) -> Tensor;
    let cases: [(&str, &str, Reduce); 3] = [
        ("psum", "reduce_sum", |x| x.sum(&[0]).psum(&["x"])),
        ("pmax", "reduce_max", |x| x.max(&[0]).pmax(&["x"])),
        ("pmin", "reduce_min", |x| x.min(&[0]).pmin(&["x"])),
    ];
    for (prim, reduce, f) in cases {
        let reference = shard_map_program(
            &mesh(&[("x", 2)]),
            &[spec("P('x')")],
            &[spec("P()")],
            &[input.aval()],
            |a| vec![f(&a[0])],
        )
        .unwrap();
        let text = print_closed(&reference, 0);
        for axis in ["0", "-2"] {
            let positional: String = text
                .lines()
                .filter(|l| !l.contains(reduce))
                .map(|l| match l.contains(&format!("= {prim}[")) {
                    true => format!(
                        "{} = {prim}[axes=({axis}, 'x') axis_index_groups=None] c",
                        l.split(" = ").next().unwrap()
                    ),
                    false => l.to_owned(),
                })
                .collect::<Vec<_>>()
                .join("\n");
            let parsed = parse_closed(&positional).unwrap_or_else(|e| panic!("{e}\n{positional}"));
            let got = eval_closed(&parsed, std::slice::from_ref(&input)).unwrap();
            let want = eval_closed(&reference, std::slice::from_ref(&input)).unwrap();
            assert_eq!(
                got[0].to_vec(),
                want[0].to_vec(),
                "{prim} {axis}:\n{positional}"
            );
            // Differentiable as the spelled-out program (psum is linear).
            if prim == "psum" {
                let ct = Array::new(DType::F32, &[3], vec![1.0, -2.0, 0.5]).unwrap();
                let args = [input.clone(), ct];
                let g = eval_closed(&vjp(&parsed).unwrap(), &args).unwrap();
                let w = eval_closed(&vjp(&reference).unwrap(), &args).unwrap();
                assert_eq!(g[0].to_vec(), w[0].to_vec());
            }
        }
    }
}

/// The gradient of `sum(pswapaxes(x) * w)` inside shard_map, as JAX 0.10.2 computes it (the
/// numbers of `jax.grad` on 2 CPU devices): `w` put through the same swap. JAX refused nothing
/// here, where Tessera refused every untiled all_to_all's reverse mode.
#[test]
fn the_gradient_of_pswapaxes_is_jaxs() {
    let program = shard_map_program(
        &mesh(&[("i", 2)]),
        &[spec("P('i')")],
        &[spec("P('i')")],
        &[f32(&[2, 2, 3])],
        |a| {
            let local = a[0].reshape(&[2, 3]).pswapaxes("i", 0);
            vec![local.reshape(&[1, 2, 3])]
        },
    )
    .unwrap();
    let x = iota(&[2, 2, 3]);
    let w: Vec<f64> = (0..12).map(|k| f64::from(k * k) / 10.0 + 1.0).collect();
    let w = Array::new(DType::F32, &[2, 2, 3], w).unwrap();
    let grad = eval_closed(&vjp(&program).unwrap(), &[x, w]).unwrap();
    let jax = [1.0, 1.1, 1.4, 4.6, 5.9, 7.4, 1.9, 2.6, 3.5, 9.1, 11.0, 13.1];
    for (got, want) in grad[0].to_vec().iter().zip(jax) {
        assert!(
            (got - want).abs() < 1e-5,
            "{:?} vs {jax:?}",
            grad[0].to_vec()
        );
    }
}

/// An untiled all_to_all along one axis transposes (JAX computes it); along two different axes
/// JAX refuses its reverse mode (`jaxpr_collectives_cases.json`'s `all_to_all_untiled_1` has
/// no gradient), and so does Tessera, naming the fix.
#[test]
fn untiled_all_to_alls_transpose_along_one_axis_and_are_refused_along_two() {
    check_transpose("pswapaxes x", |a| a.reshape(&[2, 8, 1]).pswapaxes("x", 0));
    check_transpose("all_to_all x untiled, split = concat", |a| {
        a.reshape(&[4, 2, 2]).all_to_all("x", 1, 1, false)
    });
    let program = shard_map_program(
        &mesh(&[("x", 2), ("y", 2)]),
        &[spec("P(('x', 'y'))")],
        &[spec("P(('x', 'y'))")],
        &[f32(&[16, 4])],
        |a| vec![a[0].reshape(&[2, 8, 1]).all_to_all("x", 0, 1, false)],
    )
    .unwrap();
    let err = vjp(&program).map(|_| ()).unwrap_err().to_string();
    assert!(
        err.contains("has no reverse mode") && err.contains("tiled=True"),
        "{err}"
    );
}
