//! DCE, CSE, inlining and constant folding on JAX-made jaxprs; the verifier runs after each and
//! the interpreter checks that values do not change.

use expect_test::{Expect, expect};
use tessera_ir::interp::{Array, eval_closed};
use tessera_ir::passes::{
    eliminate_common_subexpressions, eliminate_dead_code, fold_constants, inline_calls,
};
use tessera_ir::text::parse_closed_jaxpr;
use tessera_ir::verify::verify_closed;
use tessera_ir::{ClosedJaxpr, Jaxpr};

/// Runs `pass` on `text`, verifies the result, checks values on inputs of 0.25 (integers 1) stay
/// the same, and snapshots the printed result.
fn check(text: &str, pass: fn(&Jaxpr) -> Jaxpr, expect: Expect) {
    let before = parse_closed_jaxpr(text).expect("parses");
    verify_closed(&before).expect("input verifies");
    let after = ClosedJaxpr::new(pass(&before.jaxpr));
    verify_closed(&after).expect("output verifies");
    let args: Vec<Array> = before
        .jaxpr
        .in_avals()
        .iter()
        .map(|a| {
            Array::from_f64(
                a.dtype,
                &a.shape,
                &vec![if a.dtype.is_float() { 0.25 } else { 1.0 }; a.size()],
            )
            .expect("fits")
        })
        .collect();
    assert_eq!(
        eval_closed(&before, &args).expect("evaluates"),
        eval_closed(&after, &args).expect("evaluates")
    );
    expect.assert_eq(&after.to_string());
}

const LAYERNORM_PART: &str = "{ lambda ; a:f32[2,5]. let
    d:f32[2] = reduce_sum[axes=(1,) out_sharding=None] a
    e:f32[2,1] = broadcast_in_dim[broadcast_dimensions=(0,)] d
    f:f32[2,1] = div e 5.0:f32[]
    g:f32[2,5] = sub a f
    h:f32[2,5] = integer_pow[y=2] g
    l:f32[2,5] = sub a f
    o:f32[2,5] = mul l h
    p:f32[2,5] = exp o
  in (o,) }";

#[test]
fn dce_drops_unused_equations() {
    check(
        LAYERNORM_PART,
        eliminate_dead_code,
        expect![[r#"
        { lambda ; a:f32[2,5]. let
            b:f32[2] = reduce_sum[axes=(1,) out_sharding=None] a
            c:f32[2,1] = broadcast_in_dim[broadcast_dimensions=(0,)] b
            d:f32[2,1] = div c 5.0:f32[]
            e:f32[2,5] = sub a d
            f:f32[2,5] = integer_pow[y=2] e
            g:f32[2,5] = sub a d
            h:f32[2,5] = mul g f
          in (h,) }"#]],
    );
}

#[test]
fn cse_merges_repeated_equations() {
    check(
        LAYERNORM_PART,
        eliminate_common_subexpressions,
        expect![[r#"
        { lambda ; a:f32[2,5]. let
            b:f32[2] = reduce_sum[axes=(1,) out_sharding=None] a
            c:f32[2,1] = broadcast_in_dim[broadcast_dimensions=(0,)] b
            d:f32[2,1] = div c 5.0:f32[]
            e:f32[2,5] = sub a d
            f:f32[2,5] = integer_pow[y=2] e
            g:f32[2,5] = mul e f
            h:f32[2,5] = exp g
          in (g,) }"#]],
    );
}

#[test]
fn inlining_splices_nested_calls() {
    let text = "{ lambda ; a:f32[2,5]. let
    o:f32[2,5] = jit[
      name=clip
      jaxpr={ lambda ; a:f32[2,5] p:f32[] q:f32[]. let
          r:f32[] = convert_element_type[new_dtype=float32 weak_type=False] p
          s:f32[2,5] = max r a
          t:f32[] = convert_element_type[new_dtype=float32 weak_type=False] q
          o:f32[2,5] = min t s
        in (o,) }
    ] a -0.3:f32[] 0.3:f32[]
    u:f32[2,5] = add a o
  in (u,) }";
    check(
        text,
        inline_calls,
        expect![[r#"
        { lambda ; a:f32[2,5]. let
            b:f32[] = convert_element_type[new_dtype=float32 weak_type=False] -0.3:f32[]
            c:f32[2,5] = max b a
            d:f32[] = convert_element_type[new_dtype=float32 weak_type=False] 0.3:f32[]
            e:f32[2,5] = min d c
            f:f32[2,5] = add a e
          in (f,) }"#]],
    );
}

#[test]
fn folding_evaluates_scalar_literal_equations() {
    let text = "{ lambda ; a:i32[3]. let
    b:i32[] = add 2:i32[] 3:i32[]
    c:i32[] = mul b 4:i32[]
    d:f32[] = convert_element_type[new_dtype=float32 weak_type=False] c
    e:i32[3] = add a c
    f:bool[] = lt 1.0:f32[] d
  in (e, d, f) }";
    check(
        text,
        fold_constants,
        expect![[r#"
        { lambda ; a:i32[3]. let
            b:i32[3] = add a 20:i32[]
          in (b, 20.0:f32[], True:bool[]) }"#]],
    );
}
