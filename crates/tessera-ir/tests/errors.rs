//! Malformed text, ill-typed programs and tracing misuse give errors that say what is wrong.

use expect_test::{Expect, expect};
use tessera_ir::interp::{Array, eval_closed};
use tessera_ir::text::parse_closed_jaxpr;
use tessera_ir::trace::{Tensor, trace};
use tessera_ir::verify::verify_closed;
use tessera_ir::{DType, ShapedArray};

fn check(actual: String, expect: Expect) {
    expect.assert_eq(&actual);
}

fn parse_err(text: &str) -> String {
    match parse_closed_jaxpr(text) {
        Ok(j) => format!("parsed:\n{j}"),
        Err(e) => e.to_string(),
    }
}

fn verify_err(text: &str) -> String {
    match parse_closed_jaxpr(text).map(|j| verify_closed(&j)) {
        Ok(Ok(())) => "ok".into(),
        Ok(Err(e)) => e.to_string(),
        Err(e) => format!("parse: {e}"),
    }
}

#[test]
fn parse_errors_point_at_line_and_column() {
    check(
        parse_err(""),
        expect!["line 1, column 1: expected `{`, found the end of the text"],
    );
    check(
        parse_err("{ lambda ; a:q32[2]. let\n  in (a,) }"),
        expect![
            "line 1, column 14: unknown dtype `q32`; expected bool, i8..i64, u8..u64, bf16, f16, f32 or f64"
        ],
    );
    check(
        parse_err("{ lambda ; a:f32[2]. let\n    b:f32[2] = frobnicate a\n  in (b,) }"),
        expect!["line 2, column 16: unknown primitive `frobnicate`"],
    );
    check(
        parse_err("{ lambda ; a:f32[2]. let\n    b:f32[2] = neg c\n  in (b,) }"),
        expect!["line 2, column 20: `c` is not defined; every variable is bound before its use"],
    );
    check(
        parse_err("{ lambda ; a:f32[2]. let\n    a:f32[2] = neg a\n  in (a,) }"),
        expect!["line 2, column 5: `a` is bound twice; a jaxpr is in SSA form"],
    );
    check(
        parse_err("{ lambda ; a:f32[2]. let\n    b:f32[2] = integer_pow[z=2] a\n  in (b,) }"),
        expect!["line 2, column 16: integer_pow: missing param `y`"],
    );
    check(
        parse_err("{ lambda ; a:f32[2]. let\n    b:f32[2] = add a 1.0:f32[3]\n  in (b,) }"),
        expect!["line 2, column 22: a literal must have a rank-0 type like `f32[]`"],
    );
    check(
        parse_err("{ lambda ; a:f32[2]. let $ in (a,) }"),
        expect!["line 1, column 26: unexpected character '$'"],
    );
}

#[test]
fn ill_typed_programs_fail_verification_with_context() {
    check(
        verify_err(
            "{ lambda ; a:f32[2] b:f32[3]. let\n    c:f32[2] = neg a\n    d:f32[2] = add c b\n    e:f32[2] = exp d\n  in (e,) }",
        ),
        expect![[r#"
            add: operand shapes do not broadcast; they need one rank with equal or size-1 dimensions (or rank 0) (operands: f32[2], f32[3]) (equation 1):
              c:f32[2] = neg a
            >>d:f32[2] = add c b
              e:f32[2] = exp d"#]],
    );
    check(
        verify_err("{ lambda ; a:f32[2]. let\n    b:i32[2] = neg a\n  in (b,) }"),
        expect![[r#"
            a result has type i32[2] but the shape rule gives f32[2] (equation 0):
            >>b:i32[2] = neg a"#]],
    );
    check(
        verify_err(
            "{ lambda ; a:f32[2,3]. let\n    b:f32[4] = reshape[dimensions=None new_sizes=(4,) sharding=None] a\n  in (b,) }",
        ),
        expect![[r#"
        reshape: cannot reshape 6 elements to [4] (operands: f32[2,3]) (equation 0):
        >>b:f32[4] = reshape[dimensions=None new_sizes=(4,) sharding=None] a"#]],
    );
}

#[test]
fn evaluating_with_wrong_inputs_is_an_error() {
    let cj = parse_closed_jaxpr("{ lambda ; a:f32[2]. let\n    b:f32[2] = neg a\n  in (b,) }")
        .expect("parses");
    let bad = Array::from_f64(DType::I32, &[2], &[1.0, 2.0]).expect("fits");
    check(
        eval_closed(&cj, &[bad])
            .map(|_| ())
            .unwrap_err()
            .to_string(),
        expect!["bad input: argument of type i32[2] given for a parameter of type f32[2]"],
    );
    check(
        eval_closed(&cj, &[]).map(|_| ()).unwrap_err().to_string(),
        expect!["bad input: the jaxpr takes 1 arguments and 0 constants, got 0 and 0"],
    );
}

#[test]
fn tracing_errors_name_the_operation_and_shapes() {
    let f = |s: &[usize]| ShapedArray::new(DType::F32, s);
    let e = trace(&[f(&[2, 3]), f(&[4, 5])], |x: Tensor, w: Tensor| {
        x.matmul(&w)
    })
    .unwrap_err();
    check(
        e.to_string(),
        expect![
            "dot_general: contracting or batch dimension sizes differ (operands: f32[2,3], f32[4,5])"
        ],
    );
    let e = trace(&[f(&[2, 3])], |x: Tensor| x.sum(&[2], false)).unwrap_err();
    check(
        e.to_string(),
        expect!["reduce_sum: axis 2 is out of range for f32[2,3]"],
    );
    let e = trace(&[f(&[2, 3]), f(&[3, 2])], |x: Tensor, y: Tensor| x + y).unwrap_err();
    check(
        e.to_string(),
        expect![
            "add: operand shapes do not broadcast; they need one rank with equal or size-1 dimensions (or rank 0) (operands: f32[2,3], f32[3,2])"
        ],
    );
    let e = trace(&[f(&[2])], |x: Tensor, y: Tensor| x + y).unwrap_err();
    check(
        e.to_string(),
        expect!["the function takes 2 arguments but 1 avals were given"],
    );
}
