//! Runs the JAX oracle file through parse, print, verify and the interpreter.
#![cfg(feature = "oracle")]

use tessera_ir::oracle::{Backend, run_file};

#[test]
fn jaxpr_oracle_cases_pass() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/oracle/jaxpr_cases.json");
    let report = run_file(&path, Backend::Interp).expect("the oracle file is readable");
    assert_eq!(report.failures, Vec::<String>::new());
    assert_eq!(report.passed, 36);
}

#[test]
fn printing_parsed_oracle_jaxprs_gives_the_jax_text_back() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/oracle/jaxpr_cases.json");
    let text = std::fs::read_to_string(path).expect("the oracle file is readable");
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let cases = json["cases"].as_array().expect("a list of cases");
    let mut differing = Vec::new();
    for case in cases {
        let src = case["jaxpr"].as_str().expect("jaxpr text");
        let j = tessera_ir::text::parse_jaxpr(src).expect("parses");
        let printed = tessera_ir::text::print_jaxpr(&j);
        if printed != src {
            differing.push(format!("{}:\n{printed}", case["name"]));
        }
    }
    assert_eq!(differing, Vec::<String>::new());
    assert_eq!(cases.len(), 36);
}
