//! A parameter given twice in an equation is refused when the text is parsed, naming the
//! parameter, the primitive and the line, whether the two values differ or not: JAX prints each
//! parameter once, and silently keeping one of two would run another program than the text
//! says.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::IrError;
use tessera_ir::text::parse_closed;

/// A `scan` as JAX 0.10.1 prints `lax.fori_loop(0, 3, lambda _, c: sin(c), x)`, with `extra`
/// added to its parameters.
fn scan(extra: &str) -> String {
    format!(
        "{{ lambda ; a:f32[4]. let
    _:i32[] b:f32[4] = scan[
      jaxpr={{ lambda ; c:i32[] d:f32[4]. let
          e:i32[] = add c 1:i32[]
          f:f32[4] = sin d
        in (e, f) }}
      length=3
      num_carry=2
      num_consts=0
      reverse=False
      unroll=1{extra}
    ] 0:i32[] a
  in (b,) }}"
    )
}

/// The parse error of `text`: its line and message.
fn parse_error(text: &str) -> (usize, String) {
    match parse_closed(text) {
        Err(IrError::Parse { line, message, .. }) => (line, message),
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn the_scan_parses_without_the_repeated_parameter() {
    let program = parse_closed(&scan("")).unwrap();
    assert_eq!(program.jaxpr.eqns[0].params.entries().len(), 6);
}

#[test]
fn a_repeated_scan_parameter_is_refused_naming_it_and_its_line() {
    for (extra, param, line) in [
        ("\n      reverse=True", "reverse", 12),
        ("\n      num_carry=1", "num_carry", 12),
        // The same value again is refused too: JAX never prints a parameter twice.
        ("\n      length=3", "length", 12),
        (" num_consts=0", "num_consts", 11),
    ] {
        let (at, message) = parse_error(&scan(extra));
        assert_eq!(at, line, "{message}");
        assert!(
            message.contains(&format!("`scan` is given parameter `{param}` twice")),
            "{message}"
        );
    }
    let (_, message) = parse_error(&scan("\n      reverse=True"));
    assert!(
        message.contains("(`reverse=False`, then `reverse=True`)"),
        "{message}"
    );
}

#[test]
fn a_repeated_parameter_in_a_nested_jaxpr_or_on_one_line_is_refused() {
    let bits = "{ lambda ; a:u32[2]. let
    b:key<fry>[] = random_wrap[impl=fry] a
    c:u32[2] = random_bits[bit_width=32 shape=(2,) bit_width=31] b
  in (c,) }";
    let (line, message) = parse_error(bits);
    assert_eq!(line, 3);
    assert!(
        message.contains(
            "`random_bits` is given parameter `bit_width` twice (`bit_width=32`, then `bit_width=31`)"
        ),
        "{message}"
    );
    let nested = "{ lambda ; a:f32[3]. let
    b:f32[] = jit[
      name=f
      jaxpr={ lambda ; c:f32[3]. let
          d:f32[] = reduce_sum[axes=(0,) axes=(0,)] c
        in (d,) }
    ] a
  in (b,) }";
    let (line, message) = parse_error(nested);
    assert_eq!(line, 5);
    assert!(
        message.contains("`reduce_sum` is given parameter `axes` twice"),
        "{message}"
    );
    let jaxprs = "{ lambda ; a:f32[3]. let
    b:f32[3] = jit[
      name=f
      jaxpr={ lambda ; c:f32[3]. let d:f32[3] = neg c in (d,) }
      jaxpr={ lambda ; c:f32[3]. let d:f32[3] = sin c in (d,) }
    ] a
  in (b,) }";
    let (line, message) = parse_error(jaxprs);
    assert_eq!(line, 5);
    assert!(
        message.contains("`jit` is given parameter `jaxpr` twice (`jaxpr={ lambda ... }`"),
        "{message}"
    );
}
