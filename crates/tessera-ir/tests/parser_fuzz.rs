//! Malformed jaxpr text and ill-typed programs give errors, never panics: mutations of every
//! oracle program (deleted, duplicated and replaced characters, truncations) and arbitrary
//! strings go through parse, verify and (when they verify) evaluation.

#![allow(clippy::unwrap_used, missing_docs)]

use proptest::prelude::*;
use tessera_ir::text::parse_closed;

/// Every program of JAX's oracle files (the plain, real-model, collectives and sharded cases).
fn oracle_texts() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/oracle");
    let files = [
        "jaxpr_cases.json",
        "jaxpr_real_cases.json",
        "jaxpr_collectives_cases.json",
        "jaxpr_sharded_cases.json",
    ];
    files
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

/// Programs the wider fuzzing of every oracle file found panicking, each now an error naming
/// the problem: a `cond` branch with an ill-formed equation (nested jaxprs inside a tuple were
/// not verified), a scatter whose window dimension lies outside its updates, and a window
/// padding that overflows.
#[test]
fn programs_that_once_panicked_are_refused() {
    let branch = "{ lambda ; a:f32[3] b:i32[]. let
    e:f32[3] = cond[
      branches=(
        { lambda ; f:f32[3]. let g:f32[3] = cos f in (g,) }
        { lambda ; i:f32[3]. let k:f32[3] = mul i in (k,) }
      )
    ] b a
  in (e,) }";
    let scatter = "{ lambda ; a:f32[5,4] b:i32[2,1] c:f32[2,4]. let
    h:f32[5,4] = scatter-mul[
      dimension_numbers=ScatterDimensionNumbers(update_window_dims=(9,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), operand_batching_dims=(), scatter_indices_batching_dims=())
      indices_are_sorted=False
      mode=GatherScatterMode.FILL_OR_DROP
      unique_indices=False
      update_consts=()
      update_jaxpr={ lambda ; o:f32[] p:f32[]. let q:f32[] = mul o p in (q,) }
    ] a b c
  in (h,) }";
    let window = "{ lambda ; a:f32[3,4]. let
    b:f32[3,2] = reduce_window_max[
      base_dilation=(1, 1)
      padding=((0, 0), (0, 9223372036854775807))
      window_dilation=(1, 1)
      window_dimensions=(1, 2)
      window_strides=(1, 2)
    ] a
  in (b,) }";
    for (text, words) in [
        (branch, "takes 2 operands"),
        (scatter, "do not fit operand"),
        (window, "larger than any array"),
    ] {
        let err = parse_closed(text)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(words), "{words}: {err}");
        exercise(text);
    }
}
