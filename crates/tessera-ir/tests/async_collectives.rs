//! Asynchronous collectives (JAX's `psum_start`/`psum_done` and the like) inside `shard_map`:
//! on the SPMD interpreter each start/done pair gives what its synchronous collective gives,
//! with work traced in between; its JVP, VJP and `vmap` agree with the synchronous
//! collective's; the verifier and the parser refuse misused pending values; the text form
//! (`Todo[...]` results) round-trips.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::interp::eval_closed;
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::{Pending, Tensor, shard_map_program};
use tessera_ir::{Array, ClosedJaxpr, DType, Prim, ShapedArray, jvp, verify, vjp, vmap};
use tessera_sharding::{AbstractMesh, PartitionSpec};

fn spec(text: &str) -> PartitionSpec {
    PartitionSpec::parse(text).unwrap()
}

/// `shard_map` over a 2×2 mesh (`x`, `y`) of `f` on blocks of an f64 `[4, 8]` array.
fn program(f: impl FnOnce(&Tensor) -> Tensor) -> ClosedJaxpr {
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 2)]).unwrap();
    let aval = ShapedArray::new(DType::F64, &[4, 8]);
    let both = spec("P('x', 'y')");
    let p = shard_map_program(
        &mesh,
        std::slice::from_ref(&both),
        std::slice::from_ref(&both),
        &[aval],
        |a| vec![f(&a[0])],
    )
    .unwrap();
    verify(&p).unwrap();
    p
}

/// Deterministic, distinct inputs of the types `avals`.
fn inputs(avals: &[ShapedArray], seed: u64) -> Vec<Array> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    avals
        .iter()
        .map(|aval| {
            let values = (0..aval.size())
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((state >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
                })
                .collect();
            Array::new(aval.dtype, &aval.shape, values).unwrap()
        })
        .collect()
}

fn assert_same(what: &str, got: &[Array], want: &[Array]) {
    assert_eq!(got.len(), want.len(), "{what}: result count");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.shape(), w.shape(), "{what}: result {k} shape");
        for (a, b) in g.to_vec().iter().zip(w.to_vec()) {
            assert!(
                (a - b).abs() <= 1e-9 * (1.0 + b.abs()),
                "{what}: result {k}: {a} vs {b}"
            );
        }
    }
}

/// Evaluates both programs on the same inputs (of the first's types) and compares.
fn assert_equivalent(what: &str, a: &ClosedJaxpr, b: &ClosedJaxpr) {
    let xs = inputs(&a.jaxpr.in_avals(), 7);
    assert_same(
        what,
        &eval_closed(a, &xs).unwrap(),
        &eval_closed(b, &xs).unwrap(),
    );
}

type Body = fn(&Tensor) -> Tensor;

/// Each case: its name, the body with a start/done pair (and local work between them), and the
/// same body with the synchronous collective.
fn cases() -> Vec<(&'static str, Body, Body)> {
    fn overlap(a: &Tensor, pending: Pending) -> Tensor {
        let local = a.sin();
        let out = pending.done();
        let n = out.shape().iter().product::<i64>();
        &out.reshape(&[n]).sum(&[0]) * &local
    }
    fn sync(a: &Tensor, out: Tensor) -> Tensor {
        let n = out.shape().iter().product::<i64>();
        &out.reshape(&[n]).sum(&[0]) * &a.sin()
    }
    vec![
        (
            "psum",
            |a| overlap(a, a.psum_start(&["x"])),
            |a| sync(a, a.psum(&["x"])),
        ),
        (
            "psum over both axes",
            |a| overlap(a, a.psum_start(&["x", "y"])),
            |a| sync(a, a.psum(&["x", "y"])),
        ),
        (
            "all_gather tiled",
            |a| overlap(a, a.all_gather_start("y", 1, true)),
            |a| sync(a, a.all_gather("y", 1, true)),
        ),
        (
            "all_gather untiled",
            |a| overlap(a, a.all_gather_start("x", 0, false)),
            |a| sync(a, a.all_gather("x", 0, false)),
        ),
        (
            "psum_scatter",
            |a| overlap(a, a.psum_scatter_start("y", 1, true)),
            |a| sync(a, a.psum_scatter("y", 1, true)),
        ),
        (
            "all_to_all",
            |a| overlap(a, a.all_to_all_start("y", 1, 0, true)),
            |a| sync(a, a.all_to_all("y", 1, 0, true)),
        ),
        (
            "pbroadcast",
            |a| overlap(a, a.pbroadcast_start("x", 1)),
            |a| sync(a, a.pbroadcast("x", 1)),
        ),
        (
            "ppermute",
            |a| overlap(a, a.ppermute_start("y", &[(0, 1), (1, 0)])),
            |a| sync(a, a.ppermute("y", &[(0, 1), (1, 0)])),
        ),
    ]
}

#[test]
fn each_start_done_pair_computes_its_synchronous_collective() {
    for (name, started, synchronous) in cases() {
        assert_equivalent(name, &program(started), &program(synchronous));
    }
}

#[test]
fn untiled_forms_and_groups_agree_with_the_synchronous_collective() {
    // An untiled all_to_all moves its split dimension with a reshape after the done; an
    // untiled psum_scatter removes the scattered dimension.
    let a2a = program(|a| a.all_to_all_start("x", 0, 1, false).done());
    assert_equivalent(
        "untiled all_to_all",
        &a2a,
        &program(|a| a.all_to_all("x", 0, 1, false)),
    );
    let rs = program(|a| {
        Tensor::slice_axis(a, 1, 0, 2)
            .psum_scatter_start("y", 1, false)
            .done()
            .broadcast_in_dim(&[2, 4], &[0])
    });
    let rs_sync = program(|a| {
        Tensor::slice_axis(a, 1, 0, 2)
            .psum_scatter("y", 1, false)
            .broadcast_in_dim(&[2, 4], &[0])
    });
    assert_equivalent("untiled psum_scatter", &rs, &rs_sync);
    let groups = vec![vec![0, 1], vec![2, 3]];
    let grouped = program(|a| {
        a.psum_start_in_groups(&["x", "y"], &[vec![0, 1], vec![2, 3]])
            .done()
    });
    let grouped_sync = program(|a| a.psum_in_groups(&["x", "y"], &groups.clone()));
    assert_equivalent("psum in groups", &grouped, &grouped_sync);
}

#[test]
fn the_work_traced_between_start_and_done_sits_between_them() {
    let p = program(overlap_in_order);
    let text = print_closed(&p, 0);
    let start = text.find("psum_start").unwrap();
    let sin = text.find("= sin").unwrap();
    let done = text.find("psum_done").unwrap();
    assert!(start < sin && sin < done, "{text}");
    assert!(
        text.contains(":Todo[f64[2,4]"),
        "the pending result prints as Todo: {text}"
    );
}

fn overlap_in_order(a: &Tensor) -> Tensor {
    let pending = a.psum_start(&["x"]);
    assert_eq!(pending.aval().shape, [2, 4]);
    let local = a.sin();
    &pending.done() + &local
}

#[test]
fn derivatives_and_batching_agree_with_the_synchronous_collective() {
    for (name, started, synchronous) in cases() {
        let (a, s) = (program(started), program(synchronous));
        let (ja, js) = (jvp(&a).unwrap(), jvp(&s).unwrap());
        verify(&ja).unwrap();
        assert_equivalent(&format!("{name}: jvp"), &ja, &js);
        let (va, vs) = (vjp(&a).unwrap(), vjp(&s).unwrap());
        verify(&va).unwrap();
        assert_equivalent(&format!("{name}: vjp"), &va, &vs);
        let (ba, bs) = (
            vmap(&a, &[Some(0)], &[0], 3).unwrap(),
            vmap(&s, &[Some(0)], &[0], 3).unwrap(),
        );
        verify(&ba).unwrap();
        assert_equivalent(&format!("{name}: vmap"), &ba, &bs);
    }
}

#[test]
fn the_text_form_round_trips_with_todo_types() {
    for (name, started, _) in cases() {
        let p = program(started);
        let text = print_closed(&p, 0);
        assert!(
            text.contains("_start[") && text.contains("_done "),
            "{name}: {text}"
        );
        let back = parse_closed(&text).unwrap();
        verify(&back).unwrap();
        assert_eq!(print_closed(&back, 0), text, "{name}");
        assert_equivalent(name, &back, &p);
    }
}

/// The printed psum example with its body edited by `edit`.
fn edited(edit: impl Fn(&str) -> String) -> String {
    let text = print_closed(&program(overlap_in_order), 0);
    edit(&text)
}

fn refusal(text: &str) -> String {
    match parse_closed(text) {
        Err(e) => e.to_string(),
        Ok(p) => verify(&p).err().map(|e| e.to_string()).unwrap_or_default(),
    }
}

#[test]
fn misused_pending_values_are_refused_with_what_to_do() {
    let base = edited(str::to_owned);
    // Find the names: `X:Todo[...] = psum_start[...] A` and `Y:... = psum_done X`.
    let line = |needle: &str| {
        base.lines()
            .find(|l| l.contains(needle))
            .unwrap()
            .trim()
            .to_owned()
    };
    let start_line = line("psum_start");
    let done_line = line("psum_done");
    let pending = start_line.split(':').next().unwrap().to_owned();
    let operand = start_line.rsplit(' ').next().unwrap().to_owned();
    let done_out = done_line.split(':').next().unwrap().to_owned();

    // A done of a value no start made.
    let text = base.replace(
        &format!("psum_done {pending}"),
        &format!("psum_done {operand}"),
    );
    let e = refusal(&text);
    assert!(e.contains("no start computed"), "{e}");

    // The pending value used by another equation.
    let text = base.replace(
        &done_line,
        &format!("{done_line}\n    zz:f64[2,4]{{V:(x,y)}} = mul {pending} {pending}"),
    );
    let e = refusal(&text);
    assert!(e.contains("uses the pending result of a psum_start"), "{e}");

    // Ended twice.
    let second = done_line.replacen(&done_out, "zz", 1);
    let text = base.replace(&done_line, &format!("{done_line}\n    {second}"));
    let e = refusal(&text);
    assert!(e.contains("already ended"), "{e}");

    // Ended by another collective's done.
    let text = base.replace("psum_done", "all_gather_done");
    let e = refusal(&text);
    assert!(
        e.contains("ends a psum_start") && e.contains("psum_done"),
        "{e}"
    );

    // `Todo[...]` on something that is not a start.
    let text = base
        .replace(&format!("{done_out}:"), &format!("{done_out}:Todo["))
        .replacen(" = psum_done", "] = psum_done", 1);
    let e = refusal(&text);
    assert!(e.contains("not one; write the plain type"), "{e}");
}

#[test]
fn a_returned_pending_value_is_refused() {
    let base = edited(str::to_owned);
    let start_line = base
        .lines()
        .find(|l| l.contains("psum_start"))
        .unwrap()
        .trim()
        .to_owned();
    let pending = start_line.split(':').next().unwrap().to_owned();
    // The shard_map body returns its last value; make it return the pending one.
    let body_end = base.find("in (").unwrap();
    let close = base[body_end..].find(",)").unwrap() + body_end;
    let text = format!("{}in ({pending}{}", &base[..body_end], &base[close..]);
    let e = refusal(&text);
    assert!(e.contains("returns the pending result"), "{e}\n{text}");
}

#[test]
fn the_primitives_name_their_pairs() {
    assert_eq!(Prim::PsumStart.synchronous(), Prim::Psum);
    assert_eq!(Prim::AllGatherStart.async_done(), Some(Prim::AllGatherDone));
    assert_eq!(
        Prim::ReduceScatter.async_start(),
        Some(Prim::ReduceScatterStart)
    );
    assert!(Prim::PpermuteDone.is_async_done() && !Prim::Ppermute.is_async_done());
    assert_eq!(
        Prim::from_name("all_to_all_start").unwrap(),
        Prim::AllToAllStart
    );
    assert_eq!(Prim::PbroadcastDone.name(), "pbroadcast_done");
}

#[test]
fn common_subexpression_elimination_keeps_each_start_ended_once() {
    use tessera_ir::passes::eliminate_common_subexpressions;
    // Two identical pairs on one value: whatever CSE merges, it merges a start with its done
    // (same operands, same parameters), so every start is still ended exactly once.
    let p = program(|a| &a.psum_start(&["x"]).done() + &a.psum_start(&["x"]).done());
    let merged = eliminate_common_subexpressions(&p);
    verify(&merged).unwrap();
    let text = print_closed(&merged, 0);
    assert_eq!(
        text.matches("psum_start").count(),
        text.matches("psum_done").count(),
        "{text}"
    );
    assert_equivalent("cse", &merged, &p);
}

#[test]
fn a_named_vmap_and_a_pmap_treat_a_pair_as_its_collective() {
    use tessera_ir::trace::{pmap, trace, vmap_named_call};
    let x = inputs(&[ShapedArray::new(DType::F64, &[4, 6])], 3).remove(0);
    type Pair = (fn(&Tensor) -> Tensor, fn(&Tensor) -> Tensor);
    let cases: [Pair; 3] = [
        (|s| s.psum_start(&["b"]).done(), |s| s.psum(&["b"])),
        (
            |s| s.all_gather_start("b", 0, true).done(),
            |s| s.all_gather("b", 0, true),
        ),
        (
            |s| {
                s.ppermute_start("b", &[(0, 1), (1, 2), (2, 3), (3, 0)])
                    .done()
            },
            |s| s.ppermute("b", &[(0, 1), (1, 2), (2, 3), (3, 0)]),
        ),
    ];
    for (started, synchronous) in cases {
        let named = |f: fn(&Tensor) -> Tensor| {
            trace(&[x.aval()], |a| {
                vmap_named_call("b", &[Some(0)], &[0], &[&a[0]], |s| vec![f(&s[0])])
            })
            .unwrap()
        };
        let (a, s) = (named(started), named(synchronous));
        verify(&a).unwrap();
        assert_equivalent("named vmap", &a, &s);
        let mapped = |f: fn(&Tensor) -> Tensor| {
            trace(&[x.aval()], |a| pmap("b", &[&a[0]], |s| vec![f(&s[0])])).unwrap()
        };
        let (a, s) = (mapped(started), mapped(synchronous));
        verify(&a).unwrap();
        assert_equivalent("pmap", &a, &s);
    }
}

#[test]
fn a_start_never_ended_is_refused_and_an_ended_unused_pair_is_accepted() {
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 2)]).unwrap();
    let both = spec("P('x', 'y')");
    let aval = ShapedArray::new(DType::F64, &[4, 8]);
    // Tracing verifies the body: a dropped `Pending` fails the trace, naming the fix.
    let dangling = shard_map_program(
        &mesh,
        std::slice::from_ref(&both),
        std::slice::from_ref(&both),
        std::slice::from_ref(&aval),
        |a| {
            drop(a[0].psum_start(&["x"]));
            vec![a[0].sin()]
        },
    );
    let e = dangling.unwrap_err().to_string();
    assert!(e.contains("never ended") && e.contains("psum_done"), "{e}");
    let unused = shard_map_program(
        &mesh,
        std::slice::from_ref(&both),
        std::slice::from_ref(&both),
        &[aval],
        |a| {
            let _ = a[0].psum_start(&["x"]).done();
            vec![a[0].sin()]
        },
    )
    .unwrap();
    verify(&unused).unwrap();
}
