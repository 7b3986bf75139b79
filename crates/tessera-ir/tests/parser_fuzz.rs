//! Malformed jaxpr text and ill-typed programs give errors, never panics: mutations of the
//! oracle programs (deleted, duplicated and replaced characters, truncations) and arbitrary
//! strings go through parse, verify and (when they verify) evaluation.

#![allow(clippy::unwrap_used, missing_docs)]

use proptest::prelude::*;
use tessera_ir::text::parse_closed;

fn oracle_texts() -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/oracle/jaxpr_cases.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    json["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["jaxpr"].as_str().unwrap().to_owned())
        .collect()
}

/// Parses, verifies and evaluates on zeros; only errors are allowed to come out.
fn exercise(text: &str) {
    if let Ok(program) = parse_closed(text)
        && tessera_ir::verify(&program).is_ok()
    {
        let args: Vec<_> = program
            .jaxpr
            .in_avals()
            .iter()
            .map(tessera_ir::Array::zeros)
            .collect();
        let _ = tessera_ir::interp::eval_closed(&program, &args);
    }
}

#[derive(Debug, Clone)]
enum Edit {
    Delete(usize, usize),
    Duplicate(usize, usize),
    Replace(usize, char),
    Truncate(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1usize..8).prop_map(|(a, n)| Edit::Delete(a, n)),
        (any::<usize>(), 1usize..16).prop_map(|(a, n)| Edit::Duplicate(a, n)),
        (
            any::<usize>(),
            prop::sample::select(vec![
                '(', ')', '[', ']', '{', '}', ',', ':', '=', '-', '9', 'x', '\n', ' ', 'e', '.'
            ])
        )
            .prop_map(|(a, c)| Edit::Replace(a, c)),
        any::<usize>().prop_map(Edit::Truncate),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for e in edits {
        let n = chars.len().max(1);
        match *e {
            Edit::Delete(at, len) => {
                let at = at % n;
                chars.drain(at..(at + len).min(chars.len()));
            }
            Edit::Duplicate(at, len) => {
                let at = at % n;
                let piece: Vec<char> =
                    chars[at.min(chars.len())..(at + len).min(chars.len())].to_vec();
                chars.splice(at.min(chars.len())..at.min(chars.len()), piece);
            }
            Edit::Replace(at, c) => {
                if !chars.is_empty() {
                    chars[at % n] = c;
                }
            }
            Edit::Truncate(at) => chars.truncate(at % n),
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn mutated_oracle_programs_never_panic(case in 0usize..36, edits in prop::collection::vec(edit(), 1..4)) {
        let texts = oracle_texts();
        exercise(&apply(&texts[case % texts.len()], &edits));
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        exercise(&text);
    }

    #[test]
    fn token_soup_never_panics(tokens in prop::collection::vec(prop::sample::select(vec![
        "{", "}", "lambda", ";", ".", "let", "in", "(", ")", "a:f32[2]", "b:i32[]", "=", "add", "a", "b",
        "jit[", "]", "jaxpr=", "1.0:f32[]", ",", "\n", "broadcast_in_dim[", "shape=(2,)", "reduce_sum[axes=(0,)]",
        "dot_general[", "dimension_numbers=(([0], [0]), ([], []))", "np.int64(3)", "c:f32[2,2]", "pad[padding_config=((1, 1, 0),)]",
    ]), 0..40)) {
        exercise(&tokens.join(" "));
    }
}

#[test]
fn parse_errors_point_at_line_and_column() {
    let err = parse_closed("{ lambda ; a:f32[2]. let\n    b:f32[2] = frobnicate a\n  in (b,) }")
        .unwrap_err();
    assert_eq!(
        err.to_string().split(" (found").next().unwrap(),
        "parse error at line 2, column 16: unknown primitive `frobnicate`"
    );
    let err = parse_closed("{ lambda ; a:f32[2]. let\n  in (z,) }").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("parse error at line 2, column 7: unknown variable `z`"),
        "{err}"
    );
}
