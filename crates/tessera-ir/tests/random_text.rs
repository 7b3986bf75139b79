//! Issue 20 B in the text form: typed keys print and parse back, operand lists JAX wraps onto
//! a second line parse, and ill-typed PRNG and bit equations are refused (by the parser or the
//! verifier) with errors naming the primitive.

#![allow(clippy::unwrap_used, missing_docs)]

use tessera_ir::text::{parse_closed, print_closed};

const WRAPPED: &str = "{ lambda ; o:u32[2]. let
    p:key<fry>[] = random_wrap[impl=fry] o
    q:f32[2] = jit[
      name=_uniform
      jaxpr={ lambda ; a:key<fry>[] b:f32[] c:f32[]. let
          d:u32[2] = random_bits[bit_width=32 shape=(2,)] a
          e:u32[2] = shift_right_logical d 9:u32[]
          f:f32[2] = bitcast_convert_type[new_dtype=float32] e
          g:f32[2] = mul f b
          h:f32[2] = add g c
        in (h,) }
    ] p -0.9999999403953552:f32[]
      1.0:f32[]
    r:f32[2] = erf_inv q
  in (r,) }";

#[test]
fn keys_and_wrapped_operands_round_trip() {
    let program = parse_closed(WRAPPED).unwrap();
    assert_eq!(program.jaxpr.eqns.len(), 3);
    assert_eq!(
        program.jaxpr.eqns[1].inputs.len(),
        3,
        "the wrapped operand is read"
    );
    let printed = print_closed(&program, 0);
    assert!(printed.contains("key<fry>[]"), "{printed}");
    let again = parse_closed(&printed).unwrap();
    assert_eq!(print_closed(&again, 0), printed);
}

#[test]
fn ill_typed_prng_and_bit_equations_are_refused() {
    let cases = [
        (
            "{ lambda ; a:u32[3]. let b:key<fry>[] = random_wrap[impl=fry] a in (b,) }",
            "random_wrap: needs key data whose last dimension is 2",
        ),
        (
            "{ lambda ; a:u32[2]. let b:key<fry>[] = random_wrap[impl=rbg] a in (b,) }",
            "random_wrap: parameter `impl`",
        ),
        (
            "{ lambda ; a:u32[2]. let b:u32[2] = random_bits[bit_width=32 shape=(2,)] a in (b,) }",
            "random_bits: needs a key<fry> operand",
        ),
        (
            "{ lambda ; a:f32[2]. let b:u16[2] = bitcast_convert_type[new_dtype=uint16] a in (b,) }",
            "bitcast_convert_type: converts between dtypes of one width",
        ),
        (
            "{ lambda ; a:f32[2]. let b:f32[2] = shift_left a a in (b,) }",
            "shift_left: needs integer operands",
        ),
        (
            "{ lambda ; a:i32[2]. let b:i32[2] = erf a in (b,) }",
            "erf: needs floating-point operands",
        ),
        (
            "{ lambda ; a:key<rbg>[]. let in (a,) }",
            "unknown dtype `key<rbg>`",
        ),
    ];
    for (text, want) in cases {
        let err = parse_closed(text)
            .and_then(|p| tessera_ir::verify(&p))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(want), "{text}\ngot {err:?}, want {want:?}");
    }
}

#[test]
fn constant_folding_keeps_keys_as_equations() {
    // A key has no literal form: `random_seed` of a literal stays an equation.
    let text = "{ lambda ; . let
    k:key<fry>[] = random_seed[impl=fry] 7:i32[]
    b:u32[2] = random_unwrap k
  in (b,) }";
    let program = parse_closed(text).unwrap();
    let folded = tessera_ir::passes::fold_constants(&program);
    tessera_ir::verify(&folded).unwrap();
    let printed = print_closed(&folded, 0);
    assert!(printed.contains("random_seed"), "{printed}");
    parse_closed(&printed).unwrap();
    let out = tessera_ir::interp::eval_closed(&folded, &[]).unwrap();
    assert_eq!(out[0].to_vec(), [0.0, 7.0]);
}
