//! `reshard` (explicit sharding) lowers as JAX lowers it: its operand wrapped with the
//! destination sharding (the result type's, `f32[8@pp,4]`), an `sdy.sharding_constraint` under
//! Shardy and a `@Sharding` custom call under GSPMD, over the mesh of the enclosing `jit`'s
//! `ctx_mesh`, of `use_mesh` around the lowering or of the entry shardings; with no mesh known,
//! or in a module for one partition, it lowers to its operand.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::trace::{trace, use_mesh};
use tessera_ir::{ClosedJaxpr, DType, ShapedArray};
use tessera_sharding::{AbstractMesh, Mesh, NamedSharding, PartitionSpec};
use tessera_stablehlo::{LowerOptions, Partitioner, lower_closed};

fn spec(text: &str) -> PartitionSpec {
    PartitionSpec::parse(text).unwrap()
}

fn mesh() -> AbstractMesh {
    AbstractMesh::auto(&[("pp", 2), ("tp", 4)]).unwrap()
}

/// `tanh(reshard(x, P('pp', 'tp')))` on `f32[8,4]`.
fn program() -> ClosedJaxpr {
    use_mesh(&mesh(), || {
        trace(&[ShapedArray::new(DType::F32, &[8, 4])], |a| {
            vec![a[0].reshard(&spec("P('pp', 'tp')")).tanh()]
        })
    })
    .unwrap()
}

fn options(partitioner: Partitioner, entry: bool) -> LowerOptions {
    let replicated = NamedSharding::new(&Mesh::iota(mesh()), PartitionSpec::replicated()).unwrap();
    let entry = entry.then_some(replicated);
    LowerOptions {
        num_partitions: 8,
        arg_shardings: vec![entry.clone()],
        result_shardings: vec![entry],
        partitioner,
        ..LowerOptions::default()
    }
}

/// The lines of `text` that constrain a value.
fn constraints(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.contains("sdy.sharding_constraint") || l.contains("\"Sharding\""))
        .collect()
}

#[test]
fn reshard_is_a_sharding_constraint_under_shardy_and_gspmd() {
    let p = program();
    assert!(tessera_ir::text::print_closed(&p, 0).contains("f32[8@pp,4@tp] = reshard"));
    let shardy = lower_closed(&p, &options(Partitioner::Shardy, true))
        .unwrap()
        .text;
    let found = constraints(&shardy);
    assert_eq!(found.len(), 1, "{shardy}");
    assert!(
        found[0].contains(r#"#sdy.sharding<@mesh, [{"pp"}, {"tp"}]>"#),
        "{shardy}"
    );
    let gspmd = lower_closed(&p, &options(Partitioner::Gspmd, true))
        .unwrap()
        .text;
    let found = constraints(&gspmd);
    assert_eq!(found.len(), 1, "{gspmd}");
    assert!(
        found[0].contains(r#"mhlo.sharding = "{devices=[2,4]<=[8]}""#),
        "{gspmd}"
    );
    assert!(!gspmd.contains("sdy."), "{gspmd}");
}

#[test]
fn reshard_takes_the_mesh_of_use_mesh_or_of_a_jit_s_ctx_mesh() {
    // No entry shardings: the mesh comes from use_mesh around the lowering.
    let p = program();
    let text = use_mesh(&mesh(), || {
        lower_closed(&p, &options(Partitioner::Gspmd, false)).unwrap()
    })
    .text;
    assert_eq!(constraints(&text).len(), 1, "{text}");
    // Without any mesh the destination's axes have no sizes: the operand, as before.
    let text = lower_closed(&p, &options(Partitioner::Gspmd, false))
        .unwrap()
        .text;
    assert!(constraints(&text).is_empty(), "{text}");
    // JAX's text: a reshard in a jit whose ctx_mesh names the mesh (the oracle's
    // `pcast_explicit` form), lowered with no mesh set around it.
    let jax = "{ lambda ; a:f32[8,4]. let
    b:f32[8@pp,4] = jit[
      name=f
      ctx_mesh=Mesh('pp': 2, 'tp': 4, axis_types=(Explicit, Explicit))
      jaxpr={ lambda ; a:f32[8,4]. let
          c:f32[8@pp,4] = reshard a
        in (c,) }
    ] a
  in (b,) }";
    let closed = tessera_ir::text::parse_closed(jax).unwrap();
    let text = lower_closed(&closed, &options(Partitioner::Shardy, false))
        .unwrap()
        .text;
    let found = constraints(&text);
    assert_eq!(found.len(), 1, "{text}");
    assert!(found[0].contains(r#"[{"pp"}, {}]"#), "{text}");
}

#[test]
fn reshard_in_a_module_for_one_partition_is_its_operand() {
    let options = LowerOptions {
        num_partitions: 1,
        ..LowerOptions::default()
    };
    let text = use_mesh(&mesh(), || lower_closed(&program(), &options).unwrap()).text;
    assert!(constraints(&text).is_empty(), "{text}");
}
