//! `psend`/`precv` (JAX's `lax.psend` and `lax.precv`) inside `shard_map`: on the SPMD
//! interpreter a send and its receive give what a `ppermute` with the same pairs gives (over one
//! axis and over several, on several simulated devices); `vmap` (over another axis and over the
//! vmapped axis itself) agrees with `ppermute`'s; the text form (`Tok` results,
//! `out_shape=ShapedArray(...)`) round-trips; bad pairs, unbound axes, misused tokens and
//! differentiation are refused with typed errors naming what is wrong.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::interp::eval_closed;
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::{Tensor, precv, precv_over, shard_map_program};
use tessera_ir::{Array, ClosedJaxpr, DType, IrError, ShapedArray, jvp, verify, vjp, vmap};
use tessera_sharding::{AbstractMesh, PartitionSpec};

fn spec(text: &str) -> PartitionSpec {
    PartitionSpec::parse(text).unwrap()
}

/// `shard_map` over a 2×4 mesh (`x`, `y`) of `f` on blocks (`[2, 2]`) of an f64 `[4, 8]` array.
fn try_program(f: impl FnOnce(&Tensor) -> Tensor) -> Result<ClosedJaxpr, IrError> {
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 4)]).unwrap();
    let aval = ShapedArray::new(DType::F64, &[4, 8]);
    let both = spec("P('x', 'y')");
    shard_map_program(
        &mesh,
        std::slice::from_ref(&both),
        std::slice::from_ref(&both),
        &[aval],
        |a| vec![f(&a[0])],
    )
}

fn program(f: impl FnOnce(&Tensor) -> Tensor) -> ClosedJaxpr {
    let p = try_program(f).unwrap();
    verify(&p).unwrap();
    p
}

/// A send over `axes` with `perm`, received at once.
fn sent(x: &Tensor, axes: &[&str], perm: &[(i64, i64)]) -> Tensor {
    let token = x.psend_over(axes, perm);
    precv_over(token, x.aval(), axes, perm)
}

/// Distinct values of type `aval`.
fn input(aval: &ShapedArray, seed: f64) -> Array {
    let values = (0..aval.size()).map(|i| seed + i as f64 * 1.25).collect();
    Array::new(aval.dtype, &aval.shape, values).unwrap()
}

fn assert_equivalent(what: &str, a: &ClosedJaxpr, b: &ClosedJaxpr) {
    let xs: Vec<Array> = a
        .jaxpr
        .in_avals()
        .iter()
        .enumerate()
        .map(|(k, aval)| input(aval, 3.0 + k as f64))
        .collect();
    let (got, want) = (eval_closed(a, &xs).unwrap(), eval_closed(b, &xs).unwrap());
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.shape(), w.shape(), "{what}");
        assert_eq!(g.to_vec(), w.to_vec(), "{what}");
    }
}

/// Pairs over `y` (4 devices) and over both axes (8 devices): a ring, a partial shift (devices
/// no pair targets receive zeros) and a swap.
/// The axes and the `(source, target)` pairs of one case.
type Case = (&'static [&'static str], &'static [(i64, i64)]);

const CASES: [Case; 4] = [
    (&["y"], &[(0, 1), (1, 2), (2, 3), (3, 0)]),
    (&["y"], &[(0, 2), (3, 1)]),
    (&["x"], &[(0, 1), (1, 0)]),
    (&["x", "y"], &[(0, 7), (5, 2), (6, 3), (1, 0)]),
];

#[test]
fn a_send_and_its_receive_compute_the_same_ppermute() {
    for (axes, perm) in CASES {
        let pair = program(|x| sent(x, axes, perm));
        let permuted = program(|x| x.ppermute_over(axes, perm));
        assert_equivalent(&format!("{axes:?} {perm:?}"), &pair, &permuted);
        // Not the identity: the exchange happened.
        let xs = vec![input(&pair.jaxpr.in_avals()[0], 1.0)];
        assert_ne!(eval_closed(&pair, &xs).unwrap()[0].to_vec(), xs[0].to_vec());
    }
}

#[test]
fn work_between_the_send_and_the_receive_stays_between_them() {
    let p = program(|x| {
        let token = x.psend("y", &[(0, 1), (1, 0)]);
        let local = x.sin();
        &precv(token, x.aval(), "y", &[(0, 1), (1, 0)]) + &local
    });
    let text = print_closed(&p, 0);
    let at = |needle: &str| text.find(needle).unwrap();
    assert!(
        at("psend[") < at("sin ") && at("sin ") < at("precv["),
        "{text}"
    );
    let want = program(|x| &x.ppermute("y", &[(0, 1), (1, 0)]) + &x.sin());
    assert_equivalent("overlap", &p, &want);
}

#[test]
fn the_text_form_prints_tokens_and_out_shape_as_jax_and_round_trips() {
    for (axes, perm) in CASES {
        let p = program(|x| sent(x, axes, perm));
        let text = print_closed(&p, 0);
        assert!(text.contains(":Tok = psend["), "{text}");
        assert!(
            text.contains("out_shape=ShapedArray(float64[2,2])"),
            "{text}"
        );
        let back = parse_closed(&text).unwrap();
        verify(&back).unwrap();
        assert_eq!(print_closed(&back, 0), text);
        assert_equivalent("round trip", &back, &p);
    }
}

#[test]
fn batching_agrees_with_ppermute() {
    for (axes, perm) in CASES {
        let pair = program(|x| sent(x, axes, perm));
        let permuted = program(|x| x.ppermute_over(axes, perm));
        let (a, b) = (
            vmap(&pair, &[Some(0)], &[0], 3).unwrap(),
            vmap(&permuted, &[Some(0)], &[0], 3).unwrap(),
        );
        verify(&a).unwrap();
        assert!(print_closed(&a, 0).contains("ShapedArray(float64[3,2,2])"));
        assert_equivalent("vmap", &a, &b);
    }
}

#[test]
fn a_named_vmap_and_a_pmap_treat_a_pair_as_ppermute() {
    use tessera_ir::trace::{pmap, trace, vmap_named_call};
    let aval = ShapedArray::new(DType::F64, &[4, 6]);
    type Body = fn(&Tensor) -> Tensor;
    let pair: Body = |s| {
        let perm = [(0, 1), (1, 2), (3, 0)];
        precv(s.psend("b", &perm), s.aval(), "b", &perm)
    };
    let permuted: Body = |s| s.ppermute("b", &[(0, 1), (1, 2), (3, 0)]);
    let named = |f: Body| {
        trace(std::slice::from_ref(&aval), |a| {
            vmap_named_call("b", &[Some(0)], &[0], &[&a[0]], |s| vec![f(&s[0])])
        })
        .unwrap()
    };
    let (a, b) = (named(pair), named(permuted));
    verify(&a).unwrap();
    assert_equivalent("named vmap", &a, &b);
    let mapped = |f: Body| {
        trace(std::slice::from_ref(&aval), |a| {
            pmap("b", &[&a[0]], |s| vec![f(&s[0])])
        })
    };
    let (a, b) = (mapped(pair).unwrap(), mapped(permuted).unwrap());
    verify(&a).unwrap();
    assert_equivalent("pmap", &a, &b);
}

fn type_error(e: IrError) -> String {
    match e {
        IrError::Type { prim, message } => format!("{prim}: {message}"),
        other => panic!("expected a typed error, got {other:?}"),
    }
}

#[test]
fn bad_pairs_and_unbound_axes_are_refused() {
    // A target out of range for the 4 devices of `y`.
    let e = try_program(|x| sent(x, &["y"], &[(0, 4)])).unwrap_err();
    assert!(e.to_string().contains("psend"), "{e}");
    // A source named twice.
    let e = try_program(|x| sent(x, &["y"], &[(0, 1), (0, 2)])).unwrap_err();
    assert!(e.to_string().contains("perm"), "{e}");
    // A target named twice.
    let e = try_program(|x| sent(x, &["y"], &[(0, 1), (2, 1)])).unwrap_err();
    assert!(e.to_string().contains("perm"), "{e}");
    // An axis no shard_map binds: refused by the tracing API (its pvary) and, in a parsed
    // program, by psend's and precv's shape rules.
    let e = try_program(|x| sent(x, &["z"], &[(0, 1)])).unwrap_err();
    assert!(e.to_string().contains("unbound axis name: 'z'"), "{e}");
    let e = refusal(|t| t.replace("axis_name=(y,) perm", "axis_name=(z,) perm"));
    assert!(
        e.contains("psend") && e.contains("unbound axis name: 'z'"),
        "{e}"
    );
    let e = refusal(|t| t.replace("axis_name=(y,)\n", "axis_name=(z,)\n"));
    assert!(
        e.contains("precv") && e.contains("unbound axis name: 'z'"),
        "{e}"
    );
}

#[test]
fn differentiating_a_send_is_a_typed_error_naming_it() {
    let p = program(|x| sent(x, &["y"], &[(0, 1), (1, 0)]));
    let e = type_error(jvp(&p).unwrap_err());
    assert!(e.contains("psend is not differentiable"), "{e}");
    let e = vjp(&p).unwrap_err().to_string();
    assert!(
        e.contains("not differentiable") && e.contains("precv"),
        "{e}"
    );
}

/// The printed pair over `y` with its text edited by `edit`: parsing then verifying it fails,
/// and the error is returned.
fn refusal(edit: impl Fn(&str) -> String) -> String {
    let text = print_closed(&program(|x| sent(x, &["y"], &[(0, 1), (1, 0)])), 0);
    let edited = edit(&text);
    assert_ne!(edited, text, "the edit changed nothing");
    match parse_closed(&edited) {
        Err(e) => e.to_string(),
        Ok(p) => verify(&p).unwrap_err().to_string(),
    }
}

#[test]
fn misused_tokens_and_mismatched_pairs_are_refused() {
    let text = print_closed(&program(|x| sent(x, &["y"], &[(0, 1), (1, 0)])), 0);
    // `d:Tok = psend[...] c`: the token's and the sent value's names.
    let send = text.lines().find(|l| l.contains("psend[")).unwrap().trim();
    let token = send.split(':').next().unwrap().to_owned();
    let value = send.rsplit(' ').next().unwrap().to_owned();
    // A receive with other pairs than its send's (precv prints its parameters on lines of
    // their own).
    let e = refusal(|t| t.replace("perm=((0, 1), (1, 0))\n", "perm=((1, 0), (0, 1))\n"));
    assert!(e.contains("same axes and pairs"), "{e}");
    // A receive of another shape than was sent.
    let e = refusal(|t| t.replace("ShapedArray(float64[2,2])", "ShapedArray(float64[4])"));
    assert!(e.contains("out_shape"), "{e}");
    // A receive of a value, not a token.
    let e = refusal(|t| t.replace(&format!("] {token}\n"), &format!("] {value}\n")));
    assert!(e.contains("precv") && e.contains("token"), "{e}");
    // A token taken by another primitive.
    let e = refusal(|t| t.replace(send, &format!("{send}\n          zz:Tok = copy {token}")));
    assert!(e.contains("only a precv may take"), "{e}");
}

#[test]
fn a_send_never_received_is_refused_and_a_dropped_token_fails_the_trace() {
    let e = try_program(|x| {
        drop(x.psend("y", &[(0, 1)]));
        x.sin()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("never received") && e.contains("precv"), "{e}");
}

#[test]
fn outside_shard_map_a_send_is_refused() {
    use tessera_ir::trace::trace;
    let e = trace(&[ShapedArray::new(DType::F32, &[4])], |a| {
        let token = a[0].psend("y", &[(0, 1)]);
        vec![precv(token, a[0].aval(), "y", &[(0, 1)])]
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("unbound axis name: 'y'"), "{e}");
}

#[test]
fn dead_code_elimination_drops_an_unused_pair_whole() {
    let p = program(|x| {
        let _ = precv(x.psend("y", &[(0, 1)]), x.aval(), "y", &[(0, 1)]);
        x.sin()
    });
    let text = print_closed(&p, 0);
    assert!(text.contains("psend[") && text.contains("precv["), "{text}");
    let dce = tessera_ir::passes::eliminate_dead_code(&p);
    verify(&dce).unwrap();
    let text = print_closed(&dce, 0);
    assert!(
        !text.contains("psend[") && !text.contains("precv["),
        "{text}"
    );
    assert_equivalent("dce", &dce, &p);
}
