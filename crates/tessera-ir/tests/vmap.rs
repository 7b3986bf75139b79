//! Batching: for every primitive's example program, `vmap(f)` equals `f` evaluated on each batch
//! slice and stacked, with arguments batched at the front, batched at their last position,
//! and left unbatched, and results put at other positions than the front. Also compositions with
//! the differentiation transforms, checked numerically.

#![allow(clippy::unwrap_used, missing_docs)]

mod prims;

use prims::{
    NOT_BATCHED, Rng, assert_close, example, failures_per_primitive, index_axis, prog, stack,
};
use tessera_ir::interp::eval_closed;
use tessera_ir::trace::{call_closed, trace};
use tessera_ir::{Array, ClosedJaxpr, Prim, ShapedArray, jvp, value_and_grad, verify, vmap};

const B: i64 = 3;

fn eval(p: &ClosedJaxpr, args: &[Array]) -> Vec<Array> {
    eval_closed(p, args).unwrap()
}

fn batched_aval(a: &ShapedArray, axis: Option<usize>) -> ShapedArray {
    let mut shape = a.shape.clone();
    if let Some(ax) = axis {
        shape.insert(ax, B);
    }
    ShapedArray::new(a.dtype, &shape)
}

/// Checks `vmap(f, in_axes, out_axes)` against a loop over the batch.
fn check(f: &ClosedJaxpr, in_axes: &[Option<usize>], out_axes: &[usize], rng: &mut Rng) {
    let g = vmap(f, in_axes, out_axes, B).unwrap();
    verify(&g).unwrap();
    let in_avals = f.jaxpr.in_avals();
    let args: Vec<Array> = in_avals
        .iter()
        .zip(in_axes)
        .map(|(a, &ax)| rng.array(&batched_aval(a, ax)))
        .collect();
    let got = eval(&g, &args);
    let per_element: Vec<Vec<Array>> = (0..B as usize)
        .map(|b| {
            let slice: Vec<Array> = args
                .iter()
                .zip(in_axes)
                .map(|(a, &ax)| ax.map_or_else(|| a.clone(), |ax| index_axis(a, ax, b)))
                .collect();
            eval(f, &slice)
        })
        .collect();
    for (k, (aval, &ax)) in f.jaxpr.out_avals().iter().zip(out_axes).enumerate() {
        let parts: Vec<Array> = per_element.iter().map(|outs| outs[k].clone()).collect();
        let want = stack(&parts, ax, aval);
        let what = format!("result {k} with in_axes {in_axes:?}, out_axes {out_axes:?}");
        assert_close(&what, &got[k], &want, 1e-12);
    }
}

/// The in_axes/out_axes combinations every example is checked with.
fn variants(f: &ClosedJaxpr) -> Vec<(Vec<Option<usize>>, Vec<usize>)> {
    let ins = f.jaxpr.in_avals();
    let outs = f.jaxpr.out_avals();
    let n = ins.len();
    let mut v = vec![
        (vec![Some(0); n], vec![0; outs.len()]),
        (
            ins.iter().map(|a| Some(a.rank())).collect(),
            outs.iter().map(ShapedArray::rank).collect(),
        ),
    ];
    for i in 0..n {
        let mut axes = vec![None; n];
        axes[i] = Some(ins[i].rank().min(1));
        let out_axes = outs.iter().map(|a| a.rank().min(1)).collect();
        v.push((axes, out_axes));
    }
    v
}

#[test]
fn vmap_matches_a_loop_for_every_primitive() {
    let failures = failures_per_primitive(|i, prim, f| {
        if NOT_BATCHED.contains(&prim) {
            // Refused with an error naming a reduced/unreduced collective, never a panic.
            let err = vmap(f, &[Some(0)], &[0], B).unwrap_err().to_string();
            assert!(
                err.contains("not supported") && err.contains("NotImplementedError"),
                "{err}"
            );
            return;
        }
        let mut rng = Rng(2000 + i as u64);
        for (in_axes, out_axes) in variants(f) {
            check(f, &in_axes, &out_axes, &mut rng);
        }
    });
    assert!(
        failures.is_empty(),
        "vmap checks failed for\n{}",
        failures.join("\n")
    );
}

#[test]
fn vmap_of_indexing_with_every_batching_pattern() {
    // Batched and shared operands and indices, in every combination, for the indexing
    // primitives whose rules differ per pattern.
    let mut rng = Rng(5);
    for prim in [
        Prim::Gather,
        Prim::ScatterAdd,
        Prim::Scatter,
        Prim::ScatterMul,
        Prim::ScatterMin,
        Prim::ScatterMax,
        Prim::DynamicSlice,
        Prim::DynamicUpdateSlice,
    ] {
        let f = example(prim);
        let n = f.jaxpr.invars.len();
        for mask in 1..(1u32 << n) {
            let in_axes: Vec<Option<usize>> =
                (0..n).map(|i| (mask >> i & 1 == 1).then_some(0)).collect();
            check(&f, &in_axes, &[1], &mut rng);
        }
    }
}

#[test]
fn vmap_rejects_mismatched_axes() {
    let f = prog("a:f64[2]", "b:f64[2] = sin a", "b");
    assert!(vmap(&f, &[Some(0), None], &[0], B).is_err());
    assert!(vmap(&f, &[Some(2)], &[0], B).is_err());
    assert!(vmap(&f, &[Some(0)], &[2], B).is_err());
    assert!(vmap(&f, &[Some(0)], &[], B).is_err());
}

/// `f(x, w) = sum(tanh(x . w)) + sum(x * x)` for one example `x: [3]`.
fn per_example_loss() -> ClosedJaxpr {
    prog(
        "x:f64[3] w:f64[3,2]",
        "h:f64[2] = dot_general[dimension_numbers=(([0], [0]), ([], [])) preferred_element_type=float64] x w
        t:f64[2] = tanh h
        s:f64[] = reduce_sum[axes=(0,) out_sharding=None] t
        q:f64[3] = mul x x
        r:f64[] = reduce_sum[axes=(0,) out_sharding=None] q
        l:f64[] = add s r",
        "l",
    )
}

#[test]
fn grad_of_vmap_equals_the_sum_of_vmap_of_grad() {
    let f = per_example_loss();
    let [x, w] = [
        ShapedArray::new(tessera_ir::DType::F64, &[B, 3]),
        f.jaxpr.in_avals()[1].clone(),
    ];
    // vmap(grad f) over the examples, sharing w.
    let grad = value_and_grad(&f, &[0, 1]).unwrap();
    let per_example = vmap(&grad, &[Some(0), None], &[0, 0, 0], B).unwrap();
    verify(&per_example).unwrap();
    // grad of the batch loss sum(vmap(f)).
    let batched = vmap(&f, &[Some(0), None], &[0], B).unwrap();
    let total = trace(&[x.clone(), w.clone()], |a| {
        let losses = call_closed(&batched, &[&a[0], &a[1]]);
        vec![losses[0].sum(&[0])]
    })
    .unwrap();
    let total_grad = value_and_grad(&total, &[0, 1]).unwrap();
    verify(&total_grad).unwrap();
    let mut rng = Rng(11);
    let args = [rng.array(&x), rng.array(&w)];
    let each = eval(&per_example, &args);
    let all = eval(&total_grad, &args);
    let sum_w = Array::from_values(
        tessera_ir::DType::F64,
        each[2].values().sum_axis(ndarray::Axis(0)),
    );
    assert_close("d/dx", &all[1], &each[1], 1e-12);
    assert_close("d/dw", &all[2], &sum_w, 1e-12);
    let sum_l = each[0].to_vec().iter().sum::<f64>();
    assert!((all[0].to_vec()[0] - sum_l).abs() < 1e-12);
    // The per-example gradients also match a loop.
    check(&grad, &[Some(0), None], &[0, 1, 0], &mut rng);
}

#[test]
fn jvp_of_vmap_equals_vmap_of_jvp() {
    let f = per_example_loss();
    let batched = vmap(&f, &[Some(0), None], &[0], B).unwrap();
    let j_of_v = jvp(&batched).unwrap();
    let v_of_j = vmap(
        &jvp(&f).unwrap(),
        &[Some(0), None, Some(0), None],
        &[0, 0],
        B,
    )
    .unwrap();
    verify(&j_of_v).unwrap();
    verify(&v_of_j).unwrap();
    let mut rng = Rng(13);
    let avals = j_of_v.jaxpr.in_avals();
    let mut args: Vec<Array> = avals.iter().map(|a| rng.array(a)).collect();
    // The tangent of the shared `w` must be shared for the two to agree.
    let tw = rng.direction(&avals[3]);
    args[3] = tw;
    let a = eval(&j_of_v, &args);
    let b = eval(&v_of_j, &args);
    assert_close("values", &a[0], &b[0], 1e-12);
    assert_close("tangents", &a[1], &b[1], 1e-12);
    // And jvp(vmap(f)) against finite differences of vmap(f).
    let eps = 1e-6;
    let at = |s: f64| {
        let x: Vec<Array> = (0..2)
            .map(|i| prims::axpy(&args[i], s, &args[2 + i]))
            .collect();
        eval(&batched, &x).remove(0)
    };
    let fd = Array::from_values(
        tessera_ir::DType::F64,
        (&at(eps).values() - &at(-eps).values()) / (2.0 * eps),
    );
    assert_close("jvp(vmap) vs finite differences", &a[1], &fd, 1e-6);
}

#[test]
fn vmap_of_vmap_batches_two_axes() {
    let f = example(Prim::DotGeneral);
    let inner = vmap(&f, &[Some(1), None], &[2], B).unwrap();
    let mut rng = Rng(17);
    check(&inner, &[Some(0), Some(3)], &[1], &mut rng);
}

#[test]
fn vmap_shifts_negative_axes() {
    let f = prog(
        "a:f64[2,1,3] b:f64[2,3]",
        "c:f64[2,3] = squeeze[dimensions=(-2,)] a
        d:f64[2,3,1] = expand_dims[dimensions=(-1,)] c
        e:f64[2,3] = reduce_sum[axes=(-1,) out_sharding=None] d
        f:f64[2,3] = cumsum[axis=-1 reverse=False] e
        g:f64[2,6] = concatenate[dimension=-1] f b
        h:i32[2] = argmax[axes=(-1,) index_dtype=int32] g",
        "g, h",
    );
    let mut rng = Rng(23);
    for (in_axes, out_axes) in variants(&f) {
        check(&f, &in_axes, &out_axes, &mut rng);
    }
}

#[test]
fn vmap_reports_cases_it_cannot_batch() {
    let f = prog(
        "a:bool[3] v:bool[]",
        "b:bool[5] = pad[padding_config=((1, 1, 0),)] a v",
        "b",
    );
    let err = vmap(&f, &[Some(0), Some(0)], &[0], B).unwrap_err();
    assert!(
        err.to_string().contains("a batched boolean padding value"),
        "{err}"
    );
}

#[test]
fn a_reshape_with_dimensions_is_refused_when_parsed_before_vmap_sees_it() {
    let text = "{ lambda ; a:f64[2,3]. let\n    \
        b:f64[3,2] = reshape[dimensions=(1, 0) new_sizes=(3, 2) sharding=None] a\n  in (b,) }";
    let err = tessera_ir::text::parse_closed(text).unwrap_err();
    assert!(
        err.to_string().contains("`dimensions` other than None"),
        "{err}"
    );
}

#[test]
fn vmap_broadcasts_unbatched_and_literal_results() {
    let f = prog(
        "a:f64[2] b:f64[3]",
        "c:f64[2] = sin a\nd:f64[3] = cos b",
        "c, d, a, 2.0:f64[]",
    );
    let mut rng = Rng(29);
    check(&f, &[Some(0), None], &[1, 1, 0, 0], &mut rng);
    let j = jvp(&f).unwrap();
    verify(&j).unwrap();
    assert_eq!(j.jaxpr.outvars.len(), 8);
}
