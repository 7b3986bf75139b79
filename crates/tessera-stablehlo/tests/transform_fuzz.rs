//! Hostile programs through the transformations and the lowering: small edits of JAX's oracle
//! programs (a digit changed, an axis name swapped, a character deleted) that still parse and
//! verify go through `jvp`, `vjp`, `vmap` and `lower_closed`; each returns a result or an error,
//! never a panic. (`tessera-ir`'s `parser_fuzz.rs` does the same for parsing and evaluation.)

#![allow(clippy::unwrap_used, missing_docs)]

use proptest::prelude::*;
use tessera_ir::autodiff::{jvp, vjp};
use tessera_ir::batching::vmap;
use tessera_ir::text::parse_closed;
use tessera_stablehlo::{LowerOptions, lower_closed};

/// Every program of JAX's oracle files.
fn oracle_texts() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/oracle");
    [
        "jaxpr_cases.json",
        "jaxpr_real_cases.json",
        "jaxpr_collectives_cases.json",
        "jaxpr_sharded_cases.json",
    ]
    .iter()
    .flat_map(|f| {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        json["cases"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["jaxpr"].as_str().map(str::to_owned))
            .collect::<Vec<_>>()
    })
    .collect()
}

#[derive(Debug, Clone)]
enum Edit {
    /// The `k`-th digit (counted cyclically) becomes `d`.
    Digit(usize, char),
    /// The `k`-th quoted axis name becomes another.
    Axis(usize, &'static str),
    /// A character deleted.
    Delete(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (any::<usize>(), prop::sample::select(vec!['0', '1', '2', '3', '4', '7', '9']))
            .prop_map(|(k, d)| Edit::Digit(k, d)),
        1 => (any::<usize>(), prop::sample::select(vec!["'i'", "'x'", "'data'", "'model'", "'zz'"]))
            .prop_map(|(k, a)| Edit::Axis(k, a)),
        1 => any::<usize>().prop_map(Edit::Delete),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut text = text.to_owned();
    for e in edits {
        match e {
            Edit::Digit(k, d) => {
                let digits: Vec<usize> = text
                    .char_indices()
                    .filter(|(_, c)| c.is_ascii_digit())
                    .map(|(i, _)| i)
                    .collect();
                if !digits.is_empty() {
                    let at = digits[k % digits.len()];
                    text.replace_range(at..at + 1, &d.to_string());
                }
            }
            Edit::Axis(k, name) => {
                let quoted: Vec<(usize, usize)> = text
                    .match_indices('\'')
                    .map(|(i, _)| i)
                    .collect::<Vec<_>>()
                    .chunks(2)
                    .filter(|p| p.len() == 2)
                    .map(|p| (p[0], p[1] + 1))
                    .collect();
                if !quoted.is_empty() {
                    let (a, b) = quoted[k % quoted.len()];
                    text.replace_range(a..b, name);
                }
            }
            Edit::Delete(k) => {
                let chars: Vec<(usize, char)> = text.char_indices().collect();
                if !chars.is_empty() {
                    let (at, c) = chars[k % chars.len()];
                    text.replace_range(at..at + c.len_utf8(), "");
                }
            }
        }
    }
    text
}

/// Everything a program may go through; only errors may come out.
fn exercise(text: &str) -> bool {
    let Ok(program) = parse_closed(text) else {
        return false;
    };
    if tessera_ir::verify(&program).is_err() {
        return false;
    }
    let _ = jvp(&program);
    let _ = vjp(&program);
    let n = program.jaxpr.invars.len();
    let outs = program.jaxpr.outvars.len();
    let _ = vmap(&program, &vec![Some(0); n], &vec![0; outs], 2);
    let _ = lower_closed(&program, &LowerOptions::default());
    true
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn edited_oracle_programs_transform_and_lower_without_panics(
        case in any::<usize>(),
        edits in prop::collection::vec(edit(), 1..3),
    ) {
        let texts = oracle_texts();
        exercise(&apply(&texts[case % texts.len()], &edits));
    }
}

/// The unedited programs go through (so the edited ones start from working programs); those
/// with constants need them from the caller and stop at parsing.
#[test]
fn the_oracle_programs_go_through() {
    let texts = oracle_texts();
    let through = texts.iter().filter(|t| exercise(t)).count();
    assert!(
        through * 10 >= texts.len() * 9,
        "{through} of {}",
        texts.len()
    );
}

/// A case the fuzzer found (2026-11-30): an edit that leaves a windowed maximum's window with a
/// zero dimension made its JVP index the first of no window positions and panic; it is now a
/// trace error.
#[test]
fn a_window_of_no_elements_is_an_error_not_a_panic() {
    let texts = oracle_texts();
    let edits = [
        Edit::Digit(11716247666037863441, '0'),
        Edit::Digit(16066901947953148665, '3'),
    ];
    exercise(&apply(&texts[7666440408831399051 % texts.len()], &edits));
}
