//! Explicit-sharding types derived by the primitives' sharding rules (JAX's "sharding in
//! types"): values traced with explicit types (`ShapedArray::with_explicit`) and resharded
//! (`Tensor::reshard`) give results typed as JAX types them (`f32[8@pp,16@tp]`), refusals
//! are typed errors naming the shardings and the fix, the verifier refuses a printed type the
//! rules do not derive, and the interpreter runs the programs with their values unchanged.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::{Tensor, trace, use_mesh};
use tessera_ir::{Array, ClosedJaxpr, DType, IrError, Prim, ShapedArray, interp, vjp};
use tessera_sharding::{AbstractMesh, PartitionSpec};

fn p(text: &str) -> PartitionSpec {
    PartitionSpec::parse(&format!("P{text}")).unwrap()
}

/// An f32 value of `shape` split as `spec` (e.g. `('pp', None)`).
fn typed(shape: &[i64], spec: &str) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
        .with_explicit(&p(spec))
        .unwrap()
}

/// The mesh of the oracle's explicit cases.
fn mesh() -> AbstractMesh {
    AbstractMesh::auto(&[("pp", 2), ("dp", 2), ("tp", 2)]).unwrap()
}

fn traced(
    avals: &[ShapedArray],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> tessera_ir::Result<ClosedJaxpr> {
    use_mesh(&mesh(), || trace(avals, f))
}

/// The printed result types of a traced program.
fn out_types(program: &ClosedJaxpr) -> Vec<String> {
    program
        .jaxpr
        .out_avals()
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn out_type(avals: &[ShapedArray], f: impl FnOnce(&[Tensor]) -> Vec<Tensor>) -> String {
    let program = traced(avals, f).unwrap_or_else(|e| panic!("{e}"));
    // Every traced program verifies (its printed types are the derived ones) and parses back.
    let text = print_closed(&program, 0);
    let back = parse_closed(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(print_closed(&back, 0), text);
    out_types(&program).join(" ")
}

fn refusal(avals: &[ShapedArray], f: impl FnOnce(&[Tensor]) -> Vec<Tensor>) -> String {
    match traced(avals, f) {
        Err(e @ IrError::Sharding { .. }) => e.to_string(),
        Err(other) => panic!("expected a sharding refusal, got {other}"),
        Ok(p) => panic!("expected a refusal, got\n{}", print_closed(&p, 0)),
    }
}

#[test]
fn explicit_inputs_and_reshard_print_as_in_the_oracle() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/oracle/jaxpr_collectives_cases.json");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let case = file["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "pcast_explicit_0")
        .unwrap();
    let oracle = case["jaxpr"].as_str().unwrap();
    // JAX: `{ lambda ; a:f32[8@pp,4] b:f32[8@pp,8@tp]. let` and `c:f32[8@pp,4] = reshard e`.
    let program = traced(
        &[typed(&[8, 4], "('pp',)"), typed(&[8, 8], "('pp', 'tp')")],
        |a| {
            let e = a[0].tanh().reshard(&p("()"));
            vec![e.reshard(&p("('pp',)")), a[1].clone()]
        },
    )
    .unwrap();
    let text = print_closed(&program, 0);
    let head = "{ lambda ; a:f32[8@pp,4] b:f32[8@pp,8@tp]. let";
    assert!(oracle.starts_with(head) && text.starts_with(head), "{text}");
    let reshard = ":f32[8@pp,4] = reshard ";
    assert!(oracle.contains(reshard) && text.contains(reshard), "{text}");
    assert!(text.contains(":f32[8,4] = reshard "), "{text}");
    // The oracle's programs verify: their printed types are what the rules derive.
    for c in file["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        if name.starts_with("pcast_explicit") {
            parse_closed(c["jaxpr"].as_str().unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

#[test]
fn elementwise_operations_broadcast_shardings() {
    let x = typed(&[8, 4], "('pp',)");
    let y = typed(&[8, 4], "(None, 'tp')");
    assert_eq!(
        out_type(&[x.clone(), y.clone()], |a| vec![&a[0] + &a[1]]),
        "f32[8@pp,4@tp]"
    );
    // A scalar and an unsplit operand adopt the other's sharding.
    let plain = ShapedArray::new(DType::F32, &[8, 4]);
    assert_eq!(
        out_type(&[x.clone(), plain], |a| vec![&(&a[0] * 2.0) - &a[1]]),
        "f32[8@pp,4]"
    );
    // Unary operations and convert_element_type keep the sharding.
    assert_eq!(
        out_type(std::slice::from_ref(&x), |a| vec![
            a[0].tanh().exp().astype(DType::BF16)
        ]),
        "bf16[8@pp,4]"
    );
    assert_eq!(
        out_type(&[x.clone(), y.clone()], |a| vec![a[0].lt(&a[1])]),
        "bool[8@pp,4@tp]"
    );
    let z = typed(&[8, 4], "('tp',)");
    let err = refusal(&[x, z], |a| vec![&a[0] + &a[1]]);
    for says in [
        "add:",
        "f32[8@pp,4]",
        "f32[8@tp,4]",
        "P('pp', None)",
        "P('tp', None)",
        "reshard one of them",
    ] {
        assert!(err.contains(says), "{says} not in: {err}");
    }
    // One mesh axis may not split two dimensions of the result.
    let err = refusal(
        &[typed(&[8, 4], "('pp',)"), typed(&[8, 4], "(None, 'pp')")],
        |a| vec![&a[0] + &a[1]],
    );
    assert!(
        err.contains("mesh axis 'pp' along dimensions 0 and 1"),
        "{err}"
    );
}

#[test]
fn shape_changing_operations_move_axes_with_their_dimensions() {
    let x = typed(&[8, 4], "('pp', 'tp')");
    assert_eq!(
        out_type(std::slice::from_ref(&x), |a| vec![a[0].transpose(&[1, 0])]),
        "f32[4@tp,8@pp]"
    );
    assert_eq!(
        out_type(std::slice::from_ref(&x), |a| vec![a[0].sum(&[1])]),
        "f32[8@pp]"
    );
    assert_eq!(
        out_type(std::slice::from_ref(&x), |a| vec![a[0].max(&[0])]),
        "f32[4@tp]"
    );
    assert_eq!(
        out_type(std::slice::from_ref(&x), |a| vec![a[0].sum(&[0, 1])]),
        "f32[]"
    );
    let v = typed(&[8], "('pp',)");
    assert_eq!(
        out_type(&[v], |a| vec![a[0].broadcast_in_dim(&[3, 8], &[1])]),
        "f32[3,8@pp]"
    );
    // Slices keep the sharding; a split dimension must stay divisible by its axes.
    assert_eq!(
        out_type(std::slice::from_ref(&x), |a| vec![Tensor::slice_axis(
            &a[0], 0, 0, 4
        )]),
        "f32[4@pp,4@tp]"
    );
    let err = refusal(std::slice::from_ref(&x), |a| {
        vec![Tensor::slice_axis(&a[0], 0, 0, 3)]
    });
    assert!(
        err.contains("split over 2 devices") && err.contains("reshard"),
        "{err}"
    );
    assert_eq!(
        out_type(&[x.clone(), x.clone()], |a| vec![
            a[0].concatenate(&[&a[1]], 1)
        ]),
        "f32[8@pp,8@tp]"
    );
    let err = refusal(&[x, typed(&[8, 4], "('pp',)")], |a| {
        vec![a[0].concatenate(&[&a[1]], 1)]
    });
    assert!(
        err.contains("concatenate:") && err.contains("split alike"),
        "{err}"
    );
}

#[test]
fn reshape_follows_the_cases_jax_allows() {
    let x = typed(&[8, 4], "('pp',)");
    assert_eq!(
        out_type(std::slice::from_ref(&x), |a| vec![a[0].reshape(&[8, 1, 4])]),
        "f32[8@pp,1,4]"
    );
    // Splitting a split dimension: the major part takes the axis.
    assert_eq!(
        out_type(std::slice::from_ref(&x), |a| vec![a[0].reshape(&[2, 4, 4])]),
        "f32[2@pp,4,4]"
    );
    assert_eq!(
        out_type(std::slice::from_ref(&x), |a| vec![a[0].reshape(&[8, 2, 2])]),
        "f32[8@pp,2,2]"
    );
    // Merging: the major dimension's axis splits the merged one.
    let y = typed(&[2, 4, 4], "('pp',)");
    assert_eq!(
        out_type(&[y], |a| vec![a[0].reshape(&[8, 4])]),
        "f32[8@pp,4]"
    );
    // An unsplit major dimension merged with a split minor one is refused, as in JAX.
    let z = typed(&[8, 4], "(None, 'tp')");
    let err = refusal(&[z], |a| vec![a[0].reshape(&[32])]);
    assert!(
        err.contains("reshape:") && err.contains("reshard the operand"),
        "{err}"
    );
    // So is a split dimension the axis does not divide.
    let w = typed(&[6, 4], "('pp',)");
    let err = refusal(&[w], |a| vec![a[0].reshape(&[3, 2, 4])]);
    assert!(err.contains("reshape:"), "{err}");
    // Without a mesh the axis sizes are unknown: the refusal says how to give them.
    let err = trace(&[x], |a| vec![a[0].reshape(&[2, 4, 4])])
        .unwrap_err()
        .to_string();
    assert!(err.contains("use_mesh"), "{err}");
}

#[test]
fn dot_general_needs_batch_dimensions_alike_and_one_side_of_each_contraction_split() {
    let x = typed(&[8, 4], "('pp',)");
    let w = typed(&[4, 16], "(None, 'tp')");
    assert_eq!(
        out_type(&[x.clone(), w], |a| vec![a[0].matmul(&a[1])]),
        "f32[8@pp,16@tp]"
    );
    // One side of a contraction split: the result is not split along it.
    let xc = typed(&[8, 4], "(None, 'tp')");
    let plain = ShapedArray::new(DType::F32, &[4, 16]);
    assert_eq!(
        out_type(&[xc.clone(), plain], |a| vec![a[0].matmul(&a[1])]),
        "f32[8,16]"
    );
    let wc = typed(&[4, 16], "('tp',)");
    let err = refusal(&[xc, wc], |a| vec![a[0].matmul(&a[1])]);
    for says in [
        "dot_general:",
        "both split",
        "P(None, 'tp')",
        "P('tp', None)",
        "out_sharding",
    ] {
        assert!(err.contains(says), "{says} not in: {err}");
    }
    let b1 = typed(&[2, 8, 4], "('dp',)");
    let b2 = typed(&[2, 4, 16], "(None, None, 'tp')");
    let err = refusal(&[b1.clone(), b2], |a| vec![a[0].matmul(&a[1])]);
    assert!(
        err.contains("batch dimension") && err.contains("reshard one operand"),
        "{err}"
    );
    let b3 = typed(&[2, 4, 16], "('dp', None, 'tp')");
    assert_eq!(
        out_type(&[b1, b3], |a| vec![a[0].matmul(&a[1])]),
        "f32[2@dp,8,16@tp]"
    );
}

#[test]
fn reshard_checks_its_spec_and_drops_reduced_axes() {
    let x = ShapedArray::new(DType::F32, &[8, 4]);
    assert_eq!(
        out_type(std::slice::from_ref(&x), |a| vec![
            a[0].reshard(&p("(('pp', 'tp'),)"))
        ]),
        "f32[8@(pp,tp),4]"
    );
    let err = trace(std::slice::from_ref(&x), |a| {
        vec![a[0].reshard(&p("('pp', 'pp')"))]
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("'pp' splits two dimensions"), "{err}");
    let err = traced(std::slice::from_ref(&x), |a| {
        vec![a[0].reshard(&p("(None, 'xx')"))]
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("lacks"), "{err}");
    let odd = ShapedArray::new(DType::F32, &[3, 4]);
    let err = traced(&[odd], |a| vec![a[0].reshard(&p("('pp',)"))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("do not divide"), "{err}");
    let err = ShapedArray::new(DType::F32, &[8])
        .with_explicit(&p("('pp', 'tp')"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("more than the rank 1"), "{err}");
}

#[test]
fn untyped_programs_are_unaffected() {
    let x = ShapedArray::new(DType::F32, &[8, 4]);
    let w = ShapedArray::new(DType::F32, &[4, 16]);
    let program = trace(&[x, w], |a| {
        vec![(a[0].matmul(&a[1]).reshape(&[2, 4, 16]).sum(&[1]) + 1.0).tanh()]
    })
    .unwrap();
    let text = print_closed(&program, 0);
    assert!(!text.contains('@'), "{text}");
    assert_eq!(out_types(&program), ["f32[2,16]"]);
}

/// `f` on explicit types and on plain ones: the interpreter gives the same values.
#[test]
fn the_interpreter_runs_explicit_programs_with_values_unchanged() {
    let f = |a: &[Tensor], explicit: bool| {
        let mut h = (&a[0].matmul(&a[1]) + 1.0).tanh();
        if explicit {
            h = h.reshard(&p("(None, 'tp')"));
        }
        vec![h.reshape(&[8, 2, 8]).sum(&[2]).transpose(&[1, 0])]
    };
    let plain = [
        ShapedArray::new(DType::F32, &[8, 4]),
        ShapedArray::new(DType::F32, &[4, 16]),
    ];
    let explicit = [typed(&[8, 4], "('pp',)"), typed(&[4, 16], "(None, 'tp')")];
    let typed_program = traced(&explicit, |a| f(a, true)).unwrap();
    assert_eq!(out_types(&typed_program), ["f32[2@tp,8]"]);
    let plain_program = trace(&plain, |a| f(a, false)).unwrap();
    assert!(!print_closed(&plain_program, 0).contains('@'));
    let args = [
        Array::new(
            DType::F32,
            &[8, 4],
            (0..32).map(|i| f64::from(i) / 32.0).collect(),
        )
        .unwrap(),
        Array::new(
            DType::F32,
            &[4, 16],
            (0..64).map(|i| f64::from(i % 7) - 3.0).collect(),
        )
        .unwrap(),
    ];
    let got = interp::eval_closed(&typed_program, &args).unwrap();
    let want = interp::eval_closed(&plain_program, &args).unwrap();
    assert_eq!(got[0].values(), want[0].values());
    // Its gradient program verifies: `reshard` transposes to a reshard back, and the
    // transposed `dot_general`s, contracting dimensions split on both sides, are given the
    // sharding of the operand they are the cotangent of (JAX's `out_sharding`).
    let grads = use_mesh(&mesh(), || vjp(&typed_program)).unwrap();
    let text = print_closed(&grads, 0);
    parse_closed(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(text.contains(":f32[8@pp,16@tp] = reshard "), "{text}");
    assert!(text.contains("out_sharding=P('pp', None)"), "{text}");
    let grad_types = out_types(&grads);
    assert_eq!(
        grad_types[grad_types.len() - 2..],
        ["f32[8@pp,4]", "f32[4,16@tp]"]
    );
    // ... and gives the gradients of the program on plain types.
    let plain_grads = vjp(&plain_program).unwrap();
    let mut with_ct = args.to_vec();
    with_ct.push(Array::new(DType::F32, &[2, 8], (0..16).map(f64::from).collect()).unwrap());
    let got = interp::eval_closed(&grads, &with_ct).unwrap();
    let want = interp::eval_closed(&plain_grads, &with_ct).unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.values(), w.values());
    }
}

const PRINTED: &str = "{ lambda ; a:f32[8@pp,4] b:f32[4,16@tp]. let
    c:f32[8@pp,16@tp] = dot_general[
      dimension_numbers=(([1], [0]), ([], []))
      out_sharding=None
      precision=None
      preferred_element_type=float32
    ] a b
    d:f32[16@tp,8@pp] = transpose[permutation=(1, 0)] c
    e:f32[16@tp,1,8@pp] = expand_dims[dimensions=(1,)] d
    f:f32[16@tp,8@pp] = squeeze[dimensions=(1,)] e
    g:f32[16@tp] = reduce_sum[axes=(1,) out_sharding=None] f
  in (g,) }";

#[test]
fn the_verifier_refuses_printed_types_the_rules_do_not_derive() {
    let program = parse_closed(PRINTED).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out_types(&program), ["f32[16@tp]"]);
    for (right, wrong) in [
        ("c:f32[8@pp,16@tp] = dot", "c:f32[8@pp,16] = dot"),
        (
            "d:f32[16@tp,8@pp] = transpose",
            "d:f32[16@pp,8@tp] = transpose",
        ),
        (
            "e:f32[16@tp,1,8@pp] = expand",
            "e:f32[16@tp,1@pp,8] = expand",
        ),
        ("g:f32[16@tp] = reduce_sum", "g:f32[16] = reduce_sum"),
    ] {
        let text = PRINTED.replace(right, wrong);
        assert_ne!(text, PRINTED);
        let err = parse_closed(&text).expect_err(wrong).to_string();
        assert!(
            err.contains("but it is typed") && err.contains("reshard"),
            "{wrong}: {err}"
        );
    }
}

#[test]
fn shard_map_on_an_explicit_mesh_types_its_results_by_their_out_specs() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/oracle/jaxpr_collectives_cases.json");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for case in file["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        if !name.starts_with("pcast_explicit") {
            continue;
        }
        let text = case["jaxpr"].as_str().unwrap();
        let program = parse_closed(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        // The jit's body: the two shard_maps' results, derived from their out specs, print as
        // JAX printed them.
        let jit = &program.jaxpr.eqns[0];
        let body = jit.params.jaxpr("jit", "jaxpr").unwrap();
        let mut derived = Vec::new();
        for eqn in body.jaxpr.eqns.iter().filter(|e| e.prim == Prim::ShardMap) {
            let ins: Vec<ShapedArray> = eqn
                .inputs
                .iter()
                .map(|a| body.jaxpr.atom_aval(a).clone())
                .collect();
            let outs = Prim::ShardMap
                .abstract_eval(&eqn.params, &ins, None)
                .unwrap();
            let out = outs[0].to_string();
            assert!(
                text.contains(&format!(":{out} = shard_map[")),
                "{name}: {out}"
            );
            derived.push(outs[0].clone());
        }
        assert_eq!(derived.len(), 2, "{name}");
        assert!(derived[0].is_explicitly_sharded() && !derived[0].reduced().is_empty());
        // A result printed without its sharding is refused (the first, which the jit's body
        // reshards, so the shard_map's own check finds it).
        let mut unsplit = derived[0].clone();
        unsplit.set_explicit_dims(Vec::new());
        let plain = unsplit.to_string();
        let wrong = text.replacen(
            &format!(":{} = shard_map[", derived[0]),
            &format!(":{plain} = shard_map["),
            1,
        );
        assert_ne!(wrong, text);
        let err = parse_closed(&wrong).expect_err(name).to_string();
        assert!(
            err.contains(&format!("but it is typed {plain}")),
            "{name}: {err}"
        );
        // So is one printed without its reduced axes.
        let mut unreduced = derived[0].clone();
        unreduced.set_reduced_unreduced(Default::default(), Default::default());
        let wrong = text.replacen(
            &format!(":{} = shard_map[", derived[0]),
            &format!(":{unreduced} = shard_map["),
            1,
        );
        assert_ne!(wrong, text);
        let err = parse_closed(&wrong).expect_err(name).to_string();
        assert!(
            err.contains("reduced and unreduced axes differ"),
            "{name}: {err}"
        );
    }
}

/// A `jit` on an explicit mesh whose body splits a split dimension: `{SPLIT}` is the printed
/// type of the reshape's result, `{MESH}` the jit's `ctx_mesh` line.
const RESHAPED: &str = "{ lambda ; a:f32[8@pp,4]. let
    b:{SPLIT} = jit[
      name=f
      {MESH}
      jaxpr={ lambda ; c:f32[8@pp,4]. let
          d:{SPLIT} = reshape[dimensions=None new_sizes=(2, 4, 4) sharding=None] c
        in (d,) }
    ] a
  in (b,) }";

#[test]
fn the_verifier_takes_axis_sizes_from_the_jit_s_context_mesh() {
    let program = |split: &str, mesh: bool| {
        let ctx = "ctx_mesh=Mesh('pp': 2, 'tp': 2, axis_types=(Explicit, Explicit))";
        RESHAPED
            .replace("{SPLIT}", split)
            .replace("{MESH}", if mesh { ctx } else { "" })
    };
    parse_closed(&program("f32[2@pp,4,4]", true)).unwrap_or_else(|e| panic!("{e}"));
    let err = parse_closed(&program("f32[2,4@pp,4]", true))
        .expect_err("a wrong split")
        .to_string();
    assert!(
        err.contains("reshape gives a result split as P('pp', None, None)"),
        "{err}"
    );
    // Without the mesh the rule cannot place the axis and takes the printed type.
    parse_closed(&program("f32[2,4@pp,4]", false)).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn vmap_keeps_explicit_shardings_with_the_batch_dimension_unsharded() {
    // f(x: f32[8@pp,4], w: f32[4,8@tp]) = (sum(sin(x) @ w, 1), sin(x) @ w, x + 1).
    let program = traced(
        &[typed(&[8, 4], "('pp',)"), typed(&[4, 8], "(None, 'tp')")],
        |a| {
            let y = (&a[0].sin() * 2.0).matmul(&a[1]);
            vec![y.sum(&[1]), y, &a[0] + 1.0]
        },
    )
    .unwrap();
    assert_eq!(
        out_types(&program),
        ["f32[8@pp]", "f32[8@pp,8@tp]", "f32[8@pp,4]"]
    );
    // x batched at 0 (size 3), w shared; results batched at 0, 1 and 2 (JAX's
    // `vmap(f, in_axes=(0, None), out_axes=(0, 1, 2))`, `spmd_axis_name=None`).
    let batched = use_mesh(&mesh(), || {
        tessera_ir::vmap(&program, &[Some(0), None], &[0, 1, 2], 3)
    })
    .unwrap();
    let ins: Vec<String> = batched
        .jaxpr
        .in_avals()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(ins, ["f32[3,8@pp,4]", "f32[4,8@tp]"]);
    assert_eq!(
        out_types(&batched),
        ["f32[3,8@pp]", "f32[8@pp,3,8@tp]", "f32[8@pp,4,3]"]
    );
    // The batched program verifies, prints and parses back, and computes f per batch element.
    tessera_ir::verify(&batched).unwrap();
    let text = print_closed(&batched, 0);
    let back = parse_closed(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(print_closed(&back, 0), text);
    let xs: Vec<f64> = (0..96).map(|k| (f64::from(k) * 0.3).cos()).collect();
    let w: Vec<f64> = (0..32).map(|k| f64::from(k % 5) - 2.0).collect();
    let xa = Array::new(DType::F32, &[3, 8, 4], xs.clone()).unwrap();
    let wa = Array::new(DType::F32, &[4, 8], w.clone()).unwrap();
    let got = interp::eval_closed(&batched, &[xa, wa.clone()]).unwrap();
    for b in 0..3 {
        let x = Array::new(DType::F32, &[8, 4], xs[b * 32..(b + 1) * 32].to_vec()).unwrap();
        let one = interp::eval_closed(&program, &[x, wa.clone()]).unwrap();
        let sums = got[0].to_vec();
        assert_eq!(&sums[b * 8..(b + 1) * 8], one[0].to_vec().as_slice());
        let ys = got[1].to_vec();
        for r in 0..8 {
            for c in 0..8 {
                assert_eq!(ys[(r * 3 + b) * 8 + c], one[1].to_vec()[r * 8 + c]);
            }
        }
    }
}

#[test]
fn traced_shard_maps_print_and_parse_their_mesh_s_axis_types_as_jax_does() {
    use tessera_ir::prim::ShardMapParams;
    use tessera_ir::trace::shard_map;
    use tessera_sharding::AxisType;
    // An Auto mesh prints as the oracle's pmap cases print theirs.
    let auto = AbstractMesh::auto(&[("i", 8)]).unwrap();
    let program = trace(&[ShapedArray::new(DType::F32, &[8, 2])], |a| {
        shard_map(&auto, &[p("('i',)")], &[p("('i',)")], &[&a[0]], |b| {
            vec![b[0].psum(&["i"])]
        })
    })
    .unwrap();
    let text = print_closed(&program, 0);
    let line = "mesh=Mesh('i': 8, axis_types=(Auto,))";
    assert!(text.contains(line), "{text}");
    let oracle = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/oracle/jaxpr_collectives_cases.json"),
    )
    .unwrap();
    assert!(oracle.contains(line), "JAX prints the same line");
    // A mesh of Explicit and Auto axes: printed, parsed back with its types, and the results
    // of a shard_map on it typed by their out specs over the Explicit axes.
    let mixed = AbstractMesh::new(
        &["pp", "tp"],
        &[2, 2],
        &[AxisType::Explicit, AxisType::Auto],
    )
    .unwrap();
    let program = trace(&[typed(&[8, 4], "('pp',)")], |a| {
        shard_map(&mixed, &[p("('pp',)")], &[p("('pp',)")], &[&a[0]], |b| {
            vec![b[0].sin()]
        })
    })
    .unwrap();
    let text = print_closed(&program, 0);
    assert!(
        text.contains("mesh=Mesh('pp': 2, 'tp': 2, axis_types=(Explicit, Auto))"),
        "{text}"
    );
    assert_eq!(out_types(&program), ["f32[8@pp,4]"]);
    let back = parse_closed(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(print_closed(&back, 0), text);
    let p = ShardMapParams::read(&back.jaxpr.eqns[0].params).unwrap();
    assert_eq!(p.mesh.axis_types(), [AxisType::Explicit, AxisType::Auto]);
    // An unknown axis type is a typed error naming it.
    let bad = text.replace("(Explicit, Auto)", "(Explicit, Sideways)");
    let err = parse_closed(&bad)
        .expect_err("unknown axis type")
        .to_string();
    assert!(err.contains("unknown axis type Sideways"), "{err}");
}
