//! Mutated and random text never panics the parser; whatever parses is verified and, when small
//! and valid, evaluated without panicking; valid texts print and parse back to the same IR.

use proptest::prelude::*;
use tessera_ir::interp::{Array, eval_closed};
use tessera_ir::text::{parse_closed_jaxpr, print_jaxpr};
use tessera_ir::verify::verify_closed;
use tessera_ir::{ClosedJaxpr, Jaxpr, Primitive};

fn oracle_texts() -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/oracle/jaxpr_cases.json");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    json["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["jaxpr"].as_str().map(String::from))
        .collect()
}

fn largest_aval(j: &Jaxpr) -> usize {
    let nested = j.eqns.iter().filter_map(|e| match &e.prim {
        Primitive::Jit { jaxpr, .. } => Some(largest_aval(&jaxpr.jaxpr)),
        _ => None,
    });
    j.vars
        .iter()
        .map(|a| a.size())
        .chain(nested)
        .max()
        .unwrap_or(0)
}

/// Parses, and when that works verifies, round-trips and (if small) evaluates on zeros.
fn exercise(text: &str) {
    let Ok(cj) = parse_closed_jaxpr(text) else {
        return;
    };
    let again = parse_closed_jaxpr(&print_jaxpr(&cj.jaxpr)).expect("printed text parses");
    assert_eq!(again, cj);
    if verify_closed(&cj).is_err() || largest_aval(&cj.jaxpr) > 100_000 {
        return;
    }
    let args: Vec<Array> = cj
        .jaxpr
        .in_avals()
        .iter()
        .filter_map(|a| Array::from_f64(a.dtype, &a.shape, &vec![0.5; a.size()]).ok())
        .collect();
    let _ = eval_closed(&ClosedJaxpr::new(cj.jaxpr.clone()), &args);
}

#[derive(Debug, Clone)]
enum Edit {
    Delete(usize, usize),
    Insert(usize, String),
    Replace(usize, char),
}

fn edit() -> impl Strategy<Value = Edit> {
    let piece = prop::sample::select(vec![
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        ":",
        "=",
        ",",
        ".",
        " ",
        "\n",
        "-",
        "0",
        "9",
        "1e400",
        "a",
        "f32",
        "bool",
        "i32[]",
        "lambda",
        "in",
        "let",
        "jit[",
        "np.int64(",
    ]);
    prop_oneof![
        (any::<usize>(), 1usize..20).prop_map(|(i, n)| Edit::Delete(i, n)),
        (any::<usize>(), piece).prop_map(|(i, p)| Edit::Insert(i, p.to_string())),
        (any::<usize>(), any::<char>()).prop_map(|(i, c)| Edit::Replace(i, c)),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for e in edits {
        let n = chars.len().max(1);
        match e {
            Edit::Delete(i, k) => {
                let s = i % n;
                let end = (s + k).min(chars.len());
                chars.drain(s.min(end)..end);
            }
            Edit::Insert(i, p) => {
                let s = i % (chars.len() + 1);
                chars.splice(s..s, p.chars());
            }
            Edit::Replace(i, c) => {
                if !chars.is_empty() {
                    let s = i % chars.len();
                    chars[s] = *c;
                }
            }
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn mutated_oracle_text_never_panics(case in 0usize..36, edits in prop::collection::vec(edit(), 1..4)) {
        let texts = oracle_texts();
        prop_assert_eq!(texts.len(), 36);
        exercise(&apply(&texts[case % texts.len()], &edits));
    }

    #[test]
    fn random_text_never_panics(text in "\\PC{0,200}") {
        exercise(&text);
    }

    #[test]
    fn deep_nesting_is_an_error(depth in 65usize..400) {
        let text = format!("{{ lambda ; a:f32[]. let\n    b:f32[] = integer_pow[y={}2{}] a\n  in (b,) }}", "(".repeat(depth), ")".repeat(depth));
        prop_assert!(parse_closed_jaxpr(&text).is_err());
    }
}
