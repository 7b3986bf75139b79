//! Forward mode: for every primitive's example program, `jvp` agrees with central finite
//! differences in float64, and the existing `vjp` agrees with it through the inner-product
//! identity `<vjp(ct), t> = <ct, jvp(t)>`. Also: symbolic zeros, and second derivatives
//! (forward-over-reverse and reverse-over-reverse) checked numerically.

#![allow(clippy::unwrap_used, missing_docs)]

mod prims;

use prims::{
    FORWARD_ONLY, NOT_DIFFERENTIABLE, Rng, assert_close, axpy, dot, example,
    failures_per_primitive, prog,
};
use tessera_ir::interp::eval_closed;
use tessera_ir::{Array, ClosedJaxpr, Prim, jvp, linearize, value_and_grad, verify, vjp};

fn eval(p: &ClosedJaxpr, args: &[Array]) -> Vec<Array> {
    eval_closed(p, args).unwrap()
}

/// Central differences of `f` at `x` along `t`.
fn finite_difference(f: &ClosedJaxpr, x: &[Array], t: &[Array]) -> Vec<Array> {
    let eps = 1e-6;
    let at = |s: f64| -> Vec<Array> {
        let shifted: Vec<Array> = x.iter().zip(t).map(|(a, b)| axpy(a, s, b)).collect();
        eval(f, &shifted)
    };
    let (plus, minus) = (at(eps), at(-eps));
    plus.iter()
        .zip(&minus)
        .map(|(p, m)| Array::from_values(p.dtype(), (&p.values() - &m.values()) / (2.0 * eps)))
        .collect()
}

/// Whether `f` holds a primitive that has forward-mode derivatives only (`while`).
fn is_forward_only(f: &ClosedJaxpr) -> bool {
    f.jaxpr.eqns.iter().any(|e| FORWARD_ONLY.contains(&e.prim))
}

/// Checks `jvp(f)` against finite differences and `vjp(f)` against `jvp(f)` at random points.
/// `stop_gradient`'s derivative is zero by definition, which finite differences do not see.
fn check(f: &ClosedJaxpr, rng: &mut Rng) {
    check_with(f, rng, true);
}

fn check_with(f: &ClosedJaxpr, rng: &mut Rng, finite_differences: bool) {
    let in_avals = f.jaxpr.in_avals();
    let out_avals = f.jaxpr.out_avals();
    let x: Vec<Array> = in_avals.iter().map(|a| rng.array(a)).collect();
    let t: Vec<Array> = in_avals.iter().map(|a| rng.direction(a)).collect();
    let j = jvp(f).unwrap();
    verify(&j).unwrap();
    let args: Vec<Array> = x.iter().chain(&t).cloned().collect();
    let outs = eval(&j, &args);
    let (ys, dys) = outs.split_at(out_avals.len());
    for (k, (y, want)) in ys.iter().zip(eval(f, &x)).enumerate() {
        assert_close(&format!("primal result {k}"), y, &want, 1e-12);
    }
    let fd = finite_difference(f, &x, &t);
    for (k, (dy, aval)) in dys.iter().zip(&out_avals).enumerate() {
        if !finite_differences {
            assert!(
                dy.to_vec().iter().all(|&v| v == 0.0),
                "tangent {k} must be zero"
            );
        } else if aval.dtype.is_float() {
            assert_close(
                &format!("tangent {k} vs finite differences"),
                dy,
                &fd[k],
                1e-6,
            );
        } else {
            assert!(
                dy.to_vec().iter().all(|&v| v == 0.0),
                "tangent {k} of {aval}"
            );
        }
    }
    if is_forward_only(f) {
        let err = vjp(f).unwrap_err().to_string();
        assert!(err.contains("use scan or fori_loop"), "{err}");
        return;
    }
    let v = vjp(f).unwrap();
    verify(&v).unwrap();
    let ct: Vec<Array> = out_avals.iter().map(|a| rng.direction(a)).collect();
    let args: Vec<Array> = x.iter().chain(&ct).cloned().collect();
    let grads = eval(&v, &args);
    let lhs: f64 = grads.iter().zip(&t).map(|(g, t)| dot(g, t)).sum();
    let rhs: f64 = ct.iter().zip(dys).map(|(c, d)| dot(c, d)).sum();
    assert!(
        (lhs - rhs).abs() <= 1e-9 * (1.0 + rhs.abs()),
        "<vjp(ct), t> = {lhs} but <ct, jvp(t)> = {rhs}"
    );
}

#[test]
fn jvp_matches_finite_differences_and_vjp_for_every_primitive() {
    let failures = failures_per_primitive(|i, prim, f| {
        if NOT_DIFFERENTIABLE.contains(&prim) {
            let err = jvp(f).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                err.contains("not differentiable"),
                "jvp must refuse it, got {err:?}"
            );
            return;
        }
        let mut rng = Rng(1000 + i as u64);
        for _ in 0..3 {
            check_with(f, &mut rng, prim != Prim::StopGradient);
        }
    });
    assert!(
        failures.is_empty(),
        "jvp checks failed for\n{}",
        failures.join("\n")
    );
}

#[test]
fn untouched_values_carry_no_tangent_work() {
    // Only `x` reaches the result through a float path; `i` is an integer and `s` is cut by
    // stop_gradient, so their tangents are symbolic zeros and cost no equations.
    let f = prog(
        "x:f64[3] s:f64[3] i:i32[3]",
        "c:f64[3] = stop_gradient s\nd:f64[3] = convert_element_type[new_dtype=float64 weak_type=False] i\ne:f64[3] = mul c d\ng:f64[3] = sin x\nh:f64[3] = add g e",
        "h, i",
    );
    let j = jvp(&f).unwrap();
    let text = tessera_ir::text::print_closed(&j, 0);
    assert_eq!(j.jaxpr.outvars.len(), 4, "{text}");
    // The tangent is `t_x * cos(x)`: one `cos` and one `mul` beyond the primal equations, and a
    // broadcast of zeros for the integer result.
    let count = |name: &str| {
        j.jaxpr
            .eqns
            .iter()
            .filter(|e| e.prim.name() == name)
            .count()
    };
    assert_eq!((count("cos"), count("mul")), (1, 2), "{text}");
    let mut rng = Rng(7);
    let x: Vec<Array> = f.jaxpr.in_avals().iter().map(|a| rng.array(a)).collect();
    let t: Vec<Array> = f
        .jaxpr
        .in_avals()
        .iter()
        .map(|a| rng.direction(a))
        .collect();
    let args: Vec<Array> = x.iter().chain(&t).cloned().collect();
    let outs = eval(&j, &args);
    let want = Array::from_values(
        tessera_ir::DType::F64,
        &t[0].values() * &x[0].values().mapv(f64::cos),
    );
    assert_close("d sin(x)", &outs[2], &want, 1e-12);
}

/// Constants take no tangent: `d/da (sin(a) * c) = cos(a) * c` along `t`.
#[test]
fn jvp_treats_constants_as_fixed_values() {
    let c = Array::new(tessera_ir::DType::F64, &[2], vec![3.0, -2.0]).unwrap();
    let f = tessera_ir::text::parse_closed_with_consts(
        "{ lambda c:f64[2]; a:f64[2]. let b:f64[2] = sin a\n d:f64[2] = mul b c in (d,) }",
        std::slice::from_ref(&c),
    )
    .unwrap();
    let j = jvp(&f).unwrap();
    assert_eq!(j.consts, vec![c.clone()]);
    let x = Array::new(tessera_ir::DType::F64, &[2], vec![0.5, 1.5]).unwrap();
    let t = Array::new(tessera_ir::DType::F64, &[2], vec![1.0, 0.25]).unwrap();
    let outs = eval(&j, &[x.clone(), t.clone()]);
    let want = Array::from_values(
        tessera_ir::DType::F64,
        &t.values() * &x.values().mapv(f64::cos) * &c.values(),
    );
    assert_close("d (sin(a) c)", &outs[1], &want, 1e-12);
}

/// `f(x, w) = sum(tanh(x . w) * x[:, :1]) + sum(sin(w))` on small shapes.
fn small_loss() -> ClosedJaxpr {
    prog(
        "x:f64[2,3] w:f64[3,3]",
        "h:f64[2,3] = dot_general[dimension_numbers=(([1], [0]), ([], [])) preferred_element_type=float64] x w
        t:f64[2,3] = tanh h
        c:f64[2,1] = slice[limit_indices=(2, 1) start_indices=(0, 0) strides=None] x
        p:f64[2,3] = mul t c
        s:f64[] = reduce_sum[axes=(0, 1) out_sharding=None] p
        q:f64[3,3] = sin w
        r:f64[] = reduce_sum[axes=(0, 1) out_sharding=None] q
        l:f64[] = add s r",
        "l",
    )
}

#[test]
fn second_derivatives_agree_forward_over_reverse_and_reverse_over_reverse() {
    let f = small_loss();
    let grad = value_and_grad(&f, &[0, 1]).unwrap();
    let mut rng = Rng(42);
    let x: Vec<Array> = f.jaxpr.in_avals().iter().map(|a| rng.array(a)).collect();
    let v: Vec<Array> = f
        .jaxpr
        .in_avals()
        .iter()
        .map(|a| rng.direction(a))
        .collect();
    // Hessian-vector product by finite differences of the gradient.
    let fd = finite_difference(&grad, &x, &v);
    // Forward over reverse: jvp of the gradient program.
    let j = jvp(&grad).unwrap();
    verify(&j).unwrap();
    let args: Vec<Array> = x.iter().chain(&v).cloned().collect();
    let hvp = eval(&j, &args);
    for k in 1..3 {
        assert_close("jvp(grad)", &hvp[3 + k], &fd[k], 1e-6);
    }
    // Reverse over reverse: vjp of the gradient program with cotangents (0, v_x, v_w).
    let vv = vjp(&grad).unwrap();
    verify(&vv).unwrap();
    let zero = Array::new(tessera_ir::DType::F64, &[], vec![0.0]).unwrap();
    let args: Vec<Array> = x.iter().chain([&zero]).chain(&v).cloned().collect();
    let hv = eval(&vv, &args);
    for k in 0..2 {
        assert_close("vjp(grad)", &hv[k], &fd[1 + k], 1e-6);
    }
    // And grad of grad through value_and_grad of a scalar of the gradient.
    check(&grad, &mut rng);
}

#[test]
fn jvp_of_jvp_matches_finite_differences() {
    let f = small_loss();
    let j = jvp(&f).unwrap();
    let mut rng = Rng(3);
    check(&j, &mut rng);
}

#[test]
fn linearize_splits_jvp_into_primal_and_linear_tangent_programs() {
    for (i, &prim) in Prim::ALL.iter().enumerate() {
        let f = example(prim);
        if NOT_DIFFERENTIABLE.contains(&prim) {
            continue;
        }
        let lin = linearize(&f).unwrap_or_else(|e| panic!("{}: {e}", prim.name()));
        let j = jvp(&f).unwrap();
        let mut rng = Rng(3000 + i as u64);
        let x: Vec<Array> = f.jaxpr.in_avals().iter().map(|a| rng.array(a)).collect();
        let t: Vec<Array> = f
            .jaxpr
            .in_avals()
            .iter()
            .map(|a| rng.direction(a))
            .collect();
        let u: Vec<Array> = f
            .jaxpr
            .in_avals()
            .iter()
            .map(|a| rng.direction(a))
            .collect();
        let n_out = f.jaxpr.outvars.len();
        let primal = eval(&lin.primal, &x);
        assert_eq!(primal.len(), n_out + lin.num_residuals);
        let tangent = |t: &[Array]| -> Vec<Array> {
            let args: Vec<Array> = primal[n_out..].iter().chain(t).cloned().collect();
            eval(&lin.tangent, &args)
        };
        let args: Vec<Array> = x.iter().chain(&t).cloned().collect();
        let want = eval(&j, &args);
        let what = |k: usize| format!("{}: result {k}", prim.name());
        for k in 0..n_out {
            assert_close(&what(k), &primal[k], &want[k], 1e-12);
            assert_close(&what(k), &tangent(&t)[k], &want[n_out + k], 1e-12);
        }
        // Linear in the tangents: T(2t + u) = 2 T(t) + T(u).
        let mixed: Vec<Array> = u.iter().zip(&t).map(|(u, t)| axpy(u, 2.0, t)).collect();
        let (tt, tu, tm) = (tangent(&t), tangent(&u), tangent(&mixed));
        for k in 0..n_out {
            assert_close(&what(k), &tm[k], &axpy(&tu[k], 2.0, &tt[k]), 1e-9);
        }
    }
}

#[test]
fn linearized_tangent_program_has_no_nonlinear_work() {
    let lin = linearize(&small_loss()).unwrap();
    let names: Vec<&str> = lin
        .tangent
        .jaxpr
        .eqns
        .iter()
        .map(|e| e.prim.name())
        .collect();
    for nonlinear in ["tanh", "sin", "cos"] {
        assert!(!names.contains(&nonlinear), "{names:?}");
    }
}

#[test]
fn vjp_split_into_forward_and_transposed_backward_matches_vjp_for_every_primitive() {
    for (i, &prim) in Prim::ALL.iter().enumerate() {
        if NOT_DIFFERENTIABLE.contains(&prim) {
            continue;
        }
        let f = example(prim);
        if FORWARD_ONLY.contains(&prim) {
            assert!(
                tessera_ir::autodiff::vjp_split(&f).is_err(),
                "{}",
                prim.name()
            );
            continue;
        }
        let split =
            tessera_ir::autodiff::vjp_split(&f).unwrap_or_else(|e| panic!("{}: {e}", prim.name()));
        verify(&split.forward).unwrap();
        verify(&split.backward).unwrap();
        let mut rng = Rng(4000 + i as u64);
        let x: Vec<Array> = f.jaxpr.in_avals().iter().map(|a| rng.array(a)).collect();
        let ct: Vec<Array> = f
            .jaxpr
            .out_avals()
            .iter()
            .map(|a| rng.direction(a))
            .collect();
        let fwd = eval(&split.forward, &x);
        let n_out = f.jaxpr.outvars.len();
        let residuals = &fwd[n_out..];
        assert_eq!(residuals.len(), split.num_residuals);
        let args: Vec<Array> = residuals.iter().chain(&ct).cloned().collect();
        let got = eval(&split.backward, &args);
        let want_args: Vec<Array> = x.iter().chain(&ct).cloned().collect();
        let want = eval(&vjp(&f).unwrap(), &want_args);
        assert_eq!(got.len(), want.len(), "{}", prim.name());
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            if w.dtype().is_float() {
                assert_close(&format!("{}: cotangent {k}", prim.name()), g, w, 1e-9);
            }
        }
    }
}
