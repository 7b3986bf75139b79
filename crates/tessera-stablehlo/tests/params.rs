//! Parameters the lowering reads through `tessera-ir`'s typed readers, so it emits what the
//! interpreter computes: `round`'s `rounding_method` picks the StableHLO operation, `sort`'s
//! `is_stable` is the one `SortParams` reads, negative collective dimensions count from the
//! end as in the interpreter, and a malformed or missing value is an error, never a default.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::text::{parse_closed, print_closed};
use tessera_ir::trace::{Tensor, shard_map_program};
use tessera_ir::{ClosedJaxpr, DType, ParamValue, ShapedArray};
use tessera_sharding::{AbstractMesh, PartitionSpec};
use tessera_stablehlo::{LowerOptions, lower_closed};

fn program(text: &str) -> ClosedJaxpr {
    parse_closed(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn lower(text: &str) -> Result<String, String> {
    lower_program(&program(text))
}

fn lower_program(closed: &ClosedJaxpr) -> Result<String, String> {
    lower_closed(closed, &LowerOptions::default())
        .map(|m| m.text)
        .map_err(|e| e.to_string())
}

/// Parsing refuses `text` (its shape rule reads the malformed parameter), and so does the
/// lowering of the same equation made from `valid` with its parameter `name` set to `value`
/// (or removed), which no parse checked.
fn refused(text: &str, valid: &str, name: &str, value: Option<ParamValue>) -> String {
    let parsed = parse_closed(text).err().map(|e| e.to_string());
    assert!(
        parsed.as_deref().is_some_and(|e| e.contains(name)),
        "{parsed:?}"
    );
    let mut closed = program(valid);
    let eqn = &mut closed.jaxpr.eqns[0];
    let entries = eqn.params.entries_mut();
    entries.retain(|(k, _)| k != name);
    entries.extend(value.map(|v| (name.to_owned(), v)));
    lower_program(&closed).err().unwrap_or_default()
}

fn round(method: &str) -> Result<String, String> {
    lower(&format!(
        "{{ lambda ; a:f32[4]. let b:f32[4] = round[rounding_method={method}] a in (b,) }}"
    ))
}

#[test]
fn round_lowers_by_its_rounding_method() {
    for (method, op) in [
        ("0", "stablehlo.round_nearest_afz"),
        ("1", "stablehlo.round_nearest_even"),
        (
            "RoundingMethod.AWAY_FROM_ZERO",
            "stablehlo.round_nearest_afz",
        ),
        (
            "RoundingMethod.TO_NEAREST_EVEN",
            "stablehlo.round_nearest_even",
        ),
    ] {
        let text = round(method).unwrap();
        assert!(text.contains(op), "{method}: {text}");
        assert_eq!(text.matches("stablehlo.round_").count(), 1, "{text}");
    }
}

#[test]
fn a_malformed_rounding_method_does_not_lower() {
    let valid = "{ lambda ; a:f32[4]. let b:f32[4] = round[rounding_method=1] a in (b,) }";
    for (method, value) in [
        ("2", ParamValue::Int(2)),
        ("True", ParamValue::Bool(true)),
        (
            "RoundingMethod.UP",
            ParamValue::Name("RoundingMethod.UP".into()),
        ),
    ] {
        let text = valid.replace("rounding_method=1", &format!("rounding_method={method}"));
        let err = refused(&text, valid, "rounding_method", Some(value));
        assert!(err.contains("rounding_method"), "{method}: {err:?}");
    }
}

fn sort(params: &str) -> Result<String, String> {
    lower(&format!(
        "{{ lambda ; a:f32[4]. let b:f32[4] = sort[{params}] a in (b,) }}"
    ))
}

#[test]
fn sort_lowers_the_is_stable_it_was_given() {
    let stable = sort("dimension=0 is_stable=True num_keys=1").unwrap();
    assert!(stable.contains("is_stable = true"), "{stable}");
    let unstable = sort("dimension=0 is_stable=False num_keys=1").unwrap();
    assert!(unstable.contains("is_stable = false"), "{unstable}");
}

#[test]
fn a_sort_without_is_stable_does_not_lower() {
    let valid = "{ lambda ; a:f32[4]. let b:f32[4] = sort[dimension=0 is_stable=True num_keys=1] a in (b,) }";
    let text = valid.replace(" is_stable=True", "");
    let err = refused(&text, valid, "is_stable", None);
    assert!(err.contains("is_stable"), "{err:?}");
}

/// The module of `f` under `shard_map` over a 2×2 mesh on `[4, 8]` blocks laid out by
/// `P('x', 'y')`, with each `(from, to)` of `edits` replaced in the program's text first.
fn lower_collective(f: impl FnOnce(&Tensor) -> Tensor, edits: &[(&str, &str)]) -> String {
    let mesh = AbstractMesh::auto(&[("x", 2), ("y", 2)]).unwrap();
    let spec = PartitionSpec::parse("P('x', 'y')").unwrap();
    let traced = shard_map_program(
        &mesh,
        std::slice::from_ref(&spec),
        std::slice::from_ref(&spec),
        &[ShapedArray::new(DType::F32, &[4, 8])],
        |a| vec![f(&a[0])],
    )
    .unwrap();
    let mut text = print_closed(&traced, 0);
    for (from, to) in edits {
        assert!(text.contains(from), "{from}: {text}");
        text = text.replace(from, to);
    }
    let options = LowerOptions {
        num_partitions: 4,
        ..LowerOptions::default()
    };
    lower_closed(&program(&text), &options).unwrap().text
}

#[test]
fn negative_collective_dimensions_lower_as_their_positions() {
    let gather = |x: &Tensor| x.all_gather("y", 1, true);
    let gather_new = |x: &Tensor| x.all_gather("y", 2, false).reshape(&[2, 8]);
    let scatter = |x: &Tensor| x.psum_scatter("x", 1, true);
    let scatter_untiled = |x: &Tensor| x.reshape(&[2, 2, 2]).psum_scatter("x", 2, false);
    let exchange = |x: &Tensor| x.all_to_all("y", 1, 0, true);
    type Case<'a> = (
        &'a dyn Fn(&Tensor) -> Tensor,
        Vec<(&'a str, &'a str)>,
        &'a str,
    );
    let cases: [Case; 5] = [
        (
            &gather,
            vec![("all_gather_dimension=1", "all_gather_dimension=-1")],
            "all_gather_dim = 1",
        ),
        (
            &gather_new,
            vec![("all_gather_dimension=2", "all_gather_dimension=-1")],
            "all_gather_dim = 2",
        ),
        (
            &scatter,
            vec![("scatter_dimension=1", "scatter_dimension=-1")],
            "scatter_dimension = 1",
        ),
        (
            &scatter_untiled,
            vec![("scatter_dimension=2", "scatter_dimension=-1")],
            "scatter_dimension = 2",
        ),
        (
            &exchange,
            vec![
                ("concat_axis=0", "concat_axis=-2"),
                ("split_axis=1", "split_axis=-1"),
            ],
            "split_dimension = 1",
        ),
    ];
    for (f, edits, attr) in cases {
        let positive = lower_collective(f, &[]);
        assert!(positive.contains(attr), "{attr}: {positive}");
        assert_eq!(lower_collective(f, &edits), positive, "{edits:?}");
    }
}
