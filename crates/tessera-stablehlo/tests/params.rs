//! Parameters the lowering reads through `tessera-ir`'s typed readers, so it emits what the
//! interpreter computes: `round`'s `rounding_method` picks the StableHLO operation, `sort`'s
//! `is_stable` is the one `SortParams` reads, and a malformed or missing value is an error,
//! never a default.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::ClosedJaxpr;
use tessera_ir::text::parse_closed;
use tessera_stablehlo::{LowerOptions, lower_closed};

fn program(text: &str) -> ClosedJaxpr {
    parse_closed(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn lower(text: &str) -> Result<String, String> {
    lower_closed(&program(text), &LowerOptions::default())
        .map(|m| m.text)
        .map_err(|e| e.to_string())
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
    for method in ["2", "True", "RoundingMethod.UP"] {
        let err = round(method).err().unwrap_or_default();
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
    let err = sort("dimension=0 num_keys=1").err().unwrap_or_default();
    assert!(err.contains("is_stable"), "{err:?}");
}
