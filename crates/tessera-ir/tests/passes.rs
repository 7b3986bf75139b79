//! Every pass keeps every oracle program valid (the verifier runs after each) and its values
//! unchanged; each pass does its job on a small program.

#![allow(clippy::unwrap_used, missing_docs)]

use expect_test::{Expect, expect};
use tessera_ir::interp::eval_closed;
use tessera_ir::passes::{
    eliminate_common_subexpressions, eliminate_dead_code, fold_constants, inline_calls,
};
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::{Array, ClosedJaxpr, verify};

type Pass = fn(&ClosedJaxpr) -> ClosedJaxpr;

const PASSES: [(&str, Pass); 4] = [
    ("dce", eliminate_dead_code),
    ("cse", eliminate_common_subexpressions),
    ("inline", inline_calls),
    ("fold", fold_constants),
];

#[derive(serde::Deserialize)]
struct Tensor {
    dtype: String,
    shape: Vec<i64>,
    data: Vec<f64>,
}

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    jaxpr: String,
    inputs: Vec<Tensor>,
}

#[derive(serde::Deserialize)]
struct File {
    cases: Vec<Case>,
}

#[test]
fn passes_keep_oracle_programs_valid_and_equal() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/oracle/jaxpr_cases.json");
    let file: File = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for case in &file.cases {
        let program = parse_closed(&case.jaxpr).unwrap();
        let inputs: Vec<Array> = case
            .inputs
            .iter()
            .map(|t| {
                Array::new(
                    tessera_ir::DType::parse(&t.dtype).unwrap(),
                    &t.shape,
                    t.data.clone(),
                )
                .unwrap()
            })
            .collect();
        let expected = eval_closed(&program, &inputs).unwrap();
        let mut current = program.clone();
        for (name, pass) in PASSES {
            current = pass(&current);
            verify(&current).unwrap_or_else(|e| panic!("{}: after {name}: {e}", case.name));
            assert_eq!(
                eval_closed(&current, &inputs).unwrap(),
                expected,
                "{}: {name} changed the values",
                case.name
            );
        }
    }
}

fn check(pass: Pass, text: &str, expected: Expect) {
    let out = pass(&parse_closed(text).unwrap());
    verify(&out).unwrap();
    expected.assert_eq(&print_closed(&out, 0));
}

const SAMPLE: &str = "{ lambda ; a:f32[3]. let
    b:f32[3] = sin a
    c:f32[3] = sin a
    d:f32[3] = cos a
    e:f32[] = mul 2.0:f32[] 3.0:f32[]
    f:f32[3] = mul b e
    g:f32[3] = add f c
    h:f32[3] = jit[
      name=twice
      jaxpr={ lambda ; i:f32[3]. let
          j:f32[3] = add i i
        in (j,) }
    ] g
  in (h,) }";

#[test]
fn dce_drops_unused_equations() {
    check(
        eliminate_dead_code,
        SAMPLE,
        expect![[r#"
        { lambda ; a:f32[3]. let
            b:f32[3] = sin a
            c:f32[3] = sin a
            d:f32[] = mul 2.0:f32[] 3.0:f32[]
            e:f32[3] = mul b d
            f:f32[3] = add e c
            g:f32[3] = jit[
              name=twice
              jaxpr={ lambda ; h:f32[3]. let
                  i:f32[3] = add h h
                in (i,) }
            ] f
          in (g,) }"#]],
    );
}

#[test]
fn cse_reuses_the_first_sin() {
    check(
        eliminate_common_subexpressions,
        SAMPLE,
        expect![[r#"
        { lambda ; a:f32[3]. let
            b:f32[3] = sin a
            c:f32[3] = cos a
            d:f32[] = mul 2.0:f32[] 3.0:f32[]
            e:f32[3] = mul b d
            f:f32[3] = add e b
            g:f32[3] = jit[
              name=twice
              jaxpr={ lambda ; h:f32[3]. let
                  i:f32[3] = add h h
                in (i,) }
            ] f
          in (g,) }"#]],
    );
}

#[test]
fn inlining_and_folding_flatten_the_program() {
    check(
        |j| fold_constants(&inline_calls(j)),
        SAMPLE,
        expect![[r#"
        { lambda ; a:f32[3]. let
            b:f32[3] = sin a
            c:f32[3] = sin a
            d:f32[3] = cos a
            e:f32[3] = mul b 6.0:f32[]
            f:f32[3] = add e c
            g:f32[3] = add f f
          in (g,) }"#]],
    );
}

#[test]
fn split_outputs_hands_on_shared_values_and_recomputes_nothing() {
    use tessera_ir::passes::split_outputs;
    use tessera_ir::trace::trace;
    let f32 = |s: &[i64]| tessera_ir::ShapedArray::new(tessera_ir::DType::F32, s);
    // a = tanh(x @ w); first result a @ v, second result sum(a) * 2.
    let program = trace(&[f32(&[2, 3]), f32(&[3, 3]), f32(&[3, 1])], |t| {
        let a = t[0].matmul(&t[1]).tanh();
        vec![a.matmul(&t[2]), &a.sum(&[0, 1]) * 2.0]
    })
    .unwrap();
    let split = split_outputs(&program, &[0]).unwrap();
    tessera_ir::verify(&split.first).unwrap();
    tessera_ir::verify(&split.second).unwrap();
    assert_eq!(split.handed_on, 1, "only `a` crosses");
    let count = |p: &tessera_ir::ClosedJaxpr, name: &str| {
        p.jaxpr
            .eqns
            .iter()
            .filter(|e| e.prim.name() == name)
            .count()
    };
    assert_eq!(
        count(&split.second, "tanh") + count(&split.second, "dot_general"),
        0
    );
    let args: Vec<tessera_ir::Array> = [vec![2, 3], vec![3, 3], vec![3, 1]]
        .iter()
        .map(|s| {
            let n: i64 = s.iter().product();
            tessera_ir::Array::new(
                tessera_ir::DType::F32,
                s,
                (0..n).map(|i| (i as f64 * 0.3).sin()).collect(),
            )
            .unwrap()
        })
        .collect();
    let want = eval_closed(&program, &args).unwrap();
    let first = eval_closed(&split.first, &args).unwrap();
    let second = eval_closed(&split.second, &first[1..]).unwrap();
    assert_eq!(first[0], want[0]);
    assert_eq!(second[0], want[1]);
}

/// A weight gradient (a contraction over the batch) and a value no contraction makes, both
/// returned unreduced over `data`: the contraction is computed again over the batch split
/// across `data` and kept partial; the other value is divided by the 4 devices; the whole
/// values stay for their other readers. The printed program parses back (constraints carry
/// their unreduced axes) and verifies.
#[test]
fn partial_sums_split_the_contraction_and_share_the_rest() {
    use tessera_ir::passes::keep_partial_sums;
    use tessera_sharding::{AbstractMesh, PartitionSpec};
    let program = parse_closed(
        "{ lambda ; a:f32[8,4] b:f32[8,3]. let
            c:f32[4,3] = dot_general[dimension_numbers=(([0], [0]), ([], []))] a b
            d:f32[4,3] = tanh c
          in (c, d) }",
    )
    .unwrap();
    let mesh = AbstractMesh::auto(&[("data", 4)]).unwrap();
    let spec = PartitionSpec::replicated().with_unreduced(&["data"]);
    let out = keep_partial_sums(&program, &mesh, &[(0, spec.clone()), (1, spec)], &[]);
    verify(&out).unwrap();
    let text = print_closed(&out, 0);
    verify(&parse_closed(&text).unwrap()).unwrap();
    expect![[r#"
        { lambda ; a:f32[8,4] b:f32[8,3]. let
            c:f32[4,3] = dot_general[dimension_numbers=(([0], [0]), ([], []))] a b
            d:f32[8,4] = sharding_constraint[
              context_mesh=Mesh()
              layout=None
              sharding=NamedSharding(mesh=Mesh('data': 4, axis_types=(Auto,)), spec=P('data', UNCONSTRAINED), memory_kind=device)
              unconstrained_dims=frozenset({1})
            ] a
            e:f32[8,3] = sharding_constraint[
              context_mesh=Mesh()
              layout=None
              sharding=NamedSharding(mesh=Mesh('data': 4, axis_types=(Auto,)), spec=P('data', UNCONSTRAINED), memory_kind=device)
              unconstrained_dims=frozenset({1})
            ] b
            f:f32[4,3] = dot_general[dimension_numbers=(([0], [0]), ([], []))] d e
            g:f32[4,3] = sharding_constraint[
              context_mesh=Mesh()
              layout=None
              sharding=NamedSharding(mesh=Mesh('data': 4, axis_types=(Explicit,)), spec=P(unreduced={'data'}), memory_kind=device)
              unconstrained_dims=frozenset({})
            ] f
            h:f32[4,3] = tanh c
            i:f32[4,3] = sharding_constraint[
              context_mesh=Mesh()
              layout=None
              sharding=NamedSharding(mesh=Mesh('data': 4, axis_types=(Auto,)), spec=P(), memory_kind=device)
              unconstrained_dims=frozenset({})
            ] h
            j:f32[4,3] = mul i 0.25:f32[]
            k:f32[4,3] = sharding_constraint[
              context_mesh=Mesh()
              layout=None
              sharding=NamedSharding(mesh=Mesh('data': 4, axis_types=(Explicit,)), spec=P(unreduced={'data'}), memory_kind=device)
              unconstrained_dims=frozenset({})
            ] j
          in (g, k) }"#]].assert_eq(&text);
}

/// A `shard_map` loses the results nothing reads and the operands its pruned body no longer
/// reads, their specs with them (JAX's DCE rule), and computes the same.
#[test]
fn dce_prunes_a_shard_maps_unused_results_and_operands() {
    use tessera_ir::trace::{shard_map, trace};
    use tessera_ir::{DType, ShapedArray};
    use tessera_sharding::{AbstractMesh, PartitionSpec};
    let mesh = AbstractMesh::auto(&[("x", 2)]).unwrap();
    let split = PartitionSpec::parse("P('x')").unwrap();
    let aval = ShapedArray::new(DType::F32, &[4]);
    let program = trace(&[aval.clone(), aval], |a| {
        let outs = shard_map(
            &mesh,
            &[split.clone(), split.clone()],
            &[split.clone(), split.clone()],
            &[&a[0], &a[1]],
            |b| vec![b[0].sin(), b[1].cos()],
        );
        vec![outs[0].clone()]
    })
    .unwrap();
    let pruned = eliminate_dead_code(&program);
    verify(&pruned).unwrap();
    let eqn = &pruned.jaxpr.eqns[0];
    assert_eq!((eqn.inputs.len(), eqn.outputs.len()), (1, 1), "{pruned:?}");
    let text = print_closed(&pruned, 0);
    assert!(!text.contains("cos"), "{text}");
    assert!(text.contains("in_specs=(((x,),),)"), "{text}");
    assert!(text.contains("out_specs=(((x,),),)"), "{text}");
    let args = [
        Array::new(DType::F32, &[4], vec![0.1, 0.2, 0.3, 0.4]).unwrap(),
        Array::new(DType::F32, &[4], vec![1.0, 2.0, 3.0, 4.0]).unwrap(),
    ];
    assert_eq!(
        eval_closed(&pruned, &args).unwrap()[0].to_vec(),
        eval_closed(&program, &args).unwrap()[0].to_vec()
    );
}
