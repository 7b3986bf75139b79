//! `sharding_constraint` (JAX's `with_sharding_constraint`) from the tracing API: its text form
//! round-trips and reads back the mesh and spec, it is the identity in the interpreter, JVP and
//! transpose constrain tangents and cotangents, batching leaves the batch dimension unsplit, and
//! bad specs are refused with an error naming the dimension and axis.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::prim::ConstraintParams;
use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::{shard_map_program, trace, use_mesh};
use tessera_ir::{Array, ClosedJaxpr, DType, Prim, ShapedArray, interp, jvp, vjp, vmap};
use tessera_sharding::{AbstractMesh, PartitionSpec};

fn f32(shape: &[i64]) -> ShapedArray {
    ShapedArray::new(DType::F32, shape)
}

fn mesh() -> AbstractMesh {
    AbstractMesh::auto(&[("data", 4), ("model", 2)]).unwrap()
}

fn spec(text: &str) -> PartitionSpec {
    PartitionSpec::parse(&format!("P{text}")).unwrap()
}

/// `tanh(x)` with `x` constrained to `spec_text` over the data x model mesh.
fn constrained(shape: &[i64], spec_text: &str) -> tessera_ir::Result<ClosedJaxpr> {
    use_mesh(&mesh(), || {
        trace(&[f32(shape)], |a| {
            vec![a[0].with_sharding(&spec(spec_text)).tanh()]
        })
    })
}

fn constraints(program: &ClosedJaxpr) -> Vec<ConstraintParams> {
    program
        .jaxpr
        .eqns
        .iter()
        .filter(|e| e.prim == Prim::ShardingConstraint)
        .map(|e| ConstraintParams::read(&e.params).unwrap())
        .collect()
}

#[test]
fn the_traced_constraint_prints_as_jax_and_parses_back() {
    let program = constrained(&[8, 4], "('data', 'model')").unwrap();
    let text = print_closed(&program, 0);
    assert!(
        text.contains(
            "sharding=NamedSharding(mesh=Mesh('data': 4, 'model': 2, axis_types=(Auto, Auto)), \
             spec=P('data', 'model'), memory_kind=device)"
        ),
        "{text}"
    );
    assert!(text.contains("unconstrained_dims=frozenset({})"), "{text}");
    let back = parse_closed(&text).unwrap();
    assert_eq!(print_closed(&back, 0), text);
    let read = constraints(&back);
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].mesh, mesh());
    assert_eq!(read[0].spec, spec("('data', 'model')"));
}

#[test]
fn a_multi_axis_dimension_and_unconstrained_dims_round_trip() {
    let text = "{ lambda ; a:f32[8,4]. let
    b:f32[8,4] = sharding_constraint[
      context_mesh=Mesh()
      layout=None
      sharding=NamedSharding(mesh=Mesh('data': 4, 'model': 2, axis_types=(Auto, Auto)), spec=P(('data', 'model'), None), memory_kind=device)
      unconstrained_dims=frozenset({1})
    ] a
  in (b,) }";
    let program = parse_closed(text).unwrap();
    assert_eq!(print_closed(&program, 0), text);
    let read = &constraints(&program)[0];
    assert_eq!(read.spec, spec("(('data', 'model'), None)"));
    assert_eq!(read.unconstrained_dims, vec![1]);
}

#[test]
fn the_constraint_is_the_identity_on_values() {
    let program = constrained(&[8, 4], "('data', None)").unwrap();
    let x = Array::new(
        DType::F32,
        &[8, 4],
        (0..32).map(|i| i as f64 / 10.0).collect(),
    )
    .unwrap();
    let out = interp::eval_closed(&program, std::slice::from_ref(&x)).unwrap();
    let want: Vec<f64> = (0..32).map(|i| (f64::from(i) / 10.0).tanh()).collect();
    for (g, w) in out[0].to_vec().iter().zip(&want) {
        assert!((g - w).abs() < 1e-6, "{g} vs {w}");
    }
}

#[test]
fn tangents_and_cotangents_carry_the_same_constraint() {
    let program = constrained(&[8, 4], "('data', 'model')").unwrap();
    let want = spec("('data', 'model')");
    let tangent = jvp(&program).unwrap();
    let found = constraints(&tangent);
    assert!(found.len() >= 2, "primal and tangent: {found:?}");
    assert!(found.iter().all(|c| c.spec == want));
    let cotangent = vjp(&program).unwrap();
    let found = constraints(&cotangent);
    assert!(found.len() >= 2, "primal and cotangent: {found:?}");
    assert!(found.iter().all(|c| c.spec == want));
}

#[test]
fn batching_leaves_the_batch_dimension_unsplit() {
    let program = constrained(&[8, 4], "('data', 'model')").unwrap();
    for (axis, want) in [
        (0, "(None, 'data', 'model')"),
        (2, "('data', 'model', None)"),
    ] {
        let batched = vmap(&program, &[Some(axis)], &[axis], 3).unwrap();
        let found = constraints(&batched);
        assert_eq!(found.len(), 1, "axis {axis}");
        assert_eq!(found[0].spec, spec(want), "axis {axis}");
    }
}

fn error(shape: &[i64], spec_text: &str) -> String {
    match constrained(shape, spec_text) {
        Ok(p) => panic!("expected an error, traced\n{}", print_closed(&p, 0)),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_specs_are_refused_naming_the_dimension_and_axis() {
    let missing = error(&[8, 4], "('data', 'stage')");
    assert!(
        missing.contains("dimension 1") && missing.contains("'stage'"),
        "{missing}"
    );
    let indivisible = error(&[6, 4], "('data', None)");
    assert!(
        indivisible.contains("dimension 0") && indivisible.contains("size 6"),
        "{indivisible}"
    );
    let twice = error(&[8, 4], "('data', 'data')");
    assert!(twice.contains("appears twice"), "{twice}");
    let long = error(&[8], "('data', 'model')");
    assert!(long.contains("rank 1"), "{long}");
}

#[test]
fn a_bare_spec_outside_use_mesh_is_an_error_not_a_panic() {
    let err = trace(&[f32(&[8])], |a| {
        vec![a[0].with_sharding(&spec("('data',)"))]
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("use_mesh"), "{err}");
}

#[test]
fn a_constraint_on_a_manual_axis_inside_shard_map_is_refused() {
    let m = mesh();
    let err = shard_map_program(
        &m,
        &[spec("('data',)")],
        &[spec("('data',)")],
        &[f32(&[8, 4])],
        |b| vec![b[0].with_sharding_on(&m, &spec("('data',)"))],
    )
    .map(|p| print_closed(&p, 0))
    .unwrap_err()
    .to_string();
    assert!(err.contains("manual"), "{err}");
}

/// `with_sharding_constraint(x, P('data', P.UNCONSTRAINED))` as JAX prints it.
const UNCONSTRAINED: &str = "{ lambda ; a:f32[8,4]. let
    b:f32[8,4] = sharding_constraint[
      context_mesh=Mesh()
      layout=None
      sharding=NamedSharding(mesh=Mesh('data': 4, 'model': 2, axis_types=(Auto, Auto)), spec=P('data', UNCONSTRAINED), memory_kind=device)
      unconstrained_dims=frozenset({1})
    ] a
  in (b,) }";

#[test]
fn an_unconstrained_dimension_is_read_printed_and_batched() {
    let program = parse_closed(UNCONSTRAINED).unwrap();
    assert_eq!(print_closed(&program, 0), UNCONSTRAINED);
    let read = &constraints(&program)[0];
    assert_eq!(read.spec, spec("('data', None)"));
    assert_eq!(read.unconstrained_dims, vec![1]);
    // Built again from the typed value, it prints as JAX does.
    let params = read.to_params();
    let text = params.get("sharding").unwrap().to_string();
    assert!(text.contains("spec=P('data', UNCONSTRAINED)"), "{text}");
    // The spec alone marks the dimension, without `unconstrained_dims`.
    let spec_only = UNCONSTRAINED.replace(
        "unconstrained_dims=frozenset({1})",
        "unconstrained_dims=frozenset({})",
    );
    let read = &constraints(&parse_closed(&spec_only).unwrap())[0];
    assert_eq!(read.unconstrained_dims, vec![1]);
    // A batch dimension in front shifts it.
    assert_eq!(read.batched(0).unconstrained_dims, vec![2]);
    // Values pass through.
    let x = Array::new(DType::F32, &[8, 4], (0..32).map(f64::from).collect()).unwrap();
    assert_eq!(
        interp::eval_closed(&program, std::slice::from_ref(&x)).unwrap(),
        vec![x]
    );
}

#[test]
fn the_tracing_api_takes_unconstrained_dimensions_as_jax_prints_them() {
    let program = constrained(&[8, 4], "('data', P.UNCONSTRAINED)").unwrap();
    let text = print_closed(&program, 0);
    assert!(text.contains("spec=P('data', UNCONSTRAINED)"), "{text}");
    assert!(text.contains("unconstrained_dims=frozenset({1})"), "{text}");
    let read = &constraints(&parse_closed(&text).unwrap())[0];
    assert_eq!(
        (read.spec.clone(), read.unconstrained_dims.clone()),
        (spec("('data', None)"), vec![1])
    );
}
