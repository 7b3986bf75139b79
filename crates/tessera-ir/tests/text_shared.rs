//! The parser and printer on JAX 0.10's shared sub-jaxprs (`let NAME = { lambda ... } in` before
//! the program, `jaxpr=NAME` references, definitions referring to later ones) and on operand
//! lists JAX wraps onto further lines.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::text::{parse_closed, parse_closed_with_consts, print_closed};

fn real_case(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/oracle/jaxpr_real_cases.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    json["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .map(|c| c["jaxpr"].as_str().unwrap().to_owned())
        .unwrap()
}

/// The `let` definitions before the program (through the `{` opening it).
fn definitions(text: &str) -> &str {
    &text[..text.rfind("} in\n{").map_or(0, |i| i + 6)]
}

#[test]
fn shared_sub_jaxprs_print_back_as_jax_printed_them() {
    // JAX 0.10 names a `jit` body's binders after its caller's variables, which Tessera does
    // not do; the definitions before the program and the references to them are JAX's.
    for name in ["take_modes_0", "take_modes_1"] {
        let text = real_case(name);
        let program = parse_closed_with_consts(&text, &[]).unwrap();
        let printed = print_closed(&program, 0);
        assert!(!definitions(&text).is_empty(), "{name}");
        assert_eq!(definitions(&printed), definitions(&text), "{name}");
        assert_eq!(
            printed.matches("jaxpr=_where").count(),
            text.matches("jaxpr=_where").count()
        );
        assert_eq!(parse_closed(&printed).unwrap(), program, "{name}");
    }
}

const FORWARD: &str = "let outer = { lambda ; a:f32[2] b:f32[2]. let
    c:f32[2] = jit[name=inner jaxpr=inner] a b
    d:f32[2] = neg c
  in (d,) } in
let inner = { lambda ; e:f32[2] f:f32[2]. let
    g:f32[2] = mul e f
  in (g,) } in
{ lambda ; h:f32[2] i:f32[2]. let
    j:f32[2] = jit[name=outer jaxpr=outer] h i
    k:f32[2] = jit[name=outer jaxpr=outer] j i
    l:f32[2] = jit[name=inner jaxpr=inner] k
      h
  in (l,) }";

#[test]
fn definitions_may_refer_to_later_ones_and_operands_may_wrap() {
    let program = parse_closed(FORWARD).unwrap();
    tessera_ir::verify(&program).unwrap();
    let x = tessera_ir::Array::from_values(
        tessera_ir::DType::F32,
        ndarray::arr1(&[2.0, 3.0]).into_dyn(),
    );
    let y = tessera_ir::Array::from_values(
        tessera_ir::DType::F32,
        ndarray::arr1(&[5.0, 7.0]).into_dyn(),
    );
    let out = tessera_ir::interp::eval_closed(&program, &[x, y]).unwrap();
    // l = (-(-(h*i)*i)) * h = h^2 i^2
    assert_eq!(out[0].to_vec(), vec![100.0, 441.0]);
    let printed = print_closed(&program, 0);
    // Both definitions are used twice (`inner` once more through each call of `outer`), so
    // both come before the program, `outer` first as JAX's breadth-first walk finds it.
    assert!(printed.starts_with("let outer = { lambda ; a:f32[2] b:f32[2]. let\n    c:f32[2] = jit[name=inner jaxpr=inner] a b"), "{printed}");
    assert!(
        printed.contains("} in\nlet inner = { lambda ; e:f32[2] f:f32[2]. let"),
        "{printed}"
    );
    assert_eq!(parse_closed(&printed).unwrap(), program);
}

#[test]
fn a_jaxpr_used_once_stays_in_place() {
    let text = "{ lambda ; a:f32[2]. let
    b:f32[2] = jit[
      name=f
      jaxpr={ lambda ; c:f32[2]. let
          d:f32[2] = sin c
        in (d,) }
    ] a
  in (b,) }";
    let program = parse_closed(text).unwrap();
    assert_eq!(print_closed(&program, 0), text);
}

#[test]
fn an_unknown_definition_name_is_an_error_naming_its_line() {
    let text = "{ lambda ; a:f32[2]. let\n    b:f32[2] = jit[name=f jaxpr=missing] a\n  in (b,) }";
    let err = parse_closed(text).unwrap_err().to_string();
    assert!(err.contains("line 2"), "{err}");
}
